"""The Python API as a new user meets it (SPEC §1.1): one observation or a batch, envs without
``render_mode``, and ``load(path).learn(...)`` continuing training. Real envs, no mocks."""

from __future__ import annotations

import numpy as np
import pytest

from riskppo import DistributionalPPO

SMALL = dict(n_envs=2, n_steps=16, batch_size=32, bptt_len=8, n_epochs=1, lstm_hidden_size=16)


@pytest.mark.parametrize("critic", ["quantile", "categorical"])
def test_value_distribution_takes_one_observation_a_batch_or_a_sequence(critic: str) -> None:
    model = DistributionalPPO("CartPole-v1", seed=0, critic=critic, **SMALL)
    batch = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    taus, one = model.value_distribution(batch[1])  # shape (4,): one CartPole observation
    _, many = model.value_distribution(batch)
    _, seq = model.value_distribution(batch[None])  # [T=1, B=3, D]
    assert one.shape == taus.shape and many.shape == (3, len(taus)) and seq.shape == (1, 3, 32)
    np.testing.assert_allclose(one, many[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seq[0], many, rtol=1e-5, atol=1e-6)
    action, _ = model.predict(batch[1], deterministic=True)
    actions, _ = model.predict(batch, deterministic=True)
    assert np.shape(action) == () and action == actions[1]
    model.close()


def test_a_wrong_observation_shape_is_a_clear_error() -> None:
    model = DistributionalPPO("CartPole-v1", seed=0, **SMALL)
    with pytest.raises(ValueError, match=r"shape \[5\] does not fit the observation space \[4\]"):
        model.value_distribution(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \[1, 2, 4\] does not fit"):
        model.predict(np.zeros((1, 2, 4), dtype=np.float32))  # predict takes no sequences
    model.close()
