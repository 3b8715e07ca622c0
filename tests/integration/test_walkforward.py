"""Walk-forward runs: each segment sees only its past; a SIGKILLed run resumes to the same
record as an uninterrupted one; a run directory is not mixed with another."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from riskppo.cli.main import load_config
from riskppo.envs.market.synthetic import gbm
from riskppo.walkforward.plan import WalkForwardSettings
from riskppo.walkforward.run import CELL_DONE, prepare, run_cell
from tests.compilers import env_without_kernel
from tests.processes import alive, reaped, spawned_workers
from tests.small_run import SMALL_WALKFORWARD_SETS

SMALL = SMALL_WALKFORWARD_SETS
SETTINGS = ["--initial", "700", "--step", "100"]


def _market(path: Path, n: int = 900, seed: int = 3) -> Path:
    gbm(n, seed=seed).reset_index().to_csv(path, index=False)
    return path


def test_a_segment_is_blind_to_every_later_bar(tmp_path: Path) -> None:
    """Change every bar after segment 0's last settle row: its positions stay bit-identical."""
    original = _market(tmp_path / "a.csv")
    changed = tmp_path / "b.csv"
    df = pd.read_csv(original)
    settings = WalkForwardSettings(initial=700, step=100)
    cfg = load_config(None, [*SMALL, f"data.path={original}"])
    seg0 = prepare(cfg, settings, tmp_path / "wf_a", resume=False).segments[0]
    later = df.index >= seg0.settle_end
    for col in ("open", "high", "low", "close"):
        df.loc[later, col] *= 1.7  # a crash and a rally the segment must not see
    df.loc[later, "volume"] = 1.0
    df.to_csv(changed, index=False)
    records = []
    for name, path in (("wf_a", original), ("wf_b", changed)):
        wf = prepare(
            load_config(None, [*SMALL, f"data.path={path}"]),
            settings,
            tmp_path / f"{name}_run",
            resume=False,
        )
        job = wf.job(wf.segments[0], 0)
        run_cell(job)
        records.append(pd.read_csv(job.cell_dir / "record.csv", index_col=0))
    a, b = records
    assert len(a) == seg0.test_end - seg0.test_start
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def _cli(*args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "riskppo.cli", "walkforward", *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **kw,  # type: ignore[arg-type]
    )


def test_sigkilled_walk_forward_resumes_to_the_uninterrupted_record(tmp_path: Path) -> None:
    data = _market(tmp_path / "m.csv")
    common = [
        *SETTINGS,
        "--seeds",
        "0",
        "--workers",
        "1",
        "--no-progress",
        *(arg for s in [*SMALL, f"data.path={data}"] for arg in ("--set", s)),
    ]
    whole = _cli("--run-dir", str(tmp_path / "whole"), *common)
    out, _ = whole.communicate(timeout=600)
    assert whole.returncode == 0, out
    assert "verdict:" in out
    # the statistics under the verdict have their columns named, as in the HTML report
    assert re.search(r"^\s+agent\s+VT B&H\+overlay\s+VT scaled$", out, re.M), out
    # the wall time is the last line (1 segment x 1 seed here)
    assert re.search(
        r"riskppo walkforward: \d+ cells? trained in \d+:\d\d:\d\d wall time, "
        r"1 worker process on \d+ cores?$",
        out.strip().splitlines()[-1],
    ), out
    _check_risk_outputs(tmp_path / "whole", out)

    killed = _cli("--run-dir", str(tmp_path / "killed"), *common)
    first = tmp_path / "killed" / "cells" / "seg00-s0" / CELL_DONE
    deadline = time.monotonic() + 300
    while not first.is_file() and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.1)
    assert first.is_file(), "the first cell never finished"
    os.killpg(killed.pid, signal.SIGKILL)  # the coordinator and its workers
    killed.wait()
    assert not (tmp_path / "killed" / "metrics.json").exists()

    resumed = _cli("--resume", str(tmp_path / "killed"), "--no-progress")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    a = pd.read_csv(tmp_path / "whole" / "records" / "s0.csv", index_col=0)
    b = pd.read_csv(tmp_path / "killed" / "records" / "s0.csv", index_col=0)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert len(a) == 900 - 700 - 1

    # a finished run judged again for 5 configurations tried: no training, a larger p
    once = json.loads((tmp_path / "whole" / "metrics.json").read_text())["verdict"]
    again = _cli("--resume", str(tmp_path / "whole"), "--trials", "5", "--no-progress")
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out
    five = json.loads((tmp_path / "whole" / "metrics.json").read_text())["verdict"]
    assert "trained in" not in out  # judged again: nothing trained, no wall-time line
    assert "adjusted for N = 5 trials" in five["text"] and "N = 1 trial)" in once["text"]
    assert five["p_adjusted"] == pytest.approx(1 - (1 - once["p_adjusted"]) ** 5)


