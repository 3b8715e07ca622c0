"""Projected dual ascent for the CVaR multiplier (R-RISK-2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from riskppo.core import (
    PIDLagrangeState,
    cvar_violation,
    dual_cap,
    lagrange_step,
    lagrangian_advantage,
    pid_lagrange_step,
)


def test_ascent_and_projection() -> None:
    assert lagrange_step(1.0, 2.0, 0.1) == pytest.approx(1.2)
    assert lagrange_step(0.1, -10.0, 0.1) == 0.0  # projected to 0
    assert lagrange_step(9.0, 100.0, 1.0, lam_max=10.0) == 10.0  # projected to the cap
    assert lagrange_step(5.0, -1.0, 1.0, lam_max=10.0) == 4.0


def test_dual_cap_is_the_smaller_of_the_two_caps() -> None:
    assert dual_cap(100.0, 19.0) == 19.0
    assert dual_cap(10.0, 19.0) == 10.0
    assert dual_cap(None, 19.0) == 19.0
    assert dual_cap(100.0, None) == 100.0
    assert dual_cap(None, None) is None


def test_violation_sign() -> None:
    # CVaR below the limit → positive violation → λ grows.
    assert cvar_violation(cvar=-3.0, cvar_limit=-1.0) == 2.0
    assert lagrange_step(0.0, cvar_violation(-3.0, -1.0), 0.5) == 1.0
    assert lagrange_step(0.0, cvar_violation(0.0, -1.0), 0.5) == 0.0


@pytest.mark.parametrize(
    ("lam", "violation", "lr", "lam_max"),
    [
        (-1.0, 0.0, 0.1, None),
        (0.0, float("nan"), 0.1, None),
        (0.0, 0.0, -0.1, None),
        (0.0, 0.0, 0.1, -1.0),
    ],
)
def test_invalid_arguments_raise(lam: float, violation: float, lr: float, lam_max) -> None:
    with pytest.raises(ValueError, match="lagrange_step"):
        lagrange_step(lam, violation, lr, lam_max)


# ---- PID Lagrangian (R-RISK-4) ------------------------------------------------------------------
def test_pid_with_integral_only_is_dual_ascent() -> None:
    """kp = kd = 0, no smoothing: λ_t equals projected dual ascent with lr = ki, step by step."""
    rng = np.random.default_rng(0)
    state, lam_dual = PIDLagrangeState(), 0.0
    for v in rng.normal(0.2, 1.0, 200):
        lam_pid, state = pid_lagrange_step(state, float(v), kp=0.0, ki=0.05, kd=0.0)
        lam_dual = lagrange_step(lam_dual, float(v), 0.05)
        assert lam_pid == pytest.approx(lam_dual, abs=1e-12)


def test_pid_terms_by_hand() -> None:
    s = PIDLagrangeState()
    lam, s = pid_lagrange_step(s, 1.0, kp=0.5, ki=0.1, kd=2.0, ema=0.5)
    # first call: smoothed = v = 1, I = 1, no derivative yet
    assert (s.p, s.i, s.d) == pytest.approx((0.5, 0.1, 0.0)) and lam == pytest.approx(0.6)
    lam, s = pid_lagrange_step(s, 3.0, kp=0.5, ki=0.1, kd=2.0, ema=0.5)
    # smoothed = 0.5·1 + 0.5·3 = 2; I = 4; D = 2·(2 − 1)
    assert (s.smoothed, s.integral) == pytest.approx((2.0, 4.0))
    assert (s.p, s.i, s.d) == pytest.approx((1.0, 0.4, 2.0)) and lam == pytest.approx(3.4)
    lam, s = pid_lagrange_step(s, -6.0, kp=0.5, ki=0.1, kd=2.0, ema=0.5)
    # slack: smoothed = −2, the P term pulls λ down at once; D only reacts to a rise
    assert s.d == 0.0 and s.p == pytest.approx(-1.0) and s.integral == pytest.approx(0.0)
    assert lam == 0.0  # projected at 0


def test_pid_falls_faster_than_dual_ascent_after_a_violation() -> None:
    """The P term lets λ drop as soon as the constraint holds with slack (damping, R-RISK-4)."""
    seq = [1.0] * 10 + [-0.5] * 5
    s, lam_dual = PIDLagrangeState(), 0.0
    for v in seq:
        lam_pid, s = pid_lagrange_step(s, v, kp=0.5, ki=0.05, kd=0.0)
        lam_dual = lagrange_step(lam_dual, v, 0.05)
    assert lam_pid < lam_dual


def test_pid_anti_windup_and_cap() -> None:
    s = PIDLagrangeState()
    for _ in range(1000):
        lam, s = pid_lagrange_step(s, 5.0, kp=0.0, ki=0.1, kd=0.0, lam_max=2.0)
    assert lam == 2.0 and s.integral == pytest.approx(20.0)  # I ≤ lam_max / ki
    lam, s = pid_lagrange_step(s, -5.0, kp=0.0, ki=0.1, kd=0.0, lam_max=2.0)
    assert lam == pytest.approx(1.5)  # recovers at once, no wound-up integral to unwind


def test_pid_integral_term_is_capped_at_i_max_below_lam_max() -> None:
    """``i_max`` caps ``ki·I`` (λ units); the P term still lifts λ above it up to ``lam_max``,
    and once the constraint holds the integral unwinds from ``i_max/ki``, not ``lam_max/ki``."""
    s = PIDLagrangeState()
    for _ in range(1000):
        lam, s = pid_lagrange_step(s, 5.0, kp=1.0, ki=0.1, kd=0.0, lam_max=100.0, i_max=4.0)
    assert s.integral == pytest.approx(40.0) and s.i == pytest.approx(4.0)
    assert lam == pytest.approx(9.0)  # P 5 + I 4
    lam, s = pid_lagrange_step(s, -1.0, kp=0.0, ki=0.1, kd=0.0, lam_max=100.0, i_max=4.0)
    assert lam == pytest.approx(3.9)
    # the smaller cap wins: lam_max below i_max
    for _ in range(1000):
        lam, s = pid_lagrange_step(s, 5.0, kp=0.0, ki=0.1, kd=0.0, lam_max=2.0, i_max=4.0)
    assert s.integral == pytest.approx(20.0) and lam == 2.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"violation": math.nan},
        {"kp": -1.0},
        {"ema": 1.0},
        {"lam_max": -1.0},
        {"i_max": 0.0},
    ],
)
def test_pid_invalid_arguments_raise(kwargs) -> None:
    args = {"violation": 1.0, "kp": 0.1, "ki": 0.1, "kd": 0.1, "ema": 0.0, "lam_max": None}
    args.update(kwargs)
    v = args.pop("violation")
    with pytest.raises(ValueError, match="pid_lagrange_step"):
        pid_lagrange_step(PIDLagrangeState(), v, **args)


# ---- bounded combination (R-RISK-4) -------------------------------------------------------------
def _reference_combination(adv, a_cvar, lam, per_env):
    a, c = np.asarray(adv, np.float64), np.asarray(a_cvar, np.float64)
    std = c.std(axis=0, ddof=1, keepdims=True) if per_env else np.array([[c.std(ddof=1)]])
    unit = np.where(std >= 1e-6, c / np.maximum(std, 1e-6), 0.0)
    return (a + lam * unit) / (1 + lam)


@pytest.mark.parametrize("per_env", [False, True])
@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0, 50.0])
def test_lagrangian_advantage_matches_reference(per_env, lam) -> None:
    g = torch.Generator().manual_seed(1)
    adv = torch.randn(32, 4, generator=g, dtype=torch.float64)
    a_cvar = torch.randn(32, 4, generator=g, dtype=torch.float64) * 20.0
    a_cvar[a_cvar > 0] = 0.0  # sparse, tail-only signal with the 1/α scale
    a_cvar[:, 2] *= 10.0  # one env far noisier: per-env scaling must differ from global
    out, unit = lagrangian_advantage(adv, a_cvar, lam, per_env=per_env)
    np.testing.assert_allclose(out.numpy(), _reference_combination(adv, a_cvar, lam, per_env))
    assert bool((unit[a_cvar == 0] == 0).all())  # scaled, not centred: no signal stays 0


def test_lagrangian_advantage_is_bounded_whatever_lambda() -> None:
    """A convex combination of two unit-scale parts: λ cannot swamp the return advantage."""
    g = torch.Generator().manual_seed(2)
    adv = torch.randn(64, 8, generator=g, dtype=torch.float64)
    a_cvar = torch.randn(64, 8, generator=g, dtype=torch.float64) * 1e4
    for lam in (0.1, 1.0, 1e3):
        out, unit = lagrangian_advantage(adv, a_cvar, lam)
        assert float(out.abs().max()) <= max(float(adv.abs().max()), float(unit.abs().max()))
        assert float(unit.std()) == pytest.approx(1.0)


def test_lagrangian_advantage_zero_lambda_and_constant_signal() -> None:
    adv = torch.randn(8, 2, dtype=torch.float64)
    out, _ = lagrangian_advantage(adv, torch.randn(8, 2, dtype=torch.float64), 0.0)
    assert torch.equal(out, adv)
    out, unit = lagrangian_advantage(adv, torch.full((8, 2), 3.0, dtype=torch.float64), 1.0)
    assert bool((unit == 0).all())  # no spread, no signal (never divided by ~0)
    torch.testing.assert_close(out, adv / 2)
    with pytest.raises(ValueError, match="lagrangian_advantage"):
        lagrangian_advantage(adv, torch.zeros(8, 3), 1.0)
