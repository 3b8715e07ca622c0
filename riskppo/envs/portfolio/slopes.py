"""Exact slopes of the portfolio env's reward in its action, for the pathwise policy-gradient term.

The many-asset form of the trading env's slopes (:mod:`riskppo.envs.execution.account`): a price
taker's orders do not move prices, so each step's reward is a known function of the targets
filled at this step and the weights held from the last one, and its derivatives in the actions
are exact. The one subgradient taken is 0 for an asset's fee where its target equals its drifted
weight; where the sizing, the overlay cap or the box clips an action, the clipped branch's
slope (0 in the clipped direction) is taken, as in the trading env.

**The position map** (one decision; :class:`~riskppo.envs.portfolio.env.PortfolioEnv`): signal
weights ``w = W(a_{1..N})``, the exposure signal ``s = S(x)``, a scale ``m(w)`` and the targets

.. code-block:: text

    h = w · m · s       (no overlay, or mode="scale": m = min(scale(w), cap(w)))
    h = w · m           (mode="clip": m = min(scale(w) · s, cap(w)))

with ``scale(w) = min(c / sqrt(wᵀ Σ w), max_leverage)`` and ``cap(w) = c' / sqrt(max(wᵀ F w,
wᵀ S w))`` (both ``∝ (wᵀ M w)^{-1/2}`` where they bind: ``∇ = −m M w / (wᵀ M w)``).

**The reward** ``k (log g_old + log g_new − fee Σ|h − d| − borrow)``
(:mod:`riskppo.envs.portfolio.math`) has, with ``d = (h_prev ⊙ (1 + e_old)) / g_old`` the
drifted weights,

.. code-block:: text

    ∂reward_t/∂h_t      = k (e_new / g_new − fee sign(h_t − d) + borrow_per_bar [h_t < 0])
    ∂reward_t/∂h_prev   = k (e_old / g_old + D(h_prev, e_old)ᵀ fee sign(h_t − d)
                             + borrow_per_bar [h_prev < 0])
    D(h, e) = ∂(h ⊙ (1 + e) / (1 + hᵀe))/∂h = diag(1 + e) / g − (h ⊙ (1 + e)) eᵀ / g²

(the borrow term in whichever weights are held over the bar: ``h_prev`` with a next-close
fill, else ``h_t``). ``h_prev`` of step ``t`` is the last targets after their own leg's
returns, ``h_{t-1} ⊙ (1 + e_new) / g_new``, so ``∂h_prev/∂a_{t-1} = D(h_{t-1}, e_new) ·
∂h_{t-1}/∂a_{t-1}``. A growth floored at its minimum (only with leverage) is treated as
unfloored.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "InverseVol",
    "drift_product",
    "position_jacobian",
    "reward_gradients",
    "weights_jacobian",
]


def weights_jacobian(
    a: np.ndarray, w: np.ndarray, long_only: bool, logit_scale: float, max_gross: float
) -> np.ndarray:
    """``∂w/∂a`` ``[N, N]`` of the signal weights ``w`` of the actions ``a`` (``[N]``); an action
    outside the open box ``(−1, 1)`` is clipped and has slope 0."""
    inside = (a > -1.0) & (a < 1.0)
    if long_only:  # w = softmax(L · a)
        jac = logit_scale * (np.diag(w) - np.outer(w, w))
    else:  # w = a · min(1, G / Σ|a|)
        a_c = np.clip(a, -1.0, 1.0)
        gross = float(np.abs(a_c).sum())
        if gross <= max_gross:
            jac = np.eye(len(a))
        else:
            jac = (max_gross / gross) * (np.eye(len(a)) - np.outer(a_c, np.sign(a_c)) / gross)
    return jac * inside


class InverseVol(NamedTuple):
    """A scale of the weights ``w`` that is ``value`` at ``w`` and, where it binds, ``c · (wᵀ cov
    w)^{-1/2}`` (``cov`` None: constant there — no sizing, the leverage cap, an infinite cap)."""

    value: float
    cov: np.ndarray | None

    def gradient(self, w: np.ndarray) -> np.ndarray:
        """``∇_w`` at ``w``: ``−value · cov w / (wᵀ cov w)`` (zeros where constant)."""
        if self.cov is None:
            return np.zeros_like(w)
        cw = self.cov @ w
        return -self.value * cw / float(w @ cw)


def position_jacobian(
    w: np.ndarray,
    w_jac: np.ndarray,
    scale: InverseVol,
    cap: InverseVol | None,
    signal: float,
    signal_slope: float | None,
    clip_mode: bool,
) -> np.ndarray:
    """``∂h/∂a`` ``[N, A]`` of the targets ``h`` (module docstring): ``w`` ``[N]`` and its Jacobian
    ``w_jac`` ``[N, N]``; the sizing's ``scale`` and the overlay's ``cap`` (None without an
    overlay); the exposure ``signal`` ``s`` and ``ds/dx`` (None without the exposure signal);
    ``clip_mode``: the overlay caps ``scale · s`` (else ``scale``)."""
    s = signal
    u, grad_u, du_ds = scale.value, scale.gradient(w), 0.0
    if clip_mode:
        u, grad_u, du_ds = u * s, grad_u * s, u
    if cap is not None and cap.value < u:  # the cap binds: m = cap(w)
        m, grad_m, dm_ds = cap.value, cap.gradient(w), 0.0
    else:
        m, grad_m, dm_ds = u, grad_u, du_ds
    k = 1.0 if clip_mode else s  # h = w · m · k: ∂h/∂w = k (m I + w ∇mᵀ), applied as rank one
    jac = k * (m * w_jac + np.outer(w, grad_m @ w_jac))
    if signal_slope is None:
        return jac
    dh_ds = w * dm_ds if clip_mode else w * m
    return np.concatenate([jac, (dh_ds * signal_slope)[:, None]], axis=1)


def drift_product(h: np.ndarray, e: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """``D(h, e) @ x`` for ``x`` ``[N, A]``: the Jacobian of the weights ``h`` after simple returns
    ``e`` (module docstring; the identity where the leg is empty), applied as its diagonal and
    rank-one parts without forming it."""
    if e is None:
        return x
    g = 1.0 + float(h @ e)
    grown = 1.0 + e
    return (grown / g)[:, None] * x - np.outer(h * grown / (g * g), e @ x)


def reward_gradients(
    h_prev: np.ndarray,
    h_new: np.ndarray,
    e_old: np.ndarray | None,
    e_new: np.ndarray | None,
    *,
    fee: float,
    borrow_per_bar: float,
    delayed: bool,
    reward_scale: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``(∂reward/∂h_new, ∂reward/∂h_prev)`` ``[N]`` each of one step (module docstring; the
    arguments of :func:`~riskppo.envs.portfolio.math.rebalance_step`)."""
    if e_old is None:  # nothing earned before the fill: d = h_prev
        fee_sign = fee * np.sign(h_new - h_prev)
        d_prev = fee_sign
    else:  # e_old / g_old + D(h_prev, e_old)ᵀ fee sign(h_new − d), D a diagonal and a rank one
        g_old = 1.0 + float(h_prev @ e_old)
        grown = 1.0 + e_old
        fee_sign = fee * np.sign(h_new - h_prev * grown / g_old)
        fee_grown = float((h_prev * grown) @ fee_sign) / (g_old * g_old)
        d_prev = (e_old + grown * fee_sign) / g_old - e_old * fee_grown
    d_new = -fee_sign if e_new is None else e_new / (1.0 + float(h_new @ e_new)) - fee_sign
    if borrow_per_bar > 0.0 and delayed:  # the weights held over the bar are h_prev
        d_prev = d_prev + borrow_per_bar * (h_prev < 0.0)
    elif borrow_per_bar > 0.0:
        d_new = d_new + borrow_per_bar * (h_new < 0.0)
    return reward_scale * d_new, reward_scale * d_prev
