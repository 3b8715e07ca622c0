"""A snapshot in, a model out: ``from_snapshot`` is the inverse of ``snapshot`` — for a live
model's snapshot (copied: the two models share nothing) as for one read from disk."""

from __future__ import annotations

from pathlib import Path

import torch

from riskppo import DistributionalPPO
from riskppo.persist.checkpoint import read_snapshot

TINY = {
    "seed": 3,
    "env": {"id": "CartPole-v1", "n_envs": 2},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 1},
    "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
    "checkpoint": {"every_updates": 1},  # envs reset after every update: a clean boundary
}


def weights(model: DistributionalPPO) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.policy.state_dict().items()}


def test_a_live_snapshot_and_a_saved_one_continue_alike(tmp_path: Path) -> None:
    model = DistributionalPPO(config=TINY)
    model.learn(32)
    saved = model.save(tmp_path / "m")
    clone = DistributionalPPO.from_snapshot(model.snapshot())
    loaded = DistributionalPPO.from_snapshot(read_snapshot(saved))
    assert loaded.loaded_from == saved and clone.loaded_from is None
    assert clone.state.rng.sample is not model.state.rng.sample  # its own generators
    try:
        for m in (model, clone, loaded):
            m.learn(32, reset_num_timesteps=False)
        want = weights(model)
        for m in (clone, loaded):
            got = weights(m)
            assert all(torch.equal(want[k], got[k]) for k in want)
            assert m.num_timesteps == model.num_timesteps == 64
    finally:
        for m in (model, clone, loaded):
            m.close()
