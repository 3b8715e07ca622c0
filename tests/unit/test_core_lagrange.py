"""Projected dual ascent for the CVaR multiplier (R-RISK-2)."""

from __future__ import annotations

import pytest

from riskppo.core import cvar_violation, lagrange_step


def test_ascent_and_projection() -> None:
    assert lagrange_step(1.0, 2.0, 0.1) == pytest.approx(1.2)
    assert lagrange_step(0.1, -10.0, 0.1) == 0.0  # projected to 0
    assert lagrange_step(9.0, 100.0, 1.0, lam_max=10.0) == 10.0  # projected to the cap
    assert lagrange_step(5.0, -1.0, 1.0, lam_max=10.0) == 4.0


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
