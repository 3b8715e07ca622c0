"""The Sharpe utility's moments are training state: they follow every rollout, travel in the
checkpoint, and a trading run extended from its last checkpoint ends bit-identical to one run
to the new total (as without them, tests/integration/test_resume.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from riskppo.runs.rundir import latest_checkpoint

CONFIG = {
    "seed": 5,
    "env": {
        "id": "riskppo/Trading-v0",
        "n_envs": 2,
        "normalize_obs": True,
        "kwargs": {"continuous": True, "long_only": True, "min_signal": 0.25, "episode_length": 64},
    },
    "data": {"dataset": "googl"},
    "ppo": {
        "n_steps": 16,
        "batch_size": 32,
        "bptt_len": 8,
        "n_epochs": 2,
        "pathwise_coef": 1.0,
        "pathwise_utility": "sharpe",
    },
    "policy": {"memory": False, "net_arch": []},
    "checkpoint": {"every_updates": 4, "keep_last": 1},
}
FILES = ("model.safetensors", "optimizer.safetensors", "training.safetensors")


def _cli(*args: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "riskppo.cli", *args, "--no-progress"]
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=600)


def _train(tmp_path: Path, name: str, steps: int) -> Path:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump({**CONFIG, "total_timesteps": steps}))
    _cli("train", "--config", str(cfg), "--run-dir", str(tmp_path / name))
    return tmp_path / name


def _training(run: Path) -> dict:
    return json.loads((latest_checkpoint(run) / "state.json").read_text())["training"]


def test_the_moments_follow_every_rollout_and_an_extended_run_is_bit_identical(
    tmp_path: Path,
) -> None:
    whole = _train(tmp_path, "whole", 1024)  # 32 updates of 2 envs x 16 steps
    moments = _training(whole)["rewards"]
    assert moments["rollouts"] == 32
    assert moments["mean_square"] > 0 and moments["mean"] != 0

    short = _train(tmp_path, "extended", 512)
    _cli("train", "--resume", str(short), "--set", "total_timesteps=1024")
    assert _training(short)["rewards"] == moments
    for name in FILES:
        a = load_file(str(latest_checkpoint(whole) / name))
        b = load_file(str(latest_checkpoint(short) / name))
        assert a.keys() == b.keys(), name
        for key in a:
            assert torch.equal(a[key], b[key]), f"{name}:{key} differs"
