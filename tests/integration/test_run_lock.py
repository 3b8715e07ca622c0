"""One writer per run directory (R-REL-9), with real processes and SIGKILL:
a second ``riskppo`` process on a run directory in use is refused with one line and exit code 2,
without touching the run's files; the lock goes away with its holder, so ``--resume`` works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from riskppo.runs.lock import RunLockError, lock_run
from riskppo.runs.rundir import latest_checkpoint

CONFIG = {
    "seed": 1,
    "total_timesteps": 10_000_000,  # never finishes: it is killed
    "env": {"id": "CartPole-v1", "n_envs": 2},
    "ppo": {"n_steps": 16, "batch_size": 32, "n_epochs": 1},
    "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
    "checkpoint": {"every_updates": 2, "keep_last": 2},
}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "riskppo.cli", *args]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=300, check=False)


def test_second_process_refused_then_resume_after_sigkill(tmp_path: Path) -> None:
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(CONFIG))
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        cli("train", "--config", str(cfg_file), "--run-dir", str(run_dir), "--no-progress"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        pointer = run_dir / "checkpoints" / "latest"
        deadline = time.time() + 240
        while not pointer.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, "the first run ended early"
        config_before = (run_dir / "config.yaml").read_bytes()

        # a second train, a resume, an eval and a backtest on the same directory: all refused
        for args in (
            ("train", "--config", str(cfg_file), "--set", "seed=2", "--run-dir", str(run_dir)),
            ("train", "--resume", str(run_dir)),
            ("eval", str(run_dir), "--episodes", "1"),
            ("backtest", str(run_dir)),
        ):
            res = run(*args, "--no-progress") if args[0] == "train" else run(*args)
            assert res.returncode == 2, (args, res.stderr[-2000:])
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1, (args, res.stderr[-2000:])
            assert "run directory locked" in lines[0] and str(run_dir) in lines[0], lines
            assert f"pid {first.pid}" in lines[0] and "riskppo train" in lines[0], lines
            assert "another run directory" in lines[0], lines
        assert (run_dir / "config.yaml").read_bytes() == config_before
        assert not (run_dir / "evaluation.json").exists()
        assert first.poll() is None, "the first run was disturbed"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL

    # one writer only: every metrics line is whole JSON from the first run
    for line in (run_dir / "metrics.jsonl").read_text().splitlines()[:-1]:
        json.loads(line)

    # the lock died with its holder: a resume acquires it (a short one: the run's total is cut
    # to two more updates)
    step = int(latest_checkpoint(run_dir).name.split("-")[1])
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["total_timesteps"] = step + 64
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = run("train", "--resume", str(run_dir), "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"resuming {run_dir} at step {step:,}" in res.stdout
    assert (run_dir / "eval.json").is_file()


def test_lock_is_per_process_and_reentrant(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from riskppo.runs.lock import lock_run\n"
         "with lock_run(Path(sys.argv[1]), 'holder'):\n print('held', flush=True); time.sleep(600)",
         str(run_dir)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        try:
            with lock_run(run_dir):
                raise AssertionError("a second process got the lock")
        except RunLockError as exc:
            assert f"pid {holder.pid}: holder" in str(exc)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    with lock_run(run_dir, "test"), lock_run(run_dir, "nested"):  # re-entrant in one process
        assert f"pid {os.getpid()}: test" in (run_dir / ".lock").read_text()
    with lock_run(run_dir):  # released after the outer block
        pass
