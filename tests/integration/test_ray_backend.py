"""Walk-forward and universe cells on a local Ray instance (``ray.init(num_cpus=2)``, the
session's ``local_ray``) write the same records, byte for byte, as on local worker processes: a
cell is seeded and sets its own threads, so its result does not depend on where it ran. A Ray
walk-forward whose driver is SIGKILLed resumes (on the same cluster, joined with
``--ray-address``) to that same record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riskppo.cli.main import load_config
from riskppo.envs.market.synthetic import gbm
from riskppo.runs.jobs import Backend
from riskppo.walkforward.plan import WalkForwardSettings
from riskppo.walkforward.run import CELL_DONE, walk_forward
from tests.processes import reaped
from tests.small_run import SMALL_WALKFORWARD_SETS

ROOT = Path(__file__).parents[2]
SETTINGS = WalkForwardSettings(initial=700, step=100, seeds=(0,), workers=2)  # 2 segments
ONE_UPDATE = [*SMALL_WALKFORWARD_SETS, "total_timesteps=128"]


def _market(path: Path) -> Path:
    gbm(900, seed=3).reset_index().to_csv(path, index=False)
    return path


def _files(run: Path, pattern: str) -> dict[str, bytes]:
    """Every file of ``run`` matching ``pattern``, by its path inside the run."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.glob(pattern))}


def _walk_forward(tmp_path: Path, name: str, backend: Backend) -> Path:
    cfg = load_config(None, [*ONE_UPDATE, f"data.path={tmp_path / 'm.csv'}"])
    walk_forward(cfg, tmp_path / name, SETTINGS, progress_bar=False, backend=backend)
    return tmp_path / name


def test_walk_forward_on_ray_writes_the_local_record(local_ray: str, tmp_path: Path) -> None:
    _market(tmp_path / "m.csv")
    local = _walk_forward(tmp_path, "local", Backend("local"))
    on_ray = _walk_forward(tmp_path, "ray", Backend("ray"))  # joins the session's instance
    for pattern in ("records/*.csv", "cells/*/record.csv", "cells/*/cell.json", "segments.csv"):
        files = _files(local, pattern)
        assert files and _files(on_ray, pattern) == files, pattern


@pytest.mark.slow  # two universes of one `riskppo train` cell each: over a minute on 2 cores
def test_universe_on_ray_writes_the_local_record(
    local_ray: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from riskppo.cli.universe import run_universe

    sets = ["total_timesteps=64", "env.n_envs=2", "ppo.n_steps=32", "ppo.batch_size=64"]
    cfg = load_config(None, sets)
    runs = {}
    for kind in ("local", "ray"):
        run = tmp_path / kind
        results = run_universe(
            cfg, run, symbols=["KO"], workers=1, progress_bar=False, backend=Backend(kind)
        )  # type: ignore[arg-type]
        assert [r.error for r in results] == [None]
        runs[kind] = run
    out = capsys.readouterr().out
    assert "1 worker process on" in out and "1 Ray task on 2 cores" in out
    cells = [json.loads((r / "universe.json").read_text())["cells"] for r in runs.values()]
    for cell in (*cells[0], *cells[1]):
        del cell["run_dir"]
    assert cells[0] == cells[1]
    pattern = "cells/KO-s0/backtest_test/*.csv"
    assert _files(runs["local"], pattern) and _files(runs["ray"], pattern) == _files(
        runs["local"], pattern
    )


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "riskppo.cli", "walkforward", *args],
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.mark.slow  # three walk-forwards of two cells, two of them commands: about 1.5 minutes
def test_a_sigkilled_ray_walk_forward_resumes_to_the_local_record(
    local_ray: str, tmp_path: Path
) -> None:
    data = _market(tmp_path / "m.csv")
    local = _walk_forward(tmp_path, "local", Backend("local"))
    sets = [arg for s in [*ONE_UPDATE, f"data.path={data}"] for arg in ("--set", s)]
    ray = ["--backend", "ray", "--ray-address", local_ray, "--no-progress"]
    run = tmp_path / "ray"
    first = run / "cells" / "seg00-s0" / CELL_DONE
    started = _cli(
        "--initial", "700", "--step", "100", "--seeds", "0", "--workers", "1",
        "--run-dir", str(run), *ray, *sets,
    )  # fmt: skip
    with reaped(started) as driver:
        deadline = time.monotonic() + 300
        while not first.is_file() and driver.poll() is None:
            assert time.monotonic() < deadline, "the first cell never finished"
            time.sleep(0.05)
        assert driver.poll() is None, "the run ended before it could be killed"
        os.killpg(driver.pid, signal.SIGKILL)  # the driver; the cluster ends its tasks
        driver.wait()
    assert not (run / "metrics.json").exists()
    assert not (run / "cells" / "seg01-s0" / CELL_DONE).exists()

    resumed = _cli("--resume", str(run), *ray)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "1 cell trained in" in out and "1 Ray task on 2 cores" in out, out
    for pattern in ("records/*.csv", "cells/*/record.csv", "segments.csv"):
        files = _files(local, pattern)
        assert files and _files(run, pattern) == files, pattern
