"""Distributional critic math against hand-computed values, textbook loops and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from riskppo.core import (
    categorical_mean,
    categorical_projection,
    categorical_to_quantiles,
    categorical_value_loss,
    clip_categorical,
    clip_quantiles,
    quantile_huber_loss,
    quantile_midpoints,
    quantile_value_loss,
    scalar_to_categorical,
    twin_categorical_value_loss,
    twin_quantile_value_loss,
    twin_value_loss,
)

F64 = torch.float64


def _t(x: object) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


# ------------------------------------------------------------------ quantile Huber loss


def test_quantile_midpoints() -> None:
    torch.testing.assert_close(quantile_midpoints(4, dtype=F64), _t([0.125, 0.375, 0.625, 0.875]))
    assert quantile_midpoints(3).dtype == torch.float32


def test_quantile_huber_hand_computed() -> None:
    # pred q = (0, 2) at τ = (0.25, 0.75); targets (1, 3).
    # i=1 (q=0): δ = (1, 3) ≥ 0 → weight τ=0.25.
    #   κ=1: L = (0.5, 2.5)            → mean(0.125, 0.625) = 0.375
    #   κ=0: |δ| = (1, 3)              → mean(0.25, 0.75)   = 0.5
    #   κ=2: L/κ = (0.25, 4/2=2)       → mean(0.0625, 0.5)  = 0.28125
    # i=2 (q=2): δ = (−1, 1) → weights (|0.75−1|, 0.75) = (0.25, 0.75).
    #   κ=1: L = (0.5, 0.5)            → mean(0.125, 0.375) = 0.25
    #   κ=0: |δ| = (1, 1)              → mean(0.25, 0.75)   = 0.5
    #   κ=2: L/κ = (0.25, 0.25)        → mean(0.0625, 0.1875) = 0.125
    pred = _t([[0.0, 2.0]])
    target = _t([[1.0, 3.0]])
    taus = _t([0.25, 0.75])
    assert quantile_huber_loss(pred, target, taus, kappa=1.0).item() == pytest.approx(0.625)
    assert quantile_huber_loss(pred, target, taus, kappa=0.0).item() == pytest.approx(1.0)
    assert quantile_huber_loss(pred, target, taus, kappa=2.0).item() == pytest.approx(0.40625)
    # Default taus for Nq=2 are (0.25, 0.75); per-sample taus [B, Nq] are accepted too.
    assert quantile_huber_loss(pred, target).item() == pytest.approx(0.625)
    assert quantile_huber_loss(pred, target, taus[None]).item() == pytest.approx(0.625)


def test_quantile_huber_is_per_sample() -> None:
    pred = _t([[0.0, 2.0], [0.0, 2.0]])
    target = _t([[1.0, 3.0], [0.0, 2.0]])
    out = quantile_huber_loss(pred, target, kappa=0.0)
    # Second sample: i=1: δ=(0,2) → 0.25·(0+2)/2 = 0.25; i=2: δ=(−2,0) → (0.25·2 + 0)/2 = 0.25.
    torch.testing.assert_close(out, _t([1.0, 0.5]))


@pytest.mark.parametrize("kappa", [0.0, 0.02])
def test_quantile_loss_minimiser_is_the_sample_quantile(kappa: float) -> None:
    g = torch.Generator().manual_seed(0)
    samples = -torch.log(torch.rand(1000, generator=g, dtype=F64))  # Exponential(1)
    n_q = 8
    taus = quantile_midpoints(n_q, dtype=F64)
    q = torch.zeros(1, n_q, dtype=F64, requires_grad=True)
    # Plain SGD: the gradient of the pinball loss is F̂(q_i) − τ_i, so lr 1 is a damped root find.
    for _ in range(250):
        (grad,) = torch.autograd.grad(quantile_huber_loss(q, samples[None], taus, kappa).sum(), q)
        q = (q - grad).detach().requires_grad_(True)  # SGD with lr 1
    # τ·M is never an integer here, so the minimiser is the unique order statistic x_(⌈τM⌉).
    expected = np.quantile(samples.numpy(), taus.numpy(), method="inverted_cdf")
    np.testing.assert_allclose(q.detach().numpy()[0], expected, atol=0.02 if kappa else 0.005)


def test_quantile_huber_shape_errors() -> None:
    with pytest.raises(ValueError, match="batch size"):
        quantile_huber_loss(torch.zeros(3, 4), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="pred"):
        quantile_huber_loss(torch.zeros(4), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="taus"):
        quantile_huber_loss(torch.zeros(3, 4), torch.zeros(3, 5), taus=torch.zeros(5))
    with pytest.raises(ValueError, match="kappa"):
        quantile_huber_loss(torch.zeros(3, 4), torch.zeros(3, 5), kappa=-1.0)


# ------------------------------------------------------------------ categorical projection


def _c51_textbook(next_probs, rewards, dones, atoms, gamma):
    """Per-sample, per-atom loop from Bellemare et al. 2017, Algorithm 1 (plain floats)."""
    p = next_probs.tolist()
    z = atoms.tolist()
    n = len(z)
    v_min, v_max = z[0], z[-1]
    dz = (v_max - v_min) / (n - 1)
    out = [[0.0] * n for _ in p]
    for b in range(len(p)):
        for j in range(n):
            tz = float(rewards[b]) + gamma * (1.0 - float(dones[b])) * z[j]
            tz = min(max(tz, v_min), v_max)
            pos = (tz - v_min) / dz
            lo, hi = math.floor(pos), math.ceil(pos)
            if lo == hi:
                out[b][lo] += p[b][j]
            else:
                out[b][lo] += p[b][j] * (hi - pos)
                out[b][hi] += p[b][j] * (pos - lo)
    return torch.tensor(out, dtype=F64)


def _random_probs(b: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(b, n, generator=g, dtype=F64), dim=1)


def test_projection_matches_textbook_loop_and_conserves_mass() -> None:
    g = torch.Generator().manual_seed(11)
    atoms = torch.linspace(-5.0, 5.0, 21, dtype=F64)
    probs = _random_probs(32, 21, seed=1)
    rewards = 4.0 * torch.randn(32, generator=g, dtype=F64)
    dones = torch.rand(32, generator=g) < 0.3
    out = categorical_projection(probs, rewards, dones, atoms, 0.9)
    torch.testing.assert_close(out, _c51_textbook(probs, rewards, dones, atoms, 0.9))
    torch.testing.assert_close(out.sum(dim=1), torch.ones(32, dtype=F64))
    assert (out >= 0).all()


def test_projection_float32_rows_sum_to_one() -> None:
    atoms = torch.linspace(-10.0, 10.0, 51)
    probs = _random_probs(64, 51, seed=2).float()
    g = torch.Generator().manual_seed(3)
    out = categorical_projection(
        probs, 20 * torch.randn(64, generator=g), torch.zeros(64), atoms, 0.99
    )
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.sum(dim=1), torch.ones(64), atol=1e-5, rtol=0)


def test_projection_rewards_beyond_support_clip_to_end_atoms() -> None:
    atoms = torch.linspace(-1.0, 1.0, 11, dtype=F64)
    probs = _random_probs(2, 11, seed=4)
    out = categorical_projection(probs, _t([1e6, -1e6]), torch.zeros(2), atoms, 0.99)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], torch.eye(11, dtype=F64)[-1])
    torch.testing.assert_close(out[1], torch.eye(11, dtype=F64)[0])


def test_projection_exact_on_atom() -> None:
    atoms = torch.linspace(-2.0, 2.0, 5, dtype=F64)  # Δz = 1
    probs = _t([[0.1, 0.2, 0.3, 0.25, 0.15]])
    # Terminal with reward exactly on an atom: all mass at z = 1 (index 3).
    out = categorical_projection(probs, _t([1.0]), _t([1.0]), atoms, 0.9)
    torch.testing.assert_close(out[0], _t([0.0, 0.0, 0.0, 1.0, 0.0]))
    # γ = 1, r = 1: every atom moves exactly one step up; the top atom keeps two masses.
    out = categorical_projection(probs, _t([1.0]), _t([0.0]), atoms, 1.0)
    torch.testing.assert_close(out[0], _t([0.0, 0.1, 0.2, 0.3, 0.4]))


def test_projection_errors() -> None:
    atoms = torch.linspace(-1.0, 1.0, 5)
    probs = torch.full((2, 5), 0.2)
    with pytest.raises(ValueError, match="rewards contains 1 non-finite"):
        categorical_projection(probs, torch.tensor([0.0, float("nan")]), torch.zeros(2), atoms, 0.9)
    with pytest.raises(ValueError, match="evenly spaced"):
        categorical_projection(probs, torch.zeros(2), torch.zeros(2), atoms**3, 0.9)
    with pytest.raises(ValueError, match="atoms"):
        categorical_projection(probs[:, :4], torch.zeros(2), torch.zeros(2), atoms, 0.9)
    with pytest.raises(ValueError, match="dones"):
        categorical_projection(probs, torch.zeros(2), torch.zeros(3), atoms, 0.9)


def test_two_hot_mean_equals_clipped_scalar() -> None:
    atoms = torch.linspace(-3.0, 3.0, 13, dtype=F64)
    values = _t([-10.0, -3.0, -1.3, 0.0, 0.25, 2.9999, 3.0, 7.5])
    out = scalar_to_categorical(values, atoms)
    torch.testing.assert_close(out.sum(dim=1), torch.ones(8, dtype=F64))
    assert ((out > 0).sum(dim=1) <= 2).all() and (out >= 0).all()
    torch.testing.assert_close((out * atoms).sum(dim=1), values.clamp(-3.0, 3.0))
    torch.testing.assert_close(categorical_mean(out, atoms), values.clamp(-3.0, 3.0))
    with pytest.raises(ValueError, match="values contains"):
        scalar_to_categorical(_t([float("inf")]), atoms)


def test_categorical_to_quantiles_step_inverse_cdf() -> None:
    atoms = _t([0.0, 1.0, 2.0])
    probs = _t([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    taus = _t([0.1, 0.2, 0.25, 0.5, 0.51, 1.0])
    out = categorical_to_quantiles(probs, atoms, taus)
    torch.testing.assert_close(out[0], _t([0.0, 0.0, 1.0, 1.0, 2.0, 2.0]))
    torch.testing.assert_close(out[1], torch.zeros(6, dtype=F64))


# ------------------------------------------------------------------ quantile value clipping


def _pred_old(seed: int, b: int = 64, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(b, n, generator=g, dtype=F64).sort(dim=1).values
    pred = old + 0.5 * torch.randn(b, 1, generator=g, dtype=F64)  # mean shifts
    pred = pred * torch.exp(0.5 * torch.randn(b, 1, generator=g, dtype=F64))  # spread changes
    return pred, old


def _std(x: torch.Tensor) -> torch.Tensor:
    return x.std(dim=1, correction=0)


def test_mean_only_bounds_mean_and_leaves_spread_unchanged() -> None:
    pred, old = _pred_old(0)
    clip = 0.1
    out, touched = clip_quantiles(pred, old, clip, "mean_only")
    assert ((out.mean(1) - old.mean(1)).abs() <= clip + 1e-12).all()
    torch.testing.assert_close(_std(out), _std(pred))  # variance is NOT constrained
    expected_touched = (pred.mean(1) - old.mean(1)).abs() > clip
    assert torch.equal(touched, expected_touched)
    assert 0 < touched.sum() < len(touched)
    assert torch.equal(out[~touched], pred[~touched])
    # The spread of the clipped prediction exceeds the old spread ± clip somewhere.
    assert ((_std(out) - _std(old)).abs() > clip).any()


def test_mean_and_variance_bounds_both() -> None:
    pred, old = _pred_old(1)
    clip = 0.1
    out, touched = clip_quantiles(pred, old, clip, "mean_and_variance")
    assert ((out.mean(1) - old.mean(1)).abs() <= clip + 1e-12).all()
    lo = (_std(old) - clip).clamp_min(0.0)
    assert (_std(out) >= lo - 1e-12).all() and (_std(out) <= _std(old) + clip + 1e-12).all()
    mean_moved = (pred.mean(1) - old.mean(1)).abs() > clip
    spread_moved = (_std(pred) - _std(old)).abs() > clip
    assert torch.equal(touched, mean_moved | spread_moved)
    assert torch.equal(out[~touched], pred[~touched])


def test_per_quantile_bounds_each_quantile() -> None:
    pred, old = _pred_old(2)
    clip = 0.2
    out, touched = clip_quantiles(pred, old, clip, "per_quantile")
    assert ((out - old).abs() <= clip + 1e-12).all()
    expected = torch.minimum(torch.maximum(pred, old - clip), old + clip)
    torch.testing.assert_close(out, expected)
    assert torch.equal(touched, ((pred - old).abs() > clip).any(dim=1))


@pytest.mark.parametrize("mode", ["mean_only", "mean_and_variance", "per_quantile"])
def test_clip_gradient_flows_where_not_clipped(mode: str) -> None:
    pred, old = _pred_old(3)
    pred.requires_grad_(True)
    out, touched = clip_quantiles(pred, old, 0.1, mode)
    out.sum().backward()
    assert pred.grad is not None
    torch.testing.assert_close(pred.grad[~touched], torch.ones_like(pred.grad[~touched]))
    assert torch.isfinite(pred.grad).all()


def test_clip_none_and_invalid_arguments() -> None:
    pred, old = _pred_old(4)
    out, touched = clip_quantiles(pred, old, 0.1, "none")
    assert out is pred and not touched.any()
    with pytest.raises(ValueError, match="mode"):
        clip_quantiles(pred, old, 0.1, "bogus")
    with pytest.raises(ValueError, match="clip"):
        clip_quantiles(pred, old, -0.1, "mean_only")
    with pytest.raises(ValueError, match="old_pred"):
        clip_quantiles(pred, old[:, :3], 0.1, "mean_only")


# With one quantile at τ = 0.5 and κ = 0 the loss is L(q, t) = 0.5·|t − q|: easy to hand-compute.
# old = 0 everywhere, clip = 0.2.
#   sample 1: pred 0.5 → clipped 0.2, t = 1: L(pred) 0.25, L(clipped) 0.40 → max 0.40 (clipped)
#   sample 2: pred 0.5 → clipped 0.2, t = 0: L(pred) 0.25, L(clipped) 0.10 → max 0.25 (unclipped)
#   sample 3: pred 0.1 (untouched),   t = 1: L = 0.45                      → max 0.45
# element-wise: mean(0.40, 0.25, 0.45) = 1.1/3; max of means: max(0.95/3, 0.95/3) = 0.95/3;
# clipping the target to old ± clip as well would give sample 1 max(0.25, 0) → 0.95/3.
PRED_1Q = [[0.5], [0.5], [0.1]]
TARGET_1Q = [1.0, 0.0, 1.0]


@pytest.mark.parametrize("mode", ["mean_only", "mean_and_variance", "per_quantile"])
def test_quantile_value_loss_elementwise_max_with_unclipped_target(mode: str) -> None:
    pred = _t(PRED_1Q).requires_grad_(True)
    old = torch.zeros(3, 1, dtype=F64)
    target = _t(TARGET_1Q)
    target_copy = target.clone()
    loss, frac = quantile_value_loss(pred, old, target, kappa=0.0, clip=0.2, mode=mode)
    assert loss.item() == pytest.approx(1.1 / 3)
    assert frac.item() == pytest.approx(2 / 3)
    loss.backward()
    assert torch.equal(target, target_copy)  # target never modified
    # Sample 1 takes the clipped (constant) term → no gradient; 2 and 3 take the unclipped term.
    assert pred.grad is not None
    torch.testing.assert_close(pred.grad[:, 0], _t([0.0, 0.5 / 3, -0.5 / 3]))


def test_quantile_value_loss_target_shapes_and_no_clip() -> None:
    pred, old = _pred_old(5)
    target = torch.randn(64, dtype=F64)
    l1, f1 = quantile_value_loss(pred, old, target, clip=None, mode="mean_only")
    l2, f2 = quantile_value_loss(pred, old, target[:, None], clip=0.1, mode="none")
    expected = quantile_huber_loss(pred, target[:, None]).mean()
    torch.testing.assert_close(l1, expected)
    torch.testing.assert_close(l2, expected)
    assert f1.item() == 0.0 and f2.item() == 0.0
    with pytest.raises(ValueError, match="target"):
        quantile_value_loss(pred, old, target[:10], clip=0.1, mode="mean_only")


def test_twin_quantile_each_critic_clipped_against_its_own_old() -> None:
    # One sample, target 1, one quantile at τ = 0.5, κ = 0: L(q) = 0.5·|1 − q|; clip 0.2.
    #   critic 1: pred 0.5, own old 0.00 → clipped to 0.2: max(0.25, 0.40) = 0.40
    #   critic 2: pred 0.6, own old 0.45 → untouched:                        0.20
    #   own olds → (0.40 + 0.20) / 2 = 0.30
    #   swapped olds: critic 1 vs 0.45 → untouched 0.25; critic 2 vs 0.0 → clipped to 0.2,
    #   max(0.20, 0.40) = 0.40 → (0.25 + 0.40) / 2 = 0.325
    preds = [_t([[0.5]]), _t([[0.6]])]
    olds = [_t([[0.0]]), _t([[0.45]])]
    target = _t([1.0])
    out = twin_quantile_value_loss(preds, olds, target, kappa=0.0, clip=0.2, mode="per_quantile")
    assert out.loss.item() == pytest.approx(0.30)
    individual = [
        quantile_value_loss(p, o, target, kappa=0.0, clip=0.2, mode="per_quantile")[0]
        for p, o in zip(preds, olds)
    ]
    torch.testing.assert_close(out.loss, twin_value_loss(individual))
    assert [x.item() for x in out.per_critic_loss] == pytest.approx([0.40, 0.20])
    assert out.clip_fraction.item() == pytest.approx(0.5)
    swapped = twin_quantile_value_loss(
        preds, olds[::-1], target, kappa=0.0, clip=0.2, mode="per_quantile"
    )
    assert swapped.loss.item() == pytest.approx(0.325)
    with pytest.raises(ValueError, match="one old prediction per critic"):
        twin_quantile_value_loss(preds, olds[:1], target, clip=0.2, mode="per_quantile")


# ------------------------------------------------------------------ categorical value loss


def test_categorical_loss_is_cross_entropy_over_log_n() -> None:
    for n in (11, 51):
        atoms = torch.linspace(-1.0, 1.0, n, dtype=F64)
        logits = torch.zeros(3, n, dtype=F64)  # uniform prediction
        target = torch.eye(n, dtype=F64)[:3]  # one-hot targets
        loss, frac = categorical_value_loss(
            logits, torch.softmax(logits, 1), target, atoms, clip=None, mode="none"
        )
        assert loss.item() == pytest.approx(1.0)  # log N / log N
        assert frac.item() == 0.0
    g = torch.Generator().manual_seed(6)
    logits = torch.randn(4, 7, generator=g, dtype=F64)
    target = _random_probs(4, 7, seed=7)
    p = np.exp(logits.numpy())
    p /= p.sum(axis=1, keepdims=True)
    expected = (-(target.numpy() * np.log(p)).sum(axis=1) / np.log(7)).mean()
    atoms = torch.linspace(0.0, 6.0, 7, dtype=F64)
    loss, _ = categorical_value_loss(logits, target, target, atoms, clip=None, mode="none")
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_categorical_per_quantile_raises() -> None:
    atoms = torch.linspace(-1.0, 1.0, 5)
    x = torch.full((2, 5), 0.2)
    with pytest.raises(ValueError, match="per_quantile clipping is only defined for quantile"):
        categorical_value_loss(x, x, x, atoms, clip=0.1, mode="per_quantile")


def _cat_mean_std(probs: torch.Tensor, atoms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = (probs * atoms).sum(1)
    var = (probs * (atoms - mean[:, None]) ** 2).sum(1)
    return mean, var.sqrt()


def _cat_pair(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(predicted logits [16, 401], old probabilities [16, 401], atoms [401]): discretised
    Gaussians whose mean and spread differ between prediction and old prediction."""
    # Fine support (Δz = 0.1) far wider than the distributions: no mass reaches the end atoms.
    atoms = torch.linspace(-20.0, 20.0, 401, dtype=F64)
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(16, 1, generator=g, dtype=F64)
    widths = 0.5 * torch.exp(0.2 * torch.randn(16, 1, generator=g, dtype=F64))
    old = torch.softmax(-0.5 * ((atoms - centres) / widths) ** 2, dim=1)
    shift = 0.5 * torch.randn(16, 1, generator=g, dtype=F64)
    stretch = torch.exp(0.3 * torch.randn(16, 1, generator=g, dtype=F64))
    logits = -0.5 * ((atoms - centres - shift) / (widths * stretch)) ** 2
    return logits, old, atoms


