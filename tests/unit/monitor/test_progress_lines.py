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


def test_a_resumed_bar_counts_the_whole_run_and_its_eta_the_work_since(monkeypatch) -> None:
    """A bar that starts at the steps already trained shows the whole run's count; its ETA is
    reckoned from the steps done since it started (counting the earlier ones as done in no time
    made it far too short)."""
    from riskppo.monitor import progress

    times = [100.0, 110.0]  # the bar starts at t = 100 s; the line is drawn at t = 110 s
    monkeypatch.setattr(progress.time, "monotonic", lambda: times.pop(0) if times[1:] else times[0])
    bar = progress.training_progress(2048, True, start=1536)
    bar.plain = True
    bar.completed = 1792  # 256 steps in 10 s: the last 256 take 10 s more
    assert bar.plain_line() == (
        "training: 1,792/2,048 steps (88%)  elapsed 0:00:10  ETA 0:00:10  fps -  return -"
    )
