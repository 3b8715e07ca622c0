"""The account of one trading step: what holding an exposure *as a share of equity* earns, and
the step reward's exact derivative in the agent's actions.

The exposure ``p`` is the share of the account's equity held in the asset (``-1``: short the
whole equity). Each fill rebalances the holding to the target ``p_t``; between fills the account
holds a number of shares, so the share drifts with the price. With the fill tables of
:mod:`riskppo.envs.execution.fills` as simple returns ``E = e^{r} − 1`` — ``E_prev`` the previous
step's second leg (already earned by ``p_{t-1}``), ``E_old``/``E_new`` this step's legs — one step
``t -> t+1`` books

.. code-block:: text

    h        = p_{t-1} (1 + E_prev) / (1 + p_{t-1} E_prev)   share held at the close of bar t
    g_old    = 1 + h E_old                                    growth of equity up to the fill
    d        = h (1 + E_old) / g_old                          share just before the fill
    g_new    = 1 + p_t E_new                                  growth after the fill
    gross_t  = log(g_old · g_new)
    fee_t    = fee · |p_t − d|                               the trade that resets the share
    borrow_t = borrow_per_bar · max(−held_t, 0)              held_t: p_{t-1} delayed, else p_t
    reward_t = k · (gross_t − fee_t − borrow_t)

so the rewards of an episode add up to the log of the account's final equity: the net asset
value of a real account that trades at the fills, not the continuous-rebalancing approximation
``p · log(1 + E)`` (which books ``(p − p²) E² / 2`` too little per bar on a long position
``0 < p < 1``: 0.2–0.6% a year at daily volatilities of 1–2%). Costs are log-equity costs
(``exp(−fee |Δ|) ≈ 1 − fee |Δ|``), as in the portfolio env. A growth ``g <= 0`` (only with
leverage, a loss of the whole equity) is floored at ``1e-12``.

**Slopes.** A price taker's orders do not move the market, so ``reward_t`` is a known function of
the two exposures it involves; its derivatives are exact — the one subgradient taken is 0 for
the fee where ``p_t = d`` — and, times ``∂p/∂a`` of each decision, they are what the trainer's
pathwise term follows (direct reinforcement, Moody & Saffell 2001):

.. code-block:: text

    ∂reward_t/∂p_t     = k (E_new / g_new − fee sign(p_t − d) + borrow_per_bar [held_t = p_t < 0])
    ∂reward_t/∂p_{t-1} = k h' (E_old / g_old + fee sign(p_t − d) (1 + E_old) / g_old²)
                         + k borrow_per_bar [held_t = p_{t-1} < 0]
    h' = ∂h/∂p_{t-1}   = (1 + E_prev) / (1 + p_{t-1} E_prev)²

The functions take floats (the single env) or ``[n]`` arrays (the batched env, the random-timing
null) and do the same float operations on both, so both book the same returns to the last bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np

__all__ = ["AccountSettings", "StepAccount", "account_step", "signal_slope"]

X = TypeVar("X", float, np.ndarray)
MIN_GROWTH = 1e-12


def signal_slope(long_only: bool, min_signal: float) -> float:
    """``∂signal/∂a`` of a continuous action inside its bounds ``(-1, 1)``: 1, or
    ``(1 − m) / 2`` for the long-only map ``a → m + (1 − m)(a + 1)/2``. An action at or beyond a
    bound is clipped there and earns the same whatever its value: its slope is 0."""
    return 0.5 * (1.0 - min_signal) if long_only else 1.0


class AccountSettings(NamedTuple):
    """The env's costs and reward scale."""

    fee: float  # per unit of exposure traded
    borrow_per_bar: float  # per unit of short exposure held over a bar
    delayed: bool  # the previous exposure holds the bar (next_close fills)
    reward_scale: float


class StepAccount(NamedTuple):
    """One step's flows (module docstring): log-equity ``gross`` return, ``fee_cost``,
    ``borrow_cost``, the ``traded`` share ``|p_t − d|``, and the reward's slopes in ``a_t``
    and ``a_{t-1}`` (reward per unit of action)."""

    gross: Any  # float, or [n] float64 from [n] inputs
    fee_cost: Any
    borrow_cost: Any
    traded: Any
    slope_new: Any
    slope_old: Any


def account_step(
    old: X,
    new: X,
    e_prev: X,
    e_old: X,
    e_new: X,
    dpda_new: X,
    dpda_old: X,
    s: AccountSettings,
) -> StepAccount:
    """Book one step (module docstring).

    ``old``/``new``: the exposures ``p_{t-1}``, ``p_t`` (shares of equity); ``e_prev``,
    ``e_old``, ``e_new``: the simple returns ``E_prev``, ``E_old``, ``E_new``; ``dpda_new`` /
    ``dpda_old``: ``∂p/∂a`` of the decisions that set them (0 where the action was clipped, the
    overlay capped the position, or there was no decision: an episode's flat start). Floats
    (``old`` a float) or arrays of one shape; the two run the same float operations."""
    o = _FLOAT if isinstance(old, float) else _ARRAY
    grow_prev = 1.0 + old * e_prev
    held = old * (1.0 + e_prev) / grow_prev  # share at the close of bar t
    g_old = o.maximum(1.0 + held * e_old, MIN_GROWTH)
    before = held * (1.0 + e_old) / g_old  # share just before the fill
    g_new = o.maximum(1.0 + new * e_new, MIN_GROWTH)
    gap = new - before
    side = o.sign(gap)
    held_session = old if s.delayed else new
    short = held_session < 0.0
    borrow_cost = o.where(short, -held_session * s.borrow_per_bar, 0.0)
    d_new = e_new / g_new - s.fee * side
    d_old = (
        (1.0 + e_prev)
        / (grow_prev * grow_prev)
        * (e_old / g_old + s.fee * side * (1.0 + e_old) / (g_old * g_old))
    )
    if s.delayed:
        d_old = d_old + s.borrow_per_bar * short
    else:
        d_new = d_new + s.borrow_per_bar * short
    k = s.reward_scale
    traded = o.absolute(gap)
    return StepAccount(
        o.log(g_old * g_new),
        s.fee * traded,
        borrow_cost,
        traded,
        k * d_new * dpda_new,
        k * d_old * dpda_old,
    )


class _Ops(NamedTuple):
    """The few operations that are not arithmetic operators, for floats or for arrays; each pair
    gives the same float result (the log is numpy's for both)."""

    log: Callable[[Any], Any]
    maximum: Callable[[Any, float], Any]
    sign: Callable[[Any], Any]
    absolute: Callable[[Any], Any]
    where: Callable[[Any, Any, float], Any]


_FLOAT = _Ops(
    log=lambda x: float(np.log(x)),
    maximum=max,
    sign=lambda x: float((x > 0.0) - (x < 0.0)),
    absolute=abs,
    where=lambda c, a, b: a if c else b,
)
_ARRAY = _Ops(
    log=np.log,
    maximum=np.maximum,
    sign=lambda x: np.greater(x, 0.0) * 1.0 - np.less(x, 0.0),
    absolute=np.abs,
    where=np.where,
)
