"""Exact resume (R-REL-4): a run killed with SIGKILL and resumed from its checkpoint ends
bit-identical to an uninterrupted run (parameters, optimizer state, normaliser statistics)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from riskppo.runs.rundir import drop_metrics_after, latest_checkpoint

CONFIG = {
    "seed": 3,
    "total_timesteps": 9600,  # 300 updates of 2 envs x 16 steps
    "env": {"id": "riskppo/MaskedVelocityCartPole-v1", "n_envs": 2, "normalize_obs": True},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 2},
    "policy": {"lstm_hidden_size": 16, "net_arch": [16]},
    "checkpoint": {"every_updates": 3, "keep_last": 2},
}
FILES = (
    "model.safetensors",
    "optimizer.safetensors",
    "normalizer.safetensors",
    "training.safetensors",
)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "riskppo.cli", *args]


def final_tensors(run_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    ckpt = latest_checkpoint(run_dir)
    return {name: load_file(str(ckpt / name)) for name in FILES}


def test_sigkill_then_resume_is_bit_identical(tmp_path: Path) -> None:
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(CONFIG))
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    full = tmp_path / "full"
    subprocess.run(
        cli("train", "--config", str(cfg_file), "--run-dir", str(full), "--no-progress"),
        check=True, env=env, capture_output=True, timeout=600,
    )  # fmt: skip

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        cli("train", "--config", str(cfg_file), "--run-dir", str(killed), "--no-progress"),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.time() + 300
    pointer = killed / "checkpoints" / "latest"
    while not pointer.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    step_at_kill = int(latest_checkpoint(killed).name.split("-")[1])
    assert 0 < step_at_kill < CONFIG["total_timesteps"]

    subprocess.run(
        cli("train", "--resume", str(killed), "--no-progress"),
        check=True, env=env, capture_output=True, timeout=600,
    )  # fmt: skip

    a, b = final_tensors(full), final_tensors(killed)
    for name in FILES:
        assert a[name].keys() == b[name].keys(), name
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}:{key} differs"
    # and the training state's JSON part: counters, schedules, episode window
    states = [json.loads((latest_checkpoint(d) / "state.json").read_text()) for d in (full, killed)]
    assert states[0]["training"] == states[1]["training"]

    # the resumed run appends to metrics.jsonl: the lines logged before the kill are kept
    lines = (killed / "metrics.jsonl").read_text().splitlines()
    logged = [json.loads(line)["time/total_timesteps"] for line in lines]
    assert logged[0] == 32 and logged[-1] == CONFIG["total_timesteps"]
    assert len(logged) >= CONFIG["total_timesteps"] // 32


SMALL_RUN = {**CONFIG, "total_timesteps": 1600}  # 50 updates, a checkpoint every 3


def logged_steps(run_dir: Path) -> list[float]:
    """``time/total_timesteps`` of every complete row of the run's metrics.jsonl."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        with contextlib.suppress(ValueError):  # a torn last line
            rows.append(json.loads(line)["time/total_timesteps"])
    return rows


def stop_after_rows_past_checkpoint(proc: subprocess.Popen, run_dir: Path) -> int:
    """Freeze the training process (SIGSTOP) at a moment when metrics.jsonl holds rows logged
    after its latest checkpoint, then SIGKILL it; returns that checkpoint's step."""
    pointer = run_dir / "checkpoints" / "latest"
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
        if not pointer.exists():
            continue
        proc.send_signal(signal.SIGSTOP)  # nothing changes on disk while we look
        step = int(latest_checkpoint(run_dir).name.split("-")[1])
        if max(logged_steps(run_dir), default=0) > step:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            return step
        proc.send_signal(signal.SIGCONT)
    raise AssertionError("the run finished before it could be stopped past a checkpoint")


def test_resume_drops_the_metrics_rows_logged_after_the_checkpoint(tmp_path: Path) -> None:
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(SMALL_RUN))
    run = tmp_path / "run"
    proc = subprocess.Popen(
        cli("train", "--config", str(cfg_file), "--run-dir", str(run), "--no-progress"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    step = stop_after_rows_past_checkpoint(proc, run)
    before = logged_steps(run)
    past = [s for s in before if s > step]
    assert past, "no rows after the checkpoint: the test would show nothing"

    out = subprocess.run(
        cli("train", "--resume", str(run), "--no-progress"),
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout  # fmt: skip
    assert f"dropped {len(past)} metrics.jsonl row(s) logged after ckpt-{step:012d}" in out
    after = logged_steps(run)
    every = list(range(32, SMALL_RUN["total_timesteps"] + 1, 32))
    assert after == every  # each step once, in order: nothing lost, nothing duplicated
    assert after[: len(before) - len(past)] == before[: len(before) - len(past)]

    # resuming the finished run says so and changes nothing
    metrics = (run / "metrics.jsonl").read_bytes()
    again = subprocess.run(
        cli("train", "--resume", str(run), "--no-progress"),
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout  # fmt: skip
    assert f"is complete (1,600 of 1,600 steps trained, ckpt-{1600:012d})" in again
    assert "nothing to do" in again and "to go" not in again
    assert (run / "metrics.jsonl").read_bytes() == metrics


def test_drop_metrics_after_keeps_earlier_rows_and_drops_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"time/total_timesteps": s, "train/loss": s / 10}) for s in (32, 64, 96)]
    path.write_text("\n".join(rows) + '\n{"time/total_timesteps": 12')  # killed mid-write
    assert drop_metrics_after(path, 64) == 2
    assert path.read_text() == rows[0] + "\n" + rows[1] + "\n"
    assert drop_metrics_after(path, 64) == 0 and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_drop_metrics_after_streams_a_large_file(tmp_path: Path) -> None:
    """Memory is one line, not the file (a 600 MB metrics.jsonl took 2.4 GB on resume)."""
    import tracemalloc

    path = tmp_path / "metrics.jsonl"
    row = '{"time/total_timesteps": %d, "train/loss": 0.125, "rollout/ep_rew_mean": 9.5}\n'
    with open(path, "w") as f:
        for start in range(0, 200_000, 1000):
            f.write("".join(row % s for s in range(start, start + 1000)))  # ≈ 16 MB
    size = path.stat().st_size
    tracemalloc.start()
    try:
        assert drop_metrics_after(path, 149_999) == 50_000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    assert path.stat().st_size == sum(len(row % s) for s in range(150_000)) < size
    assert path.read_bytes().endswith((row % 149_999).encode())
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
