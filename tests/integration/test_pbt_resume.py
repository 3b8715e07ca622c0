"""A PBT population outlives its coordinator and its disk (design §6, §9), with real processes.

* ``riskppo pbt`` SIGKILLed after its first completed round, then ``riskppo pbt --resume``: the
  same final members as a run that was never interrupted, bit for bit (every member's final
  checkpoint tensors, the audit trail, the member log and the summary; paths and timings aside).
* A storage fault (a file size limit: ``RLIMIT_FSIZE``, so writing a checkpoint fails with
  ``EFBIG``) stops the population with one line naming the file and the error, a summary, and
  no member failure counted.
* Directories that cannot be resumed, or a run directory reused without ``--resume``: one line.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riskppo.cli import main
from riskppo.config import Config
from riskppo.pbt.local import PBTRun, run_pbt_local
from riskppo.pbt.state import STATE
from tests.compilers import without_kernel_notice
from tests.integration.test_pbt_faults import tiny
from tests.processes import (
    alive,
    as_a_terminal_starts_it,
    reaped,
    spawned_workers,
    stop_as_users_do,
)

ROUNDS = 3
TENSORS = ("model", "optimizer", "normalizer", "training")


def pbt_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "riskppo.cli", "pbt", "--no-progress", *args]


def completed_rounds(run: Path) -> int:
    try:
        return int(json.loads((run / STATE).read_text())["round"])
    except (OSError, ValueError, KeyError):
        return 0


def final_tensors(run: Path) -> dict[str, bytes]:
    """Every member's final checkpoint files that hold tensors (weights, optimizer, statistics,
    RNG states), by member and file."""
    out = {}
    for mdir in sorted((run / "members").iterdir()):
        latest = (mdir / "checkpoints/latest").read_text()
        for name in TENSORS:
            out[f"{mdir.name}/{name}"] = (
                mdir / "checkpoints" / latest / f"{name}.safetensors"
            ).read_bytes()
    return out


def logs(run: Path, name: str) -> list[dict[str, object]]:
    """A log's lines with the run directory taken out of paths and timings dropped."""
    text = (run / name).read_text().replace(str(run), "RUN")
    rows = (
        [json.loads(x) for x in text.splitlines() if x.strip()]
        if name.endswith("l")
        else [json.loads(text)]
    )
    for row in rows:
        row.pop("seconds", None)
    return rows


