"""A new learning rate — from ``set_hyperparams`` or the linear schedule — reaches every
param group of the optimizer, not only the first."""

from __future__ import annotations

import pytest
import torch

from riskppo import DistributionalPPO

TINY = dict(n_envs=2, n_steps=16, batch_size=32, n_epochs=1, lstm_hidden_size=8)


def _with_second_group(model: DistributionalPPO, lr: float) -> None:
    """Give the optimizer a second param group (as a user's or a PBT optimizer may have)."""
    model.optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))], "lr": lr})
    assert len(model.optimizer.param_groups) == 2


def test_set_hyperparams_learning_rate_reaches_every_param_group():
    """``set_hyperparams({"ppo.learning_rate": …})`` sets the lr of *every* param group at once.
    Mutation: apply the lr to ``optimizer.param_groups[0]`` only (``param_groups[:1]`` in the
    trainer's lr-schedule loop), or not at all until the next update."""
    model = DistributionalPPO("CartPole-v1", seed=0, **TINY)
    _with_second_group(model, 0.123)
    model.set_hyperparams({"ppo.learning_rate": 1e-4})
    assert [g["lr"] for g in model.optimizer.param_groups] == [1e-4, 1e-4]
    model.close()


def test_linear_lr_schedule_reaches_every_param_group():
    """The linear schedule's lr goes into every param group at each update: 4 updates of 32 steps
    out of 128, the last one starts at 96 → lr = 1e-3 · (1 − 96/128) in both groups.
    Mutation: ``param_groups[:1]`` in the schedule loop (the second group keeps 0.5)."""
    model = DistributionalPPO(
        "CartPole-v1", seed=0, learning_rate=1e-3, lr_schedule="linear", **TINY
    )
    _with_second_group(model, 0.5)
    model.learn(4 * 32)
    assert model.num_timesteps == 128
    lrs = [g["lr"] for g in model.optimizer.param_groups]
    assert lrs == pytest.approx([2.5e-4, 2.5e-4], rel=1e-12)
    model.close()
