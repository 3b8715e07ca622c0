"""The end-of-run wall-time line of the parallel commands (walk-forward, universe)."""

import os

from riskppo.monitor.progress import wall_time_line


def test_wall_time_line_counts_cells_workers_and_cores() -> None:
    cores = os.cpu_count() or 1
    line = wall_time_line("riskppo walkforward", 21, 2, 3725.4)
    assert line.startswith("riskppo walkforward: 21 cells trained in 1:02:05 wall time, ")
    assert line.endswith(f"2 worker processes on {cores} core{'s' * (cores != 1)}")
    assert "1 cell trained" in wall_time_line("x", 1, 1, 0.0)
    assert "1 worker process on" in wall_time_line("x", 1, 1, 0.0)
