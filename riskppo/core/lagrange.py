"""Lagrange-multiplier update for the CVaR constraint (R-RISK-2)."""

from __future__ import annotations

import math

__all__ = ["cvar_violation", "lagrange_step"]


def cvar_violation(cvar: float, cvar_limit: float) -> float:
    """Constraint violation ``cvar_limit − cvar`` of ``CVaR_α(R) ≥ cvar_limit`` (return units).

    Positive when the constraint is violated (the CVaR is below the limit), so
    :func:`lagrange_step` raises λ; negative when it holds with slack, so λ decays toward 0.
    Logged as ``risk/cvar_violation``.
    """
    return cvar_limit - cvar


def lagrange_step(lam: float, violation: float, lr: float, lam_max: float | None = None) -> float:
    """Projected dual ascent ``λ ← clip(λ + lr · violation, 0, lam_max)`` (R-RISK-2).

    Args:
        lam: current multiplier λ ≥ 0.
        violation: constraint violation (see :func:`cvar_violation`; positive = violated).
        lr: dual learning rate (``lambda_lr``) ≥ 0.
        lam_max: optional cap on λ (≥ 0); ``None`` = no cap.

    Returns:
        The new λ in ``[0, lam_max]`` (logged as ``risk/lambda``).

    Raises:
        ValueError: on non-finite inputs, ``lam < 0``, ``lr < 0`` or ``lam_max < 0``.
    """
    fn = "lagrange_step"
    for name, x in (("lam", lam), ("violation", violation), ("lr", lr)):
        if not math.isfinite(x):
            raise ValueError(f"{fn}: {name} must be finite, got {x}")
    if lam < 0.0 or lr < 0.0:
        raise ValueError(f"{fn}: lam and lr must be >= 0, got lam={lam}, lr={lr}")
    if lam_max is not None and not (lam_max >= 0.0):
        raise ValueError(f"{fn}: lam_max must be >= 0 or None, got {lam_max}")
    new = max(lam + lr * violation, 0.0)
    return new if lam_max is None else min(new, lam_max)
