"""A model used and dropped without ``close()`` releases what it holds (R-REL-8): its
TensorBoard writer thread and its ``metrics.jsonl`` file, with real models, threads and fds."""

from __future__ import annotations

import gc
import json
import os
import threading
from pathlib import Path

from riskppo.agent import DistributionalPPO
from riskppo.config import Config

TINY = {
    "seed": 0,
    "env": {"id": "CartPole-v1", "n_envs": 2},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 1},
    "policy": {"lstm_hidden_size": 16},
}


def train_and_drop(run_dir: Path) -> None:
    """Train a model into ``run_dir`` (TensorBoard and metrics.jsonl on) and drop it unclosed."""
    model = DistributionalPPO(config=Config.model_validate(TINY), run_dir=run_dir)
    model.learn(64, progress_bar=False)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_models_dropped_without_close_release_threads_and_files(tmp_path: Path) -> None:
    train_and_drop(tmp_path / "warm-up")  # threads and files libraries keep for the process
    gc.collect()
    threads, fds = threading.active_count(), open_fds()
    for i in range(4):
        train_and_drop(tmp_path / f"run{i}")
        gc.collect()
        alive = sorted(t.name for t in threading.enumerate())
        assert threading.active_count() <= threads, f"after model {i + 1}: {alive}"
        assert open_fds() <= fds, f"after model {i + 1}: {open_fds()} fds, {fds} before"
    # the metrics file was closed, not abandoned: its rows are all there and complete
    rows = [
        json.loads(line) for line in (tmp_path / "run3" / "metrics.jsonl").read_text().splitlines()
    ]
    assert rows and rows[-1]["time/total_timesteps"] == 64
    assert list((tmp_path / "run3").glob("events.out.tfevents.*"))
