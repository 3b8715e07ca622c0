"""A run directory's ``metrics.jsonl`` never goes back in steps: ``learn`` from step 0 into a
directory that already logged later steps is refused before anything changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from riskppo.agent import DistributionalPPO
from riskppo.monitor.writer import last_logged_step

TINY = {
    "env": {"id": "CartPole-v1", "n_envs": 2},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 1},
    "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
}


def logged(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["time/total_timesteps"] for line in lines]


def test_learning_again_from_step_zero_into_a_logged_run_dir_is_refused(tmp_path: Path) -> None:
    model = DistributionalPPO(config=TINY, run_dir=tmp_path)
    model.learn(64)
    message = (
        f"{tmp_path / 'metrics.jsonl'} already logs steps up to 64 and this learn() starts at "
        "step 0: pass reset_num_timesteps=False to continue that run, or another run_dir for a "
        "new one"
    )
    with pytest.raises(ValueError) as refused:
        model.learn(64)
    assert str(refused.value) == message
    assert model.num_timesteps == 64  # refused before anything changed
    model.learn(64, reset_num_timesteps=False)
    assert logged(tmp_path) == [32, 64, 96, 128]
    model.close()

    other = DistributionalPPO(config=TINY, run_dir=tmp_path)  # a new model, same directory
    with pytest.raises(ValueError, match="already logs steps up to 128"):
        other.learn(64)
    other.close()
    assert logged(tmp_path) == [32, 64, 96, 128]


def test_the_last_logged_step_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    assert last_logged_step(path) is None
    rows = [json.dumps({"time/total_timesteps": s, "pad": "x" * 40_000}) for s in (32, 64)]
    path.write_text("\n".join(rows) + '\n{"time/total_timesteps": 9')
    assert last_logged_step(path) == 64
