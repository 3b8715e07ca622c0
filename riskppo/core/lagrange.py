"""Lagrange-multiplier updates for the CVaR constraint (R-RISK-2, R-RISK-4): projected dual
ascent and the PID Lagrangian."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "PIDLagrangeState",
    "cvar_violation",
    "dual_cap",
    "lagrange_step",
    "lagrangian_advantage",
    "pid_lagrange_step",
]


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


def dual_cap(lam_max: float | None, dual_max: float | None) -> float | None:
    """The cap on λ of :func:`lagrange_step` in training: ``min(dual_max, lam_max)`` (``None``
    without either), projected dual ascent's anti wind-up, as :func:`_integral_cap` is the PID
    Lagrangian's.

    Dual ascent's λ is the integral of the violations (``lr·Σv``), so it winds up as the PID
    integral did: after a long violation it returns from its cap only by ``lr·|v|`` per update,
    ``cap/(lr·|v|)`` updates (from ``lam_max = 100``: thousands). Above λ ≈ 19 the CVaR part's
    weight ``λ/(1+λ)`` (:func:`lagrangian_advantage`) is past 0.95 and barely changes, so
    ``dual_max`` (``risk.dual_lambda_max``, 19 by default) caps λ where it stops mattering."""
    caps = [c for c in (lam_max, dual_max) if c is not None]
    return min(caps) if caps else None


@dataclass(frozen=True)
class PIDLagrangeState:
    """State of :func:`pid_lagrange_step` (start with ``PIDLagrangeState()``).

    Attributes:
        integral: the I accumulator ``I ≥ 0`` (sum of violations, projected at 0 and at its cap).
        smoothed: EMA of the violation that the P and D terms read (0 before the first call).
        p, i, d: the three terms of the last returned λ (logged as ``risk/pid_{p,i,d}``).
        steps: calls so far (the first call has no EMA history and no derivative).
    """

    integral: float = 0.0
    smoothed: float = 0.0
    p: float = 0.0
    i: float = 0.0
    d: float = 0.0
    steps: int = 0


def pid_lagrange_step(
    state: PIDLagrangeState,
    violation: float,
    *,
    kp: float,
    ki: float,
    kd: float,
    ema: float = 0.0,
    lam_max: float | None = None,
    i_max: float | None = None,
) -> tuple[float, PIDLagrangeState]:
    """PID Lagrangian multiplier (Stooke, Achiam & Abbeel, ICML 2020, Algorithm 2; R-RISK-4).

    With ``v`` the constraint violation (positive = violated) and ``s`` its EMA
    (``s ← ema·s + (1 − ema)·v``, ``s = v`` at the first call)::

        I ← clip(I + v, 0, I_max)             I_max = min(i_max, lam_max) / ki  (∞ without caps)
        λ = clip(kp·s + ki·I + kd·max(s − s_prev, 0), 0, lam_max)

    The P term lets λ fall as fast as it rose once the constraint holds with slack, and the D
    term reacts to a worsening violation before the integral has grown: together they damp the
    oscillation that pure dual ascent (the I term alone) shows around a boundary optimum. With
    ``kp = kd = 0`` and ``ema = 0`` this is exactly :func:`lagrange_step` with ``lr = ki``
    (λ = ki·I) while λ stays below the caps. Anti wind-up: :func:`_integral_cap`.

    Args:
        state: the previous state.
        violation: this update's violation (finite).
        kp, ki, kd: gains ``≥ 0``.
        ema: smoothing of the violation for the P and D terms, in ``[0, 1)`` (0 = none).
        lam_max: optional cap on λ.
        i_max: optional cap on the integral term ``ki·I`` (λ units, ``> 0``); ``None``: ``lam_max``.

    Returns:
        ``(λ, new_state)`` with ``λ ∈ [0, lam_max]``.

    Raises:
        ValueError: on a non-finite violation, negative gains, ``ema`` outside ``[0, 1)``, or a
            negative ``lam_max`` or non-positive ``i_max``.
    """
    _check_pid_args(violation, kp, ki, kd, ema, lam_max, i_max)
    first = state.steps == 0
    smoothed = violation if first else ema * state.smoothed + (1.0 - ema) * violation
    integral = min(max(state.integral + violation, 0.0), _integral_cap(ki, lam_max, i_max))
    p = kp * smoothed
    i = ki * integral
    d = 0.0 if first else kd * max(smoothed - state.smoothed, 0.0)
    lam = max(p + i + d, 0.0)
    if lam_max is not None:
        lam = min(lam, lam_max)
    return lam, PIDLagrangeState(integral, smoothed, p, i, d, state.steps + 1)


def _check_pid_args(
    violation: float,
    kp: float,
    ki: float,
    kd: float,
    ema: float,
    lam_max: float | None,
    i_max: float | None,
) -> None:
    """The ``ValueError`` of :func:`pid_lagrange_step` on a bad argument (named)."""
    fn = "pid_lagrange_step"
    for name, x in (("violation", violation), ("kp", kp), ("ki", ki), ("kd", kd)):
        if not math.isfinite(x):
            raise ValueError(f"{fn}: {name} must be finite, got {x}")
    if min(kp, ki, kd) < 0.0:
        raise ValueError(f"{fn}: gains must be >= 0, got kp={kp}, ki={ki}, kd={kd}")
    if not 0.0 <= ema < 1.0:
        raise ValueError(f"{fn}: ema must be in [0, 1), got {ema}")
    if lam_max is not None and not (lam_max >= 0.0):
        raise ValueError(f"{fn}: lam_max must be >= 0 or None, got {lam_max}")
    if i_max is not None and not (i_max > 0.0):
        raise ValueError(f"{fn}: i_max must be > 0 or None, got {i_max}")


def _integral_cap(ki: float, lam_max: float | None, i_max: float | None) -> float:
    """``I_max = min(i_max, lam_max) / ki`` (∞ without caps or with ``ki = 0``): the PID
    Lagrangian's anti wind-up.

    The integral only falls by ``|v|`` per update once the constraint holds, so after a long
    violation λ returns from the integral term's cap ``λ_I`` in about ``(λ_I − 1) / (ki·|v|)``
    updates. What λ changes is the weight ``λ/(1+λ)`` of the CVaR part of the advantage
    (:func:`lagrangian_advantage`): 0.95 at λ = 19, 0.99 at 100, so an integral worth more than
    a few tens of λ adds almost nothing while it is violated and costs hundreds to thousands of
    updates to unwind. ``i_max`` caps the integral term where that weight saturates
    (``risk.pid_i_max``, 19 by default); the P and D terms can still lift λ above it, up to
    ``lam_max``, while a violation lasts."""
    caps = [c for c in (lam_max, i_max) if c is not None]
    return min(caps) / ki if caps and ki > 0.0 else math.inf


def lagrangian_advantage(
    adv: Tensor,
    a_cvar: Tensor,
    lam: float,
    *,
    per_env: bool = False,
    min_std: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """Return and CVaR advantages combined on bounded scales (R-RISK-4).

    ``Â_cvar = A_cvar / std(A_cvar)`` (float64, ddof=1, over all ``[T, N]`` entries or per env
    column with ``per_env``; scaled, **not** centred, so steps without a CVaR signal keep 0; a
    column whose std is below ``min_std`` gets 0), then::

        A_policy = (A + λ·Â_cvar) / (1 + λ)

    — the PPO-Lagrangian convention (OmniSafe/SafePO combine ``(Â_R − λ·Â_C)/(1+λ)``; here the
    CVaR advantage is reward-like, larger = less tail loss, hence the ``+``). ``A`` should already
    be normalised (``normalize_advantages``), so both parts have unit scale and the weight of the
    CVaR part is ``λ/(1+λ) < 1`` whatever λ is: λ cannot swamp the return signal, and the 1/α of
    the CVaR gradient no longer sets the scale. ``λ = 0`` returns ``A`` unchanged.

    Args:
        adv: ``[T, N]`` normalised return advantages.
        a_cvar: ``[T, N]`` CVaR advantages (raw units, :func:`~riskppo.core.cvar_advantage`).
        lam: the multiplier λ ≥ 0 (finite).

    Returns:
        ``(A_policy, Â_cvar)``, both ``[T, N]`` in ``adv``'s dtype.
    """
    fn = "lagrangian_advantage"
    if adv.shape != a_cvar.shape or adv.dim() != 2:
        raise ValueError(
            f"{fn}: adv {tuple(adv.shape)} and a_cvar {tuple(a_cvar.shape)} must both be [T, N]"
        )
    if not (math.isfinite(lam) and lam >= 0.0):
        raise ValueError(f"{fn}: lam must be finite and >= 0, got {lam}")
    x = a_cvar.double()
    std = x.std(dim=0, keepdim=True) if per_env else x.std().reshape(1, 1)
    std = torch.nan_to_num(std, nan=0.0)  # a single entry has no spread
    scaled = torch.where(std >= min_std, x / std.clamp_min(min_std), torch.zeros_like(x))
    combined = (adv.double() + lam * scaled) / (1.0 + lam)
    return combined.to(adv.dtype), scaled.to(adv.dtype)
