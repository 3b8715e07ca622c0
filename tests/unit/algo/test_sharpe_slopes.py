"""The pathwise term's Sharpe utility: each decision's slope is the gradient of the rollout's
Sharpe ratio in its action, checked against automatic differentiation of the Sharpe ratio of a
toy account whose reward depends on the last two actions (a session leg, an overnight leg, a
fee on the trade), and its mean–variance shape: the weights fall as the reward rises."""

from __future__ import annotations

import pytest
import torch

from riskppo.algo.losses import sharpe_slopes


def _account(drift: float, seed: int = 0):
    """Toy rewards ``R_t = a_t x_t + a_{t-1} y_t − fee |a_t − a_{t-1}|`` ``[T, N]`` with their
    exact slopes: ``∂R_t/∂a_t`` and ``∂R_{t+1}/∂a_t``."""
    g = torch.Generator().manual_seed(seed)
    T, N, fee = 9, 4, 1e-3
    x = drift + 0.01 * torch.randn(T, N, generator=g, dtype=torch.float64)
    y = 0.005 * torch.randn(T, N, generator=g, dtype=torch.float64)
    a = torch.rand(T, N, generator=g, dtype=torch.float64, requires_grad=True)
    prev = torch.cat([torch.zeros(1, N, dtype=torch.float64), a[:-1]])
    rewards = a * x + prev * y - fee * (a - prev).abs()
    own = x - fee * torch.sign(a - prev)
    nxt = torch.zeros(T, N, dtype=torch.float64)
    nxt[:-1] = y[1:] + fee * torch.sign(a[1:] - a[:-1])
    return a, rewards, own.detach(), nxt.detach()


def own_aversion(r: torch.Tensor) -> float:
    """The rollout's own risk aversion ``max(A, 0) / B``."""
    return float(r.mean().clamp(min=0) / r.pow(2).mean())


def test_the_slopes_are_the_sharpe_ratios_gradient_up_to_a_positive_constant():
    a, r, own, nxt = _account(drift=0.004)
    mean, square = r.mean(), r.pow(2).mean()
    (grad,) = torch.autograd.grad(mean / (square - mean**2).sqrt(), a)
    got = sharpe_slopes(r.detach(), own + nxt, nxt, own_aversion(r))
    ratio = grad / got
    want = square / (r.numel() * (square - mean**2) ** 1.5)  # B / (TN (B − A²)^{3/2})
    assert torch.allclose(ratio, want.detach().expand_as(ratio), rtol=1e-9)


def test_with_an_action_of_several_numbers_each_slope_is_the_sharpe_ratios_gradient():
    """A portfolio's account: ``R_t = Σ_k (a_tk x_tk + a_{t-1,k} y_tk − fee |a_tk − a_{t-1,k}|)``,
    slopes ``[T, N, A]`` against one reward per step ``[T, N]``."""
    g = torch.Generator().manual_seed(1)
    T, N, A, fee = 9, 3, 4, 1e-3
    x = 0.002 + 0.01 * torch.randn(T, N, A, generator=g, dtype=torch.float64)
    y = 0.005 * torch.randn(T, N, A, generator=g, dtype=torch.float64)
    a = torch.rand(T, N, A, generator=g, dtype=torch.float64, requires_grad=True)
    prev = torch.cat([torch.zeros(1, N, A, dtype=torch.float64), a[:-1]])
    r = (a * x + prev * y - fee * (a - prev).abs()).sum(-1)
    own = (x - fee * torch.sign(a - prev)).detach()
    nxt = torch.zeros(T, N, A, dtype=torch.float64)
    nxt[:-1] = y[1:] + fee * torch.sign(a[1:] - a[:-1]).detach()
    mean, square = r.mean(), r.pow(2).mean()
    (grad,) = torch.autograd.grad(mean / (square - mean**2).sqrt(), a)
    got = sharpe_slopes(r.detach(), own + nxt, nxt, own_aversion(r))
    want = square / (r.numel() * (square - mean**2) ** 1.5)
    assert torch.allclose(grad / got, want.detach().expand_as(got), rtol=1e-9)


def test_the_mean_return_slopes_come_back_where_the_rollout_lost_money():
    _, r, own, nxt = _account(drift=-0.01)
    assert r.mean() < 0
    assert torch.equal(sharpe_slopes(r.detach(), own + nxt, nxt, own_aversion(r)), own + nxt)


def test_a_higher_reward_weighs_its_slope_less():
    """``w = 1 − (A/B) R``: with the next step's part 0 the slope is scaled by a weight that
    falls linearly in the step's own reward, by the rollout's ``A/B``."""
    r = torch.tensor([[0.02], [0.01], [-0.01], [0.0]])
    ones = torch.ones_like(r)
    w = sharpe_slopes(r, ones, torch.zeros_like(r), own_aversion(r))
    c = r.mean() / r.pow(2).mean()
    assert torch.allclose(w, 1 - c * r)
    assert w[0] < w[1] < w[3] < w[2]


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="sharpe_slopes"):
        sharpe_slopes(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2, 3), 0.0)
    with pytest.raises(ValueError, match="sharpe_slopes"):
        sharpe_slopes(torch.zeros(3, 2), torch.zeros(3, 2, 4), torch.zeros(3, 2, 5), 0.0)
