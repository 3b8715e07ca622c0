"""Exact resume (R-REL-4): a run killed with SIGKILL and resumed from its checkpoint ends
bit-identical to an uninterrupted run (parameters, optimizer state, normaliser statistics)."""

from __future__ import annotations

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

from riskppo.train.runner import latest_checkpoint

CONFIG = {
    "seed": 3,
    "total_timesteps": 9600,  # 300 updates of 2 envs x 16 steps
    "env": {"id": "riskppo/MaskedVelocityCartPole-v1", "n_envs": 2, "normalize_obs": True},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 2},
    "policy": {"lstm_hidden_size": 16, "net_arch": [16]},
    "checkpoint": {"every_updates": 3, "keep_last": 2},
}
FILES = ("model.safetensors", "optimizer.safetensors", "normalizer.safetensors", "rng.safetensors")


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

    # the resumed run appends to metrics.jsonl: the lines logged before the kill are kept
    lines = (killed / "metrics.jsonl").read_text().splitlines()
    logged = [json.loads(line)["time/total_timesteps"] for line in lines]
    assert logged[0] == 32 and logged[-1] == CONFIG["total_timesteps"]
    assert len(logged) >= CONFIG["total_timesteps"] // 32
