"""``riskppo universe`` end to end with a tiny budget: two stocks, two seeds, two workers; the
whole process group is SIGKILLed while a cell trains, and ``--resume`` leaves the finished cells
alone and completes the rest from their checkpoints. Stopped by Ctrl-C or SIGTERM, a universe
stops its cells at a checkpoint and says how to continue; killed, it takes its cells along."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.processes import (
    alive,
    as_a_terminal_starts_it,
    commands,
    reaped,
    spawned_workers,
    stop_as_users_do,
)

ROOT = Path(__file__).parents[2]
TINY = [
    "total_timesteps=512",
    "env.n_envs=2",
    "ppo.n_steps=32",
    "ppo.batch_size=64",
    "checkpoint.every_updates=2",
]


def universe(*args: str, **kwargs) -> subprocess.Popen[str]:
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "riskppo.cli", "universe", "--no-progress", *args]
    return subprocess.Popen(cmd, env=env, text=True, **kwargs)


def finished(cell: Path) -> bool:
    return (cell / "backtest_test" / "report.html").is_file() and (cell / "eval.json").is_file()


def snapshot(cell: Path) -> dict[str, int]:
    """mtime (ns) of every file in a cell's run directory."""
    return {str(p.relative_to(cell)): p.stat().st_mtime_ns for p in cell.rglob("*") if p.is_file()}