def _check_risk_outputs(run: Path, out: str) -> None:
    """λ and the default risk overlay's binding share reach the table, the summary and the
    report; the CVaR-matched benchmark has the agent's horizon CVaR."""
    metrics = json.loads((run / "metrics.json").read_text())
    cells = pd.read_csv(run / "segments.csv")
    assert cells["lambda"].notna().all() and (cells["lambda"] >= 0).all()
    assert cells["overlay_binding"].between(0, 1).all()
    assert cells["overlay_binding_train"].between(0, 1).all()
    assert metrics["risk"]["overlay_binding_oos"] == pytest.approx(cells["overlay_binding"].mean())
    assert "risk overlay bound on" in out and "λ at the end of training" in out
    block = metrics["records"]["seed 0"]["metrics"]
    assert 0 <= block["agent"]["active_share"] <= 1  # the agent's own signal beyond its core
    assert block["vol_target_buy_and_hold"]["active_share"] == 1.0  # signal 1 on every bar
    assert block["vol_target_cvar_matched"]["cvar_horizon"] == pytest.approx(
        block["agent"]["cvar_horizon"], rel=1e-9
    )
    assert (run / "risk.png").is_file()


def test_a_used_directory_is_refused_without_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "something").write_text("x")
    p = _cli("--run-dir", str(run), "--no-progress")
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 2
    assert out.strip().splitlines()[-1].startswith("riskppo: configuration error:")
    assert "already holds files" in out and "--resume" in out
    p = _cli("--resume", str(run), "--no-progress")
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 2 and "is not a walk-forward run" in out
    for args, says in (
        (["--initial", "99999"], "--initial 99999 leaves no rows to test on"),
        (["--seeds", "1", "1"], "--seeds must name distinct seeds"),
    ):
        p = _cli("--run-dir", str(tmp_path / "new"), *args, "--no-progress")
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 2 and "Traceback" not in out, out
        assert out.strip().splitlines()[-1] == f"riskppo: configuration error: {says}" + (
            ": the data has 2335 rows" if "initial" in says else ", got [1, 1]"
        )


def test_a_warm_started_segment_predicts_what_its_source_predicted(tmp_path: Path) -> None:
    """The warm start carries the statistics the weights were trained under: the new segment's
    model starts with its source's actions and return quantiles (with a fresh return scale the
    PopArt-rescaled critic was off by the ratio of the scales, compounding over segments)."""
    import numpy as np

    from riskppo import DistributionalPPO
    from riskppo.persist.checkpoint import read_snapshot
    from riskppo.walkforward.run import cell_config, warm_start

    data = _market(tmp_path / "m.csv")
    cfg = load_config(None, [*SMALL, "total_timesteps=1024", f"data.path={data}"])
    settings = WalkForwardSettings(initial=700, step=100, warm_start=True, warm_steps=128)
    wf = prepare(cfg, settings, tmp_path / "wf", resume=False)
    first = wf.job(wf.segments[0], 0)
    run_cell(first)
    source = DistributionalPPO.load(first.cell_dir / "model", rebuild_env=False)
    target = DistributionalPPO(config=cell_config(cfg, wf.segments[1], 0, 128))
    try:
        warm_start(target, read_snapshot(first.cell_dir / "model"))
        obs = np.random.default_rng(0).normal(size=(6, source.observation_space.shape[0]))
        obs = obs.astype(np.float32)
        np.testing.assert_array_equal(
            source.predict(obs, deterministic=True)[0], target.predict(obs, deterministic=True)[0]
        )
        _, q_source = source.value_distribution(obs[None])
        _, q_target = target.value_distribution(obs[None])
        np.testing.assert_allclose(q_target, q_source, rtol=1e-6, atol=1e-9)
        assert target.num_timesteps == 0
    finally:
        source.close()
        target.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_a_killed_coordinator(tmp_path: Path) -> None:
    """SIGTERM to the coordinator alone (a scheduler's stop): no worker trains on, orphaned,
    into the run directory; the coordinator ends its workers itself, at once, and says in one
    line how to continue."""
    data = _market(tmp_path / "m.csv")
    sets = [
        arg for s in [*SMALL, "total_timesteps=100000", f"data.path={data}"] for arg in ("--set", s)
    ]
    started = _cli(
        *SETTINGS, "--seeds", "0", "1", "--workers", "2", "--no-progress",
        "--run-dir", str(tmp_path / "wf"), *sets,
    )  # fmt: skip
    with reaped(started) as run:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = spawned_workers(run.pid)
        assert len(workers) == 2, "the workers never started"
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, out
    assert out.splitlines() == [
        "riskppo walkforward: stopped by SIGTERM; finished cells are kept — continue with "
        f"`riskppo walkforward --resume {tmp_path / 'wf'}`"
    ]  # and no multiprocessing warning about what the workers left behind
    deadline = time.monotonic() + 10
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in workers if alive(p)], "workers outlived their coordinator"


