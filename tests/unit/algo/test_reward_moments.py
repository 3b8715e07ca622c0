"""The reward moments the Sharpe utility remembers across rollouts: exponential moving averages
of each rollout's mean and mean square (Moody & Saffell 2001), checked against their closed form
as weighted sums; at rate 1 they are each rollout's own, and the slopes are then the rollout
Sharpe ratio's."""

from __future__ import annotations

import pytest
import torch

from riskppo.algo.losses import sharpe_slopes
from riskppo.algo.returns import RewardMoments, update_reward_moments
from riskppo.config import Config


def _rollouts(k: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [0.002 * i + 0.01 * torch.randn(8, 3, generator=g) for i in range(k)]


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_the_moments_are_the_closed_form_weighted_averages(rate: float) -> None:
    """After rollouts ``0..k−1`` the first rollout weighs ``(1−η)^{k−1}`` and rollout ``j ≥ 1``
    ``η (1−η)^{k−1−j}`` (the weights sum to 1)."""
    rollouts = _rollouts(6)
    m = RewardMoments()
    for r in rollouts:
        m = update_reward_moments(m, r, rate)
    k = len(rollouts)
    w = [(1 - rate) ** (k - 1)] + [rate * (1 - rate) ** (k - 1 - j) for j in range(1, k)]
    assert sum(w) == pytest.approx(1.0)
    mean = sum(wj * float(r.double().mean()) for wj, r in zip(w, rollouts))
    square = sum(wj * float(r.double().pow(2).mean()) for wj, r in zip(w, rollouts))
    assert m.rollouts == k
    assert m.mean == pytest.approx(mean, rel=1e-12)
    assert m.mean_square == pytest.approx(square, rel=1e-12)
    assert m.aversion == pytest.approx(max(mean, 0.0) / square, rel=1e-12)


def test_at_rate_one_the_slopes_are_the_rollouts_own_sharpe_ratios() -> None:
    g = torch.Generator().manual_seed(3)
    slopes, nxt = torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g)
    m = RewardMoments()
    for r in _rollouts(4):
        m = update_reward_moments(m, r, 1.0)
        assert m.mean == float(r.double().mean())
        own = float(r.double().mean().clamp(min=0) / r.double().pow(2).mean())
        assert m.aversion == pytest.approx(own, rel=1e-12)
        want = sharpe_slopes(r, slopes, nxt, own)
        assert torch.allclose(sharpe_slopes(r, slopes, nxt, m.aversion), want, rtol=1e-6)


def test_no_aversion_without_rewards_or_with_a_loss() -> None:
    assert RewardMoments().aversion == 0.0
    m = update_reward_moments(RewardMoments(), torch.full((4, 2), -0.01), 0.1)
    assert m.mean < 0 and m.aversion == 0.0


def test_the_default_rate_is_the_one_chosen_and_out_of_range_rates_are_refused() -> None:
    assert Config().ppo.sharpe_rate == 0.1
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="sharpe_rate"):
            Config(ppo={"sharpe_rate": bad})