@pytest.mark.slow  # several tiny trainings and backtests: about 2-4 minutes on 2 cores
def test_universe_survives_sigkill_and_resumes(tmp_path: Path) -> None:
    run = tmp_path / "uni"
    # long enough that a cell of the second pair trains for seconds after its first checkpoint
    sets = [a for s in [*TINY, "total_timesteps=2048"] for a in ("--set", s)]
    args = ["--symbols", "AAPL", "KO", "--seeds", "0", "1", "--workers", "2", "--run-dir", str(run)]
    proc = universe(*args, *sets, start_new_session=True, stdout=subprocess.DEVNULL)
    cells = run / "cells"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        dirs = sorted(d for d in cells.glob("*") if d.is_dir()) if cells.is_dir() else []
        done = [d for d in dirs if finished(d)]
        started = [d for d in dirs if not finished(d) and (d / "checkpoints" / "latest").is_file()]
        # a KO cell starts only after an AAPL cell finished; the two AAPL cells run side by side
        # and may finish within a moment of each other, too close to kill between them
        if done and any(d.name.startswith("KO") for d in started):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the universe ended before a cell could be interrupted"
    os.killpg(proc.pid, signal.SIGKILL)  # the parent and every cell process
    proc.wait()
    assert not (run / "universe.json").exists()
    # what the kill left (a cell may have finished between the check above and the kill)
    dirs = sorted(d for d in cells.glob("*") if d.is_dir())
    done = [d for d in dirs if finished(d)]
    started = [d for d in dirs if not finished(d) and (d / "checkpoints" / "latest").is_file()]
    assert done and started, "the kill did not leave a finished and an interrupted cell"
    before = {d.name: snapshot(d) for d in done}

    resumed = universe("--resume", str(run), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert f"4 cells ({len(done)} finished)" in out
    for d in done:  # finished cells: not one file touched
        assert snapshot(d) == before[d.name]
    for d in started:  # interrupted cells continued from their checkpoint
        log = d.with_name(f"{d.name}.log").read_text()
        assert "resuming" in log or "is complete" in log, log[-2000:]
    summary = json.loads((run / "universe.json").read_text())
    assert [(c["symbol"], c["seed"]) for c in summary["cells"]] == [
        ("AAPL", 0),
        ("AAPL", 1),
        ("KO", 0),
        ("KO", 1),
    ]
    assert all(c["error"] is None and c["agent_sharpe"] is not None for c in summary["cells"])
    assert summary["counts"]["n"] == 4
    table = (run / "universe.md").read_text()
    assert "| KO | 1 |" in table and "CVaR20 limit met:" in table and table in out
    assert "close-only data (sp500): features hl_range left out (need high/low)" in out


@contextmanager
def started_cells(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """A universe of two long cells (AAPL, KO) in a session of its own (as a shell starts a
    command), once both cells have saved a checkpoint: the coordinator and its processes (the
    two cells' ``riskppo train`` and the two workers of the job runner that run them); killed
    on leaving if still running."""
    run = tmp_path / "uni"
    sets = [a for s in [*TINY, "total_timesteps=2000000"] for a in ("--set", s)]
    args = ["--symbols", "AAPL", "KO", "--workers", "2", "--run-dir", str(run), *sets]
    started = universe(
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=as_a_terminal_starts_it,
    )
    with reaped(started) as proc:
        deadline = time.monotonic() + 300
        while len(list(run.glob("cells/*/checkpoints/latest"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint saved"
            time.sleep(0.1)
        cells = commands(proc.pid, "riskppo.cli", "train")
        assert len(cells) == 2
        workers = spawned_workers(proc.pid)
        assert len(workers) == 2
        cells += workers
        try:
            yield proc, cells
        finally:  # the cells run in sessions of their own: killing the group leaves them
            for cell in [c for c in cells if alive(c)]:
                os.kill(cell, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stopped_universe_stops_its_cells_at_a_checkpoint(sig: int, tmp_path: Path) -> None:
    """SIGTERM to the coordinator (a scheduler's stop), or Ctrl-C to the terminal's process
    group (here: the coordinator's session): each cell is stopped once (a second signal would
    make it stop without saving), saves and exits, then one line says how to continue."""
    with started_cells(tmp_path) as (proc, cells):
        err, name = stop_as_users_do(proc, sig, timeout=300)
        assert not [c for c in cells if alive(c)]
    assert proc.returncode == 128 + sig, err
    assert err.splitlines()[-1] == (
        f"riskppo universe: stopped by {name}; finished cells are kept and running ones stopped "
        f"at a checkpoint — continue with `riskppo universe --resume {tmp_path / 'uni'}`"
    )
    for log in sorted((tmp_path / "uni" / "cells").glob("*.log")):
        assert "riskppo: stopped by SIGTERM at step " in log.read_text(), log.read_text()[-2000:]
    assert not (tmp_path / "uni" / "universe.json").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_cells_die_with_a_killed_universe(tmp_path: Path) -> None:
    """SIGKILL to the coordinator alone: no cell trains on, orphaned (a later --resume would
    find every running cell's directory locked)."""
    with started_cells(tmp_path) as (proc, cells):
        proc.kill()
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while any(alive(c) for c in cells) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c for c in cells if alive(c)], "cells outlived their universe"


def test_a_cell_whose_files_do_not_read_back_is_evaluated_again(tmp_path: Path) -> None:
    """A finished cell whose test backtest does not read back (a truncated equity.csv or
    metrics.json: a torn write, a damaged copy) is unfinished: --resume names it in one line and
    writes its evaluation again from its checkpoint, to the same numbers; a damaged
    universe_spec.json is one line too. One stock, one seed, one update."""
    from riskppo.evaluation.universe import cell_result

    run = tmp_path / "uni"
    sets = [a for s in [*TINY, "total_timesteps=64"] for a in ("--set", s)]
    args = ["--symbols", "KO", "--workers", "1", "--run-dir", str(run), *sets]
    first = universe(*args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out
    before = json.loads((run / "universe.json").read_text())["cells"]
    assert before[0]["error"] is None
    cell = run / "cells" / "KO-s0"
    for name in ("equity.csv", "metrics.json"):  # torn writes
        path = cell / "backtest_test" / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        error = cell_result("KO", 0, cell).error
        assert error is not None and error.startswith(f"backtest_test/{name} does not read back")

    resumed = universe("--resume", str(run), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0 and "Traceback" not in out, out
    (line,) = [line for line in out.splitlines() if "does not read back" in line]
    assert line.startswith("riskppo universe: cells/KO-s0/backtest_test/metrics.json does not ")
    assert line.endswith("; writing its evaluation again")
    assert json.loads((run / "universe.json").read_text())["cells"] == before

    spec = run / "universe_spec.json"
    spec.write_bytes(spec.read_bytes()[:100])
    again = universe("--resume", str(run), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 2 and "Traceback" not in out, out
    (line,) = out.strip().splitlines()
    assert line.startswith(f"riskppo: configuration error: {spec} does not read back (")
    assert line.endswith(
        "the universe's cells are unknown: start a new one with `riskppo universe --run-dir DIR`"
    )