def test_the_training_binding_share_replays_the_trained_agent(tmp_path: Path) -> None:
    """A cell's overlay binding share over training is that of the positions the trained agent
    holds there (with the overlay's clip it depends on the signals), not a full signal's."""
    from riskppo.agent import DistributionalPPO
    from riskppo.evaluation.backtest import overlay_binding_replayed

    sets = [*SMALL, f"data.path={_market(tmp_path / 'a.csv')}", "env.kwargs.overlay.mode=clip"]
    cfg = load_config(None, sets)
    wf = prepare(cfg, WalkForwardSettings(initial=700, step=100), tmp_path / "run", resume=False)
    job = wf.job(wf.segments[0], 0)
    summary = run_cell(job)
    model = DistributionalPPO.load(job.cell_dir / "model")
    try:
        replayed = overlay_binding_replayed(model, "train")
    finally:
        model.close()
    assert replayed is not None and summary["overlay_train"] == replayed
    assert 0 < replayed["binding_share"] < 1  # the clip took some of its positions, not all


def test_cells_warnings_and_the_kernel_notice_are_one_line_each(tmp_path: Path) -> None:
    """Four cells on two worker processes without the C kernel (RISKPPO_NATIVE=0, as with no
    compiler): the notice once, in the CLI's form, and a warning every cell raises once."""
    sets = [*SMALL, f"data.path={_market(tmp_path / 'm.csv')}", "risk.cvar_alpha=0.001"]
    proc = subprocess.run(
        [sys.executable, "-m", "riskppo.cli", "walkforward", *SETTINGS, "--seeds", "0", "1"]
        + ["--workers", "2", "--no-progress", "--run-dir", str(tmp_path / "r")]
        + [arg for s in sets for arg in ("--set", s)],
        env={**env_without_kernel(), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == (
        "riskppo: warning: native LSTM kernel unavailable (RISKPPO_NATIVE=0); using the PyTorch "
        "kernel (slower)"
    ), proc.stderr
    assert len(lines) == 2 and lines[1].startswith(
        "riskppo: warning: risk.cvar_alpha=0.001 < 1/"
    ), proc.stderr


def _cut(path: Path, keep: float = 0.5) -> None:
    """Truncate ``path`` to ``keep`` of its bytes, as an interrupted write or copy leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_a_cell_whose_files_do_not_read_back_is_trained_again(tmp_path: Path) -> None:
    """A damaged cell (a truncated cell.json or record.csv: a copied run, a torn write) is
    unfinished: --resume names it in one line and trains it again, to the same record; a
    damaged walkforward.json is one line too. One segment, one seed, one update."""
    import shutil

    from riskppo.walkforward.run import UnreadableCell, read_cell

    data = _market(tmp_path / "m.csv")
    sets = [*SMALL, "total_timesteps=128", f"data.path={data}"]
    first = _cli(
        "--initial", "800", "--step", "100", "--seeds", "0", "--workers", "1", "--no-progress",
        "--run-dir", str(tmp_path / "wf"), *(arg for s in sets for arg in ("--set", s)),
    )  # fmt: skip
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out
    cell = Path("cells") / "seg00-s0"

    # a record cut at a line boundary (fewer bars) or inside a line (a missing value)
    for keep in (0.5, 0.999):
        copy = tmp_path / f"record{keep}"
        shutil.copytree(tmp_path / "wf", copy)
        _cut(copy / cell / "record.csv", keep)
        with pytest.raises(UnreadableCell, match=r"cells/seg00-s0/record\.csv does not read back"):
            read_cell(copy / cell)

    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path / "wf", damaged)
    _cut(damaged / cell / CELL_DONE)
    resumed = _cli("--resume", str(damaged), "--no-progress")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0 and "Traceback" not in out, out
    assert out.splitlines()[0].startswith(  # the JSON error depends on where the cut falls
        "riskppo walkforward: cells/seg00-s0/cell.json does not read back ("
    ), out
    assert out.splitlines()[0].endswith("; training that cell again")
    assert "1 cell trained in" in out
    a = pd.read_csv(tmp_path / "wf" / "records" / "s0.csv", index_col=0)
    b = pd.read_csv(damaged / "records" / "s0.csv", index_col=0)
    pd.testing.assert_frame_equal(a, b, check_exact=True)

    _cut(damaged / "walkforward.json")
    again = _cli("--resume", str(damaged), "--no-progress")
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 2 and "Traceback" not in out, out
    (line,) = out.strip().splitlines()
    assert line.startswith(
        f"riskppo: configuration error: {damaged / 'walkforward.json'} does not read back (Expect"
    )
    assert line.endswith(
        "); the run's schedule is lost: start a new run with `riskppo walkforward --run-dir DIR`"
    )
