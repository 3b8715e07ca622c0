"""A new auxiliary loss term in one file: an L2 penalty on the policy's action mean (around a
target), registered with :func:`riskppo.algo.terms.register_loss_term`, is picked up by
training — logged, in the loss, and pulling the action mean to its target — with nothing else
changed."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import Tensor

from riskppo import DistributionalPPO
from riskppo.algo.losses import LossTerm, TermInput
from riskppo.algo.terms import LOSS_TERMS, register_loss_term, unregister_loss_term

SMALL = dict(n_envs=4, n_steps=32, batch_size=64, bptt_len=16, n_epochs=4, lstm_hidden_size=16)


TARGET = 1.0


class ActionMeanL2(LossTerm):
    """``coef · mean((μ(s) − target)²)``: the Gaussian policy's action means held near a
    target."""

    name = "action_mean_l2"

    def __init__(self, coef: float, target: float = TARGET) -> None:
        self.weight, self.target = coef, target

    def coef(self, ctx: object) -> float:
        return self.weight

    def compute(self, x: TermInput) -> tuple[Tensor, dict[str, Tensor]]:
        penalty = (x.fwd.dist.mode() - self.target).pow(2).mean()
        return x.coef * penalty, {"action_mean_l2": penalty.detach()}


@pytest.fixture
def l2_term() -> Iterator[ActionMeanL2]:
    term = register_loss_term(ActionMeanL2(10.0))
    yield term
    unregister_loss_term(term.name)


def _mean_action(model: DistributionalPPO) -> float:
    """The policy's mean action ``μ(s)`` (its own units) over 64 random (normalised)
    observations."""
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(1, 64, 3)), dtype=torch.float32)
    policy = model.policy
    with torch.no_grad():
        dist, _ = policy.evaluate_sequences(obs, torch.ones(1, 64), policy.initial_state(64))
    return float(dist.mode().mean())


def test_a_registered_term_is_trained_and_logged(l2_term):
    """Mutation check: a term whose ``compute`` is never called (or whose value is left out of
    the loss) leaves the action means where plain PPO puts them, and this test fails."""
    kw = dict(seed=0, learning_rate=3e-3, **SMALL)
    logs: list[dict[str, float]] = []
    with_term = DistributionalPPO("Pendulum-v1", **kw)
    with_term.learn(4 * 32 * 6, callback=lambda m, log: logs.append(dict(log.scalars())) or True)
    assert logs and all("train/action_mean_l2" in row for row in logs)
    assert logs[-1]["train/action_mean_l2"] < 0.1 * logs[0]["train/action_mean_l2"]
    unregister_loss_term(l2_term.name)
    try:
        plain = DistributionalPPO("Pendulum-v1", **kw)
        plain.learn(4 * 32 * 6)
        assert "train/action_mean_l2" not in plain.monitor.latest
    finally:
        register_loss_term(l2_term)
    # off the training observations the means move less, but toward the target all the same
    assert _mean_action(with_term) > _mean_action(plain) + 0.3


def test_names_are_unique_and_parts_checked(l2_term):
    with pytest.raises(ValueError, match="new name"):
        register_loss_term(ActionMeanL2(1.0))
    bad = ActionMeanL2(1.0)
    bad.name, bad.part = "other", "nowhere"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="part must be"):
        register_loss_term(bad)
    assert list(LOSS_TERMS)[:3] == ["sa_kl", "bc", "pathwise"]
