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

import pytest
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


def test_a_finished_run_extended_is_bit_identical_to_one_run_to_the_new_total(
    tmp_path: Path,
) -> None:
    """`riskppo train --resume RUN --set total_timesteps=N` trains a finished run on to N: with a
    constant learning rate and the first run ending on a checkpoint (its update count a
    multiple of checkpoint.every_updates), the result is bit-identical to one run of N steps.
    The progress bar counts the whole run; N below the steps trained is refused in one line."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    longer, shorter = {**CONFIG, "total_timesteps": 3072}, {**CONFIG, "total_timesteps": 1536}
    runs = {}
    for name, cfg in (("whole", longer), ("extended", shorter)):  # 96 and 48 updates
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        runs[name] = tmp_path / name
        args = ("train", "--config", str(tmp_path / f"{name}.yaml"), "--run-dir", str(runs[name]))
        subprocess.run(
            cli(*args, "--no-progress"), check=True, env=env, capture_output=True, timeout=600
        )

    extended = runs["extended"]
    out = subprocess.run(
        cli("train", "--resume", str(extended), "--set", "total_timesteps=3072"),
        check=True, env=env, capture_output=True, text=True, timeout=600,
    ).stdout  # fmt: skip
    assert f"{extended} trains on to 3,072 steps (was 1,536; config.yaml updated)" in out
    assert f"resuming {extended} at step 1,536 of 3,072 (1,536 to go)" in out
    bars = [line for line in out.splitlines() if line.startswith("training: ")]
    assert bars and all("/3,072 steps" in line for line in bars), out  # the whole run's count
    assert int(bars[0].split()[1].split("/")[0].replace(",", "")) > 1536
    a, b = final_tensors(runs["whole"]), final_tensors(extended)
    for name in FILES:
        assert a[name].keys() == b[name].keys(), name
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), f"{name}:{key} differs"
    assert yaml.safe_load((extended / "config.yaml").read_text())["total_timesteps"] == 3072
    assert logged_steps(extended) == list(range(32, 3072 + 1, 32))

    refused = subprocess.run(
        cli("train", "--resume", str(extended), "--set", "total_timesteps=2000"),
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        "riskppo: configuration error: --set total_timesteps=2000: "
        f"{extended} has already trained 3,072 steps; pass more to train it on, or resume "
        "without --set\n"
    )


def test_an_extended_linear_schedule_decays_to_the_new_total(tmp_path: Path) -> None:
    """With ppo.lr_schedule: linear the extension cannot be the longer run (its first steps
    decayed to the old total): it says so, and from there the rate decays to 0 at the new
    total — what docs/checkpoints.md promises."""
    cfg = {**CONFIG, "total_timesteps": 320, "ppo": {**CONFIG["ppo"], "lr_schedule": "linear"}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    args = ("train", "--config", str(tmp_path / "cfg.yaml"), "--run-dir", str(run))
    subprocess.run(cli(*args, "--no-progress"), check=True, capture_output=True, timeout=600)
    out = subprocess.run(
        cli("train", "--resume", str(run), "--set", "total_timesteps=640", "--no-progress"),
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout  # fmt: skip
    assert (
        "riskppo: ppo.lr_schedule=linear now decays to 0 at step 640 (from 0.00015 at step 320); "
        "the steps trained so far followed the decay to 320, so the result differs from a "
        "640-step run"
    ) in out
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = {r["time/total_timesteps"]: r["train/learning_rate"] for r in rows}
    for step in range(352, 640 + 1, 32):  # each update's rate, from the step it started at
        assert rates[step] == pytest.approx(3e-4 * (1 - (step - 32) / 640)), step
    assert rates[320] == pytest.approx(3e-4 * (1 - 288 / 320))  # the first run's decay
