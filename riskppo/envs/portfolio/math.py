"""Pure math of a many-asset portfolio: volatility targeting, target weights from an action, and
the accounting of one rebalancing step. The causal covariance ``Σ̂_t`` (``[T, N, N]``) it sizes
with is one of :mod:`riskppo.envs.market.estimators`.

**Volatility targeting.** For signal weights ``w`` the exposure scale is
``min(vol_target / sqrt(wᵀ Σ̂_t w · bars_per_year), max_leverage)`` (the portfolio analogue of
:func:`~riskppo.envs.execution.sizing.vol_target_scale`; a zero variance takes the leverage cap),
and the held weights are ``scale · w``; the rest of the equity is cash earning nothing.

**One step** (the fill tables of :mod:`riskppo.envs.execution.fills`, per asset: ``old`` earned by
the weights held before the fill, ``new`` by those filled): with ``g(h, r) = Σ_i h_i (e^{r_i} − 1)``
the simple return of weights ``h`` over log returns ``r``,

.. code-block:: text

    gross   = log(1 + g(h_prev, old)) + log(1 + g(h_new, new))
    drifted = h_prev ⊙ e^{old} / (1 + g(h_prev, old))        weights just before the fill
    fee     = fee · Σ_i |h_new,i − drifted_i|                 cost on each asset's |Δweight|
    borrow  = borrow_rate / bars_per_year · Σ_i max(−held_i, 0)
    h_next  = h_new ⊙ e^{new} / (1 + g(h_new, new))          weights held after the step

so the rebalancing that price drift causes is paid for, and the sum of ``gross − fee − borrow``
over an episode is the log of the final equity. Asset ``i`` contributes
``h_prev,i (e^{old_i} − 1) + h_new,i (e^{new_i} − 1)`` to the step's simple return (exactly
``e^{gross} − 1`` summed over the assets when one leg is empty, as with next-close fills).
``held`` (the weights over the bar's session) is ``h_prev`` for a next-close fill, else
``h_new``. A step whose loss would take the equity to
zero or below (only possible with leverage) is floored at a growth of ``1e-12``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = [
    "MAX_LOGIT_SCALE",
    "StepAccount",
    "long_only_weights",
    "long_short_weights",
    "rebalance_step",
    "vol_scale",
]

MAX_LOGIT_SCALE = 50.0  # e^50 is far from float64's overflow at e^709
_MIN_GROWTH = 1e-12
_sum = np.add.reduce  # a direct ufunc reduction: half the overhead of ndarray.sum on [N]


def vol_scale(
    w: np.ndarray, cov: np.ndarray, target: float, max_leverage: float, bars_per_year: float
) -> float:
    """Exposure scale of signal weights ``w`` ``[N]`` under per-bar covariance ``cov``
    ``[N, N]``: ``min(target / annualised portfolio vol, max_leverage)``."""
    var = float(w @ cov @ w) * bars_per_year
    if var <= 0.0:
        return max_leverage
    return min(target / math.sqrt(var), max_leverage)


def long_only_weights(action: np.ndarray, logit_scale: float) -> np.ndarray:
    """Simplex weights ``softmax(logit_scale · clip(action, −1, 1))`` (``[N]``, each > 0, sum
    1). A zero action is equal weight; ``logit_scale`` bounds how concentrated a portfolio the
    box of actions reaches (the largest weight ratio is ``e^{2 · logit_scale}``). The logits are
    bounded by ``logit_scale`` (<= :data:`MAX_LOGIT_SCALE`), so no max is subtracted."""
    e = np.exp(np.minimum(np.maximum(action, -1.0), 1.0) * logit_scale)
    return e / _sum(e)


def long_short_weights(action: np.ndarray, max_gross: float) -> np.ndarray:
    """Weights ``clip(action, −1, 1)`` scaled down so that ``Σ|w| <= max_gross`` (``[N]``)."""
    a = np.minimum(np.maximum(action, -1.0), 1.0)
    gross = float(_sum(np.abs(a)))
    return a * (max_gross / gross) if gross > max_gross else a


class StepAccount(NamedTuple):
    """One rebalancing step (module docstring); returns are log returns, costs log-equity."""

    gross: float
    fee_cost: float
    borrow_cost: float
    turnover: float  # Σ|h_new − drifted|
    held_after: np.ndarray  # [N] weights after the step's price moves
    contributions: np.ndarray  # [N] h_prev,i (e^{old_i} − 1) + h_new,i (e^{new_i} − 1)


def rebalance_step(
    h_prev: np.ndarray,
    h_new: np.ndarray,
    e_old: np.ndarray | None,
    e_new: np.ndarray | None,
    *,
    fee: float,
    borrow_per_bar: float,
    delayed: bool,
) -> StepAccount:
    """Account one step: ``h_prev`` ``[N]`` held weights, ``h_new`` ``[N]`` the filled targets,
    ``e_old`` / ``e_new`` ``[N]`` the simple returns ``e^{old} − 1`` / ``e^{new} − 1`` (``None``:
    zero, the fill mode's empty leg). ``borrow_per_bar = 0`` skips the short side."""
    log_growth = 0.0
    drifted = h_prev
    contributions = np.zeros_like(h_new)
    if e_old is not None:
        contributions = h_prev * e_old
        g_old = max(1.0 + float(_sum(contributions)), _MIN_GROWTH)
        drifted = (h_prev + contributions) / g_old
        log_growth = math.log(g_old)
    turnover = float(_sum(np.abs(h_new - drifted)))
    held_after = h_new
    if e_new is not None:
        c_new = h_new * e_new
        g_new = max(1.0 + float(_sum(c_new)), _MIN_GROWTH)
        held_after = (h_new + c_new) / g_new
        log_growth += math.log(g_new)
        contributions = contributions + c_new
    short = 0.0
    if borrow_per_bar > 0.0:
        short = float(_sum(np.maximum(-(h_prev if delayed else h_new), 0.0)))
    return StepAccount(
        gross=log_growth,
        fee_cost=fee * turnover,
        borrow_cost=borrow_per_bar * short,
        turnover=turnover,
        held_after=held_after,
        contributions=contributions,
    )
