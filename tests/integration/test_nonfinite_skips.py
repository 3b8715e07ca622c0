"""The update's non-finite guard: a minibatch with a non-finite loss or gradient is skipped,
and the skips are counted across updates, reset by an applied minibatch and kept in a checkpoint."""

from __future__ import annotations

import pytest
import torch

from riskppo import DistributionalPPO
from riskppo.algo.update import (
    NonFiniteTrainingError,
)

PENDULUM = dict(n_envs=2, n_steps=32, batch_size=64, n_epochs=1, lstm_hidden_size=16)


def test_nonfinite_skips_are_counted_across_updates():
    """(R-ALG-9, R-REL-6) with one minibatch per update, a model whose parameters are
    non-finite stops after ``max_nonfinite_updates`` updates instead of training forever.
    Mutation: rebuild the count every update (not passing ``consecutive_skips`` in)."""
    model = DistributionalPPO("Pendulum-v1", seed=0, **PENDULUM)
    # the repro set log_std_init=inf, which the config now refuses (non-finite floats);
    # a parameter that became non-finite (e.g. by a bad load or a diverged run) is the same case
    with torch.no_grad():
        model.policy.action_head.log_std.fill_(float("inf"))
    per_update = 2 * 32
    limit = model.config.ppo.max_nonfinite_updates
    with pytest.raises(NonFiniteTrainingError, match="consecutive minibatches"):
        model.learn(per_update * (limit + 3))
    assert model.n_updates == limit - 1  # the update that reached the limit raised
    assert model.state.counters.nonfinite_skips == limit - 1
    assert torch.isinf(model.policy.action_head.log_std).all()
    model.close()


def test_nonfinite_skip_count_resets_on_an_applied_minibatch():
    """the carried count goes back to 0 as soon as a minibatch is applied."""
    model = DistributionalPPO("Pendulum-v1", seed=0, **PENDULUM)
    model.state = model.state.with_counters(
        nonfinite_skips=model.config.ppo.max_nonfinite_updates - 1
    )
    model.learn(2 * 32)
    assert model.state.counters.nonfinite_skips == 0
    model.close()


def test_nonfinite_skip_count_survives_a_checkpoint(tmp_path):
    """the carried count is part of the checkpoint (exact resume)."""
    model = DistributionalPPO("Pendulum-v1", seed=0, **PENDULUM)
    model.state = model.state.with_counters(nonfinite_skips=3)
    model.save(tmp_path / "ckpt")
    loaded = DistributionalPPO.load(tmp_path / "ckpt", rebuild_env=False)
    assert loaded.state.counters.nonfinite_skips == 3
    model.close()
    loaded.close()
