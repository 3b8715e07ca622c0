"""When a trading decision is filled, and what one step of :class:`~riskppo.envs.TradingEnv` earns.

The agent decides at bar ``t`` after seeing its close ``c_t``; ``e_old`` is the exposure it held
before (``e_{t-1}``, filled earlier) and ``e_new`` the one it now targets (``e_t``). One step
goes from bar ``t`` to bar ``t+1``: ``e_old`` earns the table ``old_t`` up to the fill, ``e_new``
the table ``new_t`` after it (log returns; how an account holding those exposures as shares of
its equity books them: :mod:`riskppo.envs.execution.account`). The tables are fixed by the fill
mode (``o``: opens, ``c``: closes):

==============  ==========================  ==========================  =======================
``fill``        ``old_t`` (earned by e_old) ``new_t`` (earned by e_new) the trade (fee)
==============  ==========================  ==========================  =======================
``close``       0                           ``log(c_{t+1} / c_t)``      at ``c_t``
``next_open``   ``log(o_{t+1} / c_t)`` gap  ``log(c_{t+1} / o_{t+1})``  at ``o_{t+1}``
``next_close``  ``log(c_{t+1} / c_t)``      0                           at ``c_{t+1}``
==============  ==========================  ==========================  =======================

* ``close`` trades at the close the agent has just seen (a look-ahead of the fill price; kept
  for comparison with earlier results).
* ``next_open``: the held exposure carries the overnight gap ``c_t -> o_{t+1}``, the order is
  filled at the next open and the new exposure earns that bar's session ``o_{t+1} -> c_{t+1}``.
* ``next_close``: one bar of delay — the order is filled at ``c_{t+1}`` and earns from ``t+1``
  on, so over ``t -> t+1`` the exposure decided one step earlier earns the whole bar. The first
  step of an episode starts flat and earns nothing; the last decision is filled (and pays its
  fee) at the range's last close and earns after the range.
* ``auto`` is ``next_open`` when the frame has an open on every bar, else ``next_close``.

Every step's fee is paid inside the step (``exp(-fee |Δ|)`` on equity), so rewards still sum to
the log of the final equity. The exposure *held over bar t+1's session* (the one a per-bar
borrow cost applies to and a backtest's ``position`` column shows) is ``e_new``, except with
``next_close``, where it is ``e_old``. Log returns are differences of logs, so ``old_t + new_t``
is ``log c_{t+1} - log c_t`` in every mode (to rounding).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from riskppo.envs.execution.account import AccountSettings, account_step

__all__ = ["FILLS", "FillReturns", "fill_returns", "resolve_fill", "step_returns"]

FILLS: tuple[str, ...] = ("auto", "close", "next_open", "next_close")
"""The ``fill`` values :class:`~riskppo.envs.TradingEnv` accepts (see the module docstring)."""


class FillReturns(NamedTuple):
    """Per-step log returns of one fill mode (``[T - 1]`` float64 each; entry ``t`` is the step
    from bar ``t`` to bar ``t + 1``)."""

    old: np.ndarray  # earned by the exposure held before the decision at bar t
    new: np.ndarray  # earned by the exposure decided at bar t
    delayed: bool  # the bar's session is held by the old exposure (next_close)


def resolve_fill(fill: object, opens: np.ndarray | None) -> str:
    """The fill mode to run: ``fill`` itself, or for ``"auto"`` ``"next_open"`` when ``opens``
    (``[T]`` open prices, ``None``: the frame has none) are all finite, else ``"next_close"``.

    Raises:
        ValueError: ``fill`` is not one of :data:`FILLS`, or is ``"next_open"`` without a
            finite open on every bar.
    """
    if not isinstance(fill, str) or fill not in FILLS:
        raise ValueError(f"fill={fill!r} is invalid: must be one of {FILLS}")
    has_opens = opens is not None and bool(np.isfinite(opens).all())
    if fill == "auto":
        return "next_open" if has_opens else "next_close"
    if fill == "next_open" and not has_opens:
        where = "has no open column" if opens is None else "has a missing (NaN) open"
        raise ValueError(
            f"fill='next_open' needs the open of every bar, but the frame {where}; "
            "use fill='next_close' (or 'auto')"
        )
    return fill


def fill_returns(fill: str, opens: np.ndarray | None, close: np.ndarray) -> FillReturns:
    """The :class:`FillReturns` of a resolved ``fill`` (not ``"auto"``) on ``[T]`` prices."""
    log_c = np.log(np.asarray(close, dtype=np.float64))
    bar = np.diff(log_c)
    zero = np.zeros_like(bar)
    if fill == "close":
        return FillReturns(zero, bar, delayed=False)
    if fill == "next_close":
        return FillReturns(bar, zero, delayed=True)
    if fill == "next_open" and opens is not None:
        log_o = np.log(np.asarray(opens, dtype=np.float64))[1:]
        return FillReturns(log_o - log_c[:-1], log_c[1:] - log_o, delayed=False)
    raise ValueError(f"fill={fill!r} is not a resolved fill mode with its prices")


def step_returns(
    exposure: np.ndarray,
    fills: FillReturns,
    starts: np.ndarray,
    *,
    fee: float,
    borrow_per_bar: float,
) -> np.ndarray:
    """Net log returns ``gross - fee - borrow`` of holding ``exposure`` ``[..., T]`` (decided at
    T consecutive steps; leading axes: independent strategies, e.g. ``n`` random signals), as
    :class:`~riskppo.envs.TradingEnv` books them step by step (the account of
    :mod:`riskppo.envs.execution.account`).

    ``fills``: the fill table over those steps (``old``/``new`` ``[T]`` each); ``starts`` ``[T]``
    bool: steps that start flat (an episode's first, or a walk-forward segment's), where the
    exposure held before is 0. ``fee`` per unit of share traded; ``borrow_per_bar`` per unit
    of short exposure held over the bar (``borrow_rate / bars_per_year``). The same float
    operations as the env's step, so equal to its returns to the last bit."""
    new = np.asarray(exposure, dtype=np.float64)
    old = np.concatenate([np.zeros_like(new[..., :1]), new[..., :-1]], axis=-1)
    old[..., np.asarray(starts, dtype=bool)] = 0.0
    e_old, e_new = np.expm1(fills.old), np.expm1(fills.new)
    e_prev = np.concatenate(([0.0], e_new[:-1]))
    settings = AccountSettings(fee, borrow_per_bar, fills.delayed, 1.0)
    acc = account_step(old, new, e_prev, e_old, e_new, 0.0, 0.0, settings)
    return acc.gross - (acc.fee_cost + acc.borrow_cost)