def test_categorical_mean_only_clip() -> None:
    logits, old, atoms = _cat_pair(8)
    probs = torch.softmax(logits, 1)
    clip = 0.1
    out, touched = clip_categorical(probs, old, atoms, clip, "mean_only")
    m_out, s_out = _cat_mean_std(out, atoms)
    m_old, _ = _cat_mean_std(old, atoms)
    m_p, s_p = _cat_mean_std(probs, atoms)
    torch.testing.assert_close(out.sum(1), torch.ones(16, dtype=F64))
    assert ((m_out - m_old).abs() <= clip + 1e-9).all()
    assert torch.equal(touched, (m_p - m_old).abs() > clip)
    assert 0 < touched.sum() < 16
    assert torch.equal(out[~touched], probs[~touched])
    # Spread unchanged up to the interpolation of the re-projection (≤ Δz/2 = 0.05).
    assert ((s_out - s_p).abs() <= 0.05).all()


def test_categorical_mean_and_variance_clip() -> None:
    logits, old, atoms = _cat_pair(9)
    probs = torch.softmax(logits, 1)
    clip = 0.1
    out, touched = clip_categorical(probs, old, atoms, clip, "mean_and_variance")
    m_out, s_out = _cat_mean_std(out, atoms)
    m_old, s_old = _cat_mean_std(old, atoms)
    assert ((m_out - m_old).abs() <= clip + 1e-9).all()
    # std bound up to the re-projection's interpolation variance (Δz = 0.1).
    assert (s_out <= torch.sqrt((s_old + clip) ** 2 + 0.1**2 / 4) + 1e-9).all()
    assert (s_out >= (s_old - clip).clamp_min(0.0) - 1e-9).all()
    assert torch.equal(out[~touched], probs[~touched])