@pytest.mark.slow  # three populations of 3 rounds: about 40 s on 2 busy cores
def test_sigkilled_coordinator_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    cfg = tiny(rounds=ROUNDS, population=2, quantile=0.5)
    cfg.to_yaml(tmp_path / "pbt.yaml")
    ref = tmp_path / "ref"
    run_pbt_local(cfg, ref, progress_bar=False)

    run = tmp_path / "run"
    proc = subprocess.Popen(
        pbt_cmd("--config", str(tmp_path / "pbt.yaml"), "--run-dir", str(run)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while completed_rounds(run) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_after = completed_rounds(run)
    assert 1 <= killed_after < ROUNDS, "the kill must land between the first and the last round"

    again = subprocess.run(
        pbt_cmd("--config", str(tmp_path / "pbt.yaml"), "--run-dir", str(run)),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert f"continue it with `riskppo pbt --resume {run}`" in again.stderr.strip()

    resumed = subprocess.run(
        pbt_cmd("--resume", str(run)), capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed after round {killed_after} of {ROUNDS}" in resumed.stdout

    assert final_tensors(run) == final_tensors(ref)  # bit-identical members
    for name in ("pbt_history.jsonl", "pbt_members.jsonl", "pbt_summary.json"):
        assert logs(run, name) == logs(ref, name), name
    # nothing of the interrupted round is left: every checkpoint on disk is one the logs record
    recorded = {Path(str(e["checkpoint"])).name for e in logs(run, "pbt_members.jsonl")}
    recorded |= {Path(str(h["checkpoint_after"])).name for h in logs(run, "pbt_history.jsonl")}
    on_disk = {p.name for p in run.glob("members/*/checkpoints/*-*")}
    assert on_disk <= recorded


def test_a_full_disk_stops_the_population_with_one_line(tmp_path: Path) -> None:
    """Writing a member's checkpoint fails with EFBIG (a file size limit smaller than its
    optimizer file): the population stops at once, naming that file, instead of burning every
    member's max_failures; the summary says why and counts no failure."""
    cfg = tiny(rounds=ROUNDS, population=2, quantile=0.5)
    cfg.to_yaml(tmp_path / "pbt.yaml")
    run = tmp_path / "run"

    def limit_file_size() -> None:  # Python ignores SIGXFSZ, so a write past it fails: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (12_000, 12_000))

    proc = subprocess.run(
        pbt_cmd("--config", str(tmp_path / "pbt.yaml"), "--run-dir", str(run)),
        capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = [x for x in without_kernel_notice(proc.stderr) if x.strip()]
    assert len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert err[0].startswith(f"riskppo: PBT stopped: {run}/members/m")
    assert ".safetensors: File too large (EFBIG)" in err[0]
    assert f"riskppo pbt --resume {run}`" in err[0]
    summary = json.loads((run / "pbt_summary.json").read_text())
    assert "File too large (EFBIG)" in summary["stopped"]
    assert summary["n_failures"] == 0 and summary["rounds"] == 0
    assert not (run / "pbt_members.jsonl").exists()  # no member was blamed
    assert completed_rounds(run) == 0


def test_runs_that_cannot_be_resumed_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No training: a directory that is not a PBT run, a changed config, another config."""
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["pbt", "--resume", str(plain), "--no-progress"]) == 2
    assert f"riskppo: {plain} is not a PBT run" in capsys.readouterr().err

    cfg = tiny(rounds=ROUNDS, population=2)
    run = tmp_path / "run"
    run.mkdir()
    cfg.to_yaml(run / "config.yaml")
    assert main(["pbt", "--resume", str(run), "--no-progress"]) == 2
    assert "no pbt/state.json; nothing to resume" in capsys.readouterr().err

    PBTRun(cfg, run).save()  # a run that completed no round yet
    assert main(["pbt", "--resume", str(run), "--set", "ppo.n_steps=32", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("riskppo: configuration error: the config differs from the one")
    assert "at ppo.n_steps" in err and "\n" not in err

    data = cfg.to_dict()
    data["seed"] = 1
    Config.build(data).to_yaml(run / "config.yaml")
    assert main(["pbt", "--resume", str(run), "--no-progress"]) == 2
    assert "config.yaml changed since the run started" in capsys.readouterr().err

    cfg.to_yaml(tmp_path / "x.yaml")
    assert main(["pbt", "--config", str(tmp_path / "x.yaml"), "--run-dir", str(run)]) == 2
    assert "already holds a PBT run; continue it with" in capsys.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stopped_population_ends_its_workers_and_says_how_to_continue(
    sig: int, tmp_path: Path
) -> None:
    """SIGTERM to the coordinator (a scheduler's stop), or Ctrl-C to the terminal's process
    group (here: the run's session): one line, the shell's status, no worker left and no
    worker's traceback. The finished rounds stay for ``--resume`` (resumed in the test above)."""
    tiny(rounds=200, population=2, quantile=0.5).to_yaml(tmp_path / "pbt.yaml")
    run = tmp_path / "run"
    started = subprocess.Popen(
        pbt_cmd("--config", str(tmp_path / "pbt.yaml"), "--run-dir", str(run)),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=as_a_terminal_starts_it,
    )  # fmt: skip
    with reaped(started) as proc:
        deadline = time.monotonic() + 300
        while completed_rounds(run) < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        workers = spawned_workers(proc.pid)
        assert len(workers) == 2, "the workers never started"
        err, name = stop_as_users_do(proc, sig, timeout=60)
    assert proc.returncode == 128 + sig, err
    assert without_kernel_notice(err) == [
        f"riskppo pbt: stopped by {name}; the finished rounds are kept — continue with "
        f"`riskppo pbt --resume {run}`"
    ]
    assert not [p for p in workers if alive(p)]
    assert completed_rounds(run) >= 1


def test_a_stopped_population_leaves_no_worker_in_the_calling_process(tmp_path: Path) -> None:
    """A library user's process that catches the stop goes on without a worker training on."""
    import multiprocessing
    import threading

    from riskppo.runs.interrupt import Terminated

    run = tmp_path / "run"

    def stop_after_a_round() -> None:
        deadline = time.monotonic() + 300
        while completed_rounds(run) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_after_a_round, daemon=True).start()
    with pytest.raises(Terminated):
        run_pbt_local(tiny(rounds=200, population=2), run, progress_bar=False)
    assert multiprocessing.active_children() == []


def test_a_copied_run_resumes_from_its_own_files_and_a_damaged_round_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run stopped after round 1 of 2, copied: the copy resumes from its own checkpoints (the
    state named them by the original's path, so with the original moved away every member
    failed); a copy whose recorded checkpoint is damaged (a torn write, a bad copy) cannot
    resume that round and says so in one line, before anything is trained or changed."""
    import shutil

    from riskppo.pbt.local import open_population
    from riskppo.pbt.member import run_interval
    from riskppo.pbt.pool import WorkerPool

    run = tmp_path / "run"
    pbt = open_population(tiny(rounds=2, population=2), run, resume=False)
    with WorkerPool(2, run_interval) as pool:  # round 1 of 2 as run_rounds runs it, then a stop
        pbt.record(pool.run(pbt.tasks()))
    pbt.select()
    pbt.save()
    copy, damaged = tmp_path / "copy", tmp_path / "damaged"
    shutil.copytree(run, copy)
    shutil.copytree(run, damaged)
    run.rename(tmp_path / "moved")

    assert main(["pbt", "--resume", str(copy), "--no-progress"]) == 0
    summary = json.loads((copy / "pbt_summary.json").read_text())
    assert summary["rounds"] == 2 and summary["n_failures"] == 0, summary["failures"]

    recorded = json.loads((damaged / STATE).read_text())["members"][0]["checkpoint"]
    ckpt = damaged / "members" / "m0" / "checkpoints" / Path(recorded).name
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    capsys.readouterr()
    state = (damaged / STATE).read_bytes()
    assert main(["pbt", "--resume", str(damaged), "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        f"riskppo: {damaged}: round 1 does not read back ({ckpt}: model.safetensors is corrupted "
        f"(SHA-256 mismatch)); it cannot be resumed: start a new run with `riskppo pbt --config "
        f"{damaged / 'config.yaml'} --run-dir DIR`\n"
    )
    assert (damaged / STATE).read_bytes() == state
