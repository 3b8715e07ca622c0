"""PPO surrogate, KL estimators and AWR weights (design §1.2, R-ALG-9/11/12)."""

from __future__ import annotations

import math

import pytest
import torch

from riskppo.core import PolicyLossStats, awr_weights, kl_estimators, ppo_policy_loss

F64 = torch.float64


def test_ratio_one_gives_minus_mean_advantage() -> None:
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(32, generator=g, dtype=F64).requires_grad_(True)
    adv = torch.randn(32, generator=g, dtype=F64)
    loss, stats = ppo_policy_loss(logp, logp.detach().clone(), adv, clip_range=0.2)
    assert isinstance(stats, PolicyLossStats)
    assert loss.item() == pytest.approx(-adv.mean().item())
    assert stats.clip_fraction.item() == 0.0 and stats.clamp_fraction.item() == 0.0
    assert stats.approx_kl_k1.item() == 0.0 and stats.approx_kl_k3.item() == 0.0
    assert stats.n_nonfinite.item() == 0 and stats.n_large_log_ratio.item() == 0
    loss.backward()
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, -adv / 32)  # d(r·A)/d log π = r·A = A at r = 1
    for field in stats:
        assert field.dim() == 0 and not field.requires_grad


def test_clip_fraction_and_clipped_surrogate() -> None:
    old = torch.zeros(4, dtype=F64)
    logp = torch.tensor([math.log(1.5), math.log(1.5), 0.0, math.log(0.5)], dtype=F64)
    adv = torch.tensor([1.0, -1.0, 2.0, 1.0], dtype=F64)
    loss, stats = ppo_policy_loss(logp, old, adv, clip_range=0.2)
    # min(rA, clip(r)A): (1.2, −1.5, 2.0, 0.5) → loss −(1.2 − 1.5 + 2 + 0.5)/4
    assert loss.item() == pytest.approx(-(1.2 - 1.5 + 2.0 + 0.5) / 4)
    assert stats.clip_fraction.item() == pytest.approx(3 / 4)


def test_log_ratio_clamp_is_counted_and_keeps_loss_finite() -> None:
    old = torch.zeros(4, dtype=F64)
    logp = torch.tensor([25.0, -30.0, 11.0, 0.0], dtype=F64)
    adv = torch.tensor([-1.0, 1.0, 1.0, 1.0], dtype=F64)
    loss, stats = ppo_policy_loss(logp, old, adv, clip_range=0.2, log_ratio_clip=20.0)
    assert torch.isfinite(loss)
    # Sample 0: r = e^20 (clamped from e^25), A = −1 → min(−e^20, −1.2) = −e^20.
    # Sample 1: r = e^−20, A = 1 → e^−20. Sample 2: r = e^11 → 1.2. Sample 3: 1.
    expected = -(-math.exp(20.0) + math.exp(-20.0) + 1.2 + 1.0) / 4
    assert loss.item() == pytest.approx(expected)
    assert stats.clamp_fraction.item() == pytest.approx(0.5)
    assert stats.n_large_log_ratio.item() == 3
    assert stats.n_nonfinite.item() == 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_log_ratio_is_counted_not_clamped_away(bad: float) -> None:
    old = torch.zeros(4)
    logp = torch.tensor([0.0, bad, 0.1, 0.0])
    adv = torch.tensor([1.0, -1.0, 1.0, 1.0])
    loss, stats = ppo_policy_loss(logp, old, adv, clip_range=0.2)
    assert stats.n_nonfinite.item() == 1
    assert not torch.isfinite(loss)  # the caller sees it and skips the batch (R-ALG-9)
    assert stats.clamp_fraction.item() == 0.0  # a non-finite value is not reported as clamped
    assert torch.isfinite(stats.approx_kl_k1) and torch.isfinite(stats.approx_kl_k3)


def test_kl_estimators_match_analytic_kl() -> None:
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)  # old policy (samples drawn from it)
    q = torch.tensor([0.25, 0.25, 0.3, 0.2], dtype=F64)  # new policy
    kl = float((p * (p / q).log()).sum())
    g = torch.Generator().manual_seed(1)
    actions = torch.multinomial(p, 200_000, replacement=True, generator=g)
    k1, k3 = kl_estimators(q.log()[actions], p.log()[actions])
    assert k1.item() == pytest.approx(kl, abs=0.01)
    assert k3.item() == pytest.approx(kl, abs=0.01)
    assert k3.item() >= 0.0
    _, stats = ppo_policy_loss(
        q.log()[actions], p.log()[actions], torch.ones(200_000, dtype=F64), clip_range=0.2
    )
    assert stats.approx_kl_k1.item() == pytest.approx(k1.item())
    assert stats.approx_kl_k3.item() == pytest.approx(k3.item())


def test_ppo_shape_and_argument_errors() -> None:
    x = torch.zeros(5)
    with pytest.raises(ValueError, match="adv"):
        ppo_policy_loss(x, x, torch.zeros(4), clip_range=0.2)
    with pytest.raises(ValueError, match="old_log_prob"):
        ppo_policy_loss(x, torch.zeros(5, 1), x, clip_range=0.2)
    with pytest.raises(ValueError, match="clip_range"):
        ppo_policy_loss(x, x, x, clip_range=0.0)


def test_awr_weights_no_overflow_and_exact_below_cap() -> None:
    adv = torch.tensor([1e6, -1e6, 0.0, 5.0, 10.0, 1e30])
    w = awr_weights(adv, beta=5.0, max_weight=100.0)
    assert torch.isfinite(w).all()
    assert w[0].item() == pytest.approx(100.0) and w[-1].item() == pytest.approx(100.0)
    assert w[1].item() == 0.0
    torch.testing.assert_close(w[2:5], torch.exp(torch.tensor([0.0, 1.0, 2.0])))
    # A/β = log(100) exactly is the cap boundary; just above it stays at the cap.
    assert awr_weights(torch.tensor([5.0 * math.log(100.0) + 1.0])).item() == pytest.approx(100.0)
    with pytest.raises(ValueError, match="beta"):
        awr_weights(adv, beta=0.0)
    with pytest.raises(ValueError, match="max_weight"):
        awr_weights(adv, max_weight=-1.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_awr_weight_at_the_cap_is_exp_of_the_clamped_exponent(dtype):
    """w = exp(min(A/β, log max_weight)): above the cap the weight is ``exp`` of the rounded
    ``log(max_weight)`` — e.g. 100.00000000000004 in float64, 99 in bfloat16 — whereas clamping
    the weight after ``exp`` gives exactly ``max_weight`` (and overflows ``exp`` to inf on the
    way, 1e30/5 ≫ 709). The two orders agree in exact arithmetic, so the rounding at the cap is
    the observable difference; both stay finite on ±inf advantages.
    Mutation: ``torch.exp(adv.detach() / beta).clamp(max=max_weight)`` in ``core.awr_weights``."""
    beta, max_weight = 5.0, 100.0
    adv = torch.tensor([1e3, 1e30, math.inf, 5.0, -1e30, -math.inf], dtype=dtype)
    w = awr_weights(adv, beta=beta, max_weight=max_weight)
    assert w.dtype == dtype
    cap = torch.exp(torch.tensor(math.log(max_weight), dtype=dtype))
    assert float(cap) != max_weight  # the case where the two orders give different weights
    for i in range(3):  # every advantage above the cap, +inf included
        assert float(w[i]) == float(cap), (i, float(w[i]))
    assert float(w[3]) == float(torch.exp(torch.tensor(1.0, dtype=dtype)))
    assert float(w[4]) == 0.0 and float(w[5]) == 0.0
    assert bool(torch.isfinite(w).all())