def test_categorical_value_loss_elementwise_max_unclipped_target() -> None:
    logits, old, atoms = _cat_pair(10)
    logits.requires_grad_(True)
    probs = torch.softmax(logits.detach(), 1)
    log_probs = torch.log_softmax(logits.detach(), 1)
    target = scalar_to_categorical(torch.linspace(-2.0, 2.0, 16, dtype=F64), atoms)
    target_copy = target.clone()
    clip = 0.1
    loss, frac = categorical_value_loss(logits, old, target, atoms, clip=clip, mode="mean_only")
    clipped, touched = clip_categorical(probs, old, atoms, clip, "mean_only")
    log_n = math.log(401)
    ce_u = -(target * log_probs).sum(1) / log_n
    ce_c = -(target * clipped.clamp_min(1e-8).log()).sum(1) / log_n
    ce_c = torch.where(touched, ce_c, ce_u)
    per_sample_max = torch.maximum(ce_u, ce_c)
    # The batch mixes samples whose max is the clipped term and samples whose max is unclipped.
    assert (touched & (ce_c > ce_u)).any() and (touched & (ce_u > ce_c)).any()
    assert loss.item() == pytest.approx(per_sample_max.mean().item(), rel=1e-10)
    assert loss.item() > max(ce_u.mean().item(), ce_c.mean().item())  # not the max of means
    assert frac.item() == pytest.approx(touched.double().mean().item())
    loss.backward()
    assert torch.equal(target, target_copy)
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_twin_categorical_each_critic_against_its_own_old() -> None:
    logit, old, atoms = _cat_pair(12)
    other_old = torch.roll(old, shifts=5, dims=0)
    logits = [logit, torch.roll(logit, 3, dims=0) + 0.01]
    olds = [old, torch.roll(old, 3, dims=0)]
    target = scalar_to_categorical(torch.zeros(16, dtype=F64), atoms)
    out = twin_categorical_value_loss(logits, olds, target, atoms, clip=0.1, mode="mean_only")
    individual = [
        categorical_value_loss(lg, o, target, atoms, clip=0.1, mode="mean_only")[0]
        for lg, o in zip(logits, olds)
    ]
    torch.testing.assert_close(out.loss, (individual[0] + individual[1]) / 2)
    wrong = twin_categorical_value_loss(
        logits, [other_old, olds[1]], target, atoms, clip=0.1, mode="mean_only"
    )
    assert not torch.isclose(wrong.loss, out.loss)
