"""Learning tests (slow marker): the trainer solves tasks that need memory, in a fixed budget."""

from __future__ import annotations

import pytest

from riskppo import DistributionalPPO

pytestmark = pytest.mark.slow


def train_until(model: DistributionalPPO, threshold: float, budget: int, every: int) -> float:
    """Train in steps of ``every``; stop early once a 20-episode deterministic eval ≥ threshold."""
    best = -float("inf")
    while model.num_timesteps < budget:
        model.learn(every, reset_num_timesteps=False)
        best = max(best, model.evaluate(n_episodes=20, deterministic=True)["mean"])
        if best >= threshold:
            break
    return best


def test_masked_velocity_cartpole_reaches_475():
    """Observations without velocities: only a working memory gets to 475."""
    model = DistributionalPPO(
        "riskppo/MaskedVelocityCartPole-v1",
        seed=0,
        n_envs=8,
        n_steps=128,
        batch_size=256,
        bptt_len=16,
        learning_rate=1e-3,
    )
    assert train_until(model, 475.0, budget=200_000, every=20_480) >= 475.0


@pytest.mark.parametrize("critic", ["quantile", "categorical"])
def test_both_critic_types_learn_cartpole(critic):
    model = DistributionalPPO(
        "CartPole-v1",
        seed=1,
        critic=critic,
        n_envs=8,
        n_steps=128,
        batch_size=256,
        bptt_len=16,
        learning_rate=1e-3,
    )
    assert train_until(model, 400.0, budget=100_000, every=20_480) >= 400.0


def test_pendulum_learns():
    """Continuous actions (diagonal Gaussian): clearly better than the random policy (≈ −1200)."""
    model = DistributionalPPO(
        "Pendulum-v1",
        seed=0,
        n_envs=8,
        n_steps=256,
        batch_size=512,
        bptt_len=16,
        n_epochs=10,
        gamma=0.9,
        learning_rate=1e-3,
        normalize_obs=True,
    )
    assert train_until(model, -500.0, budget=200_000, every=40_960) >= -500.0
