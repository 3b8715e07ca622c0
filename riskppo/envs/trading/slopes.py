"""The trading reward's exact derivative in the agent's actions (the env's ``reward_slope``).

A price taker's orders do not move the market, so the step reward

.. code-block:: text

    reward_t = k · (p_{t-1} · old_t + p_t · new_t − fee · |p_t − p_{t-1}| − borrow_t)

is a known piecewise-linear function of the two exposures it involves (``old_t``/``new_t``: the
fill table's log returns, :mod:`riskppo.envs.trading.fills`; ``borrow_t`` charged on the exposure
held over the session, ``p_{t-1}`` with a delayed fill, else ``p_t``, when it is short). Its
derivatives are exact — the one subgradient taken is 0 for the fee when the position does not
change — and, times ``∂p/∂a`` of each decision, they are what the trainer's pathwise term follows
(direct reinforcement, Moody & Saffell 2001). The functions take floats (the single env) or
``[n]`` arrays (the batched env) and do the same float operations on both.
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

import numpy as np

__all__ = ["SlopeSettings", "reward_slopes", "signal_slope"]

X = TypeVar("X", float, np.ndarray)


def signal_slope(long_only: bool, min_signal: float) -> float:
    """``∂signal/∂a`` of a continuous action inside its bounds ``(-1, 1)``: 1, or
    ``(1 − m) / 2`` for the long-only map ``a → m + (1 − m)(a + 1)/2``. An action at or beyond a
    bound is clipped there and earns the same whatever its value: its slope is 0."""
    return 0.5 * (1.0 - min_signal) if long_only else 1.0


class SlopeSettings(NamedTuple):
    """The env's costs and reward scale that the slopes depend on."""

    fee: float  # per unit of exposure traded
    borrow_per_bar: float  # per unit of short exposure held over a bar
    delayed: bool  # the previous exposure holds the bar (next_close fills)
    reward_scale: float


def reward_slopes(
    old: X, new: X, ret_old: X, ret_new: X, dpda_new: X, dpda_old: X, s: SlopeSettings
) -> tuple[X, X]:
    """``(∂reward_t/∂a_t, ∂reward_t/∂a_{t-1})`` of one step.

    ``old``/``new``: the exposures ``p_{t-1}``, ``p_t``; ``ret_old``/``ret_new``: the returns
    they earn over the step; ``dpda_new``/``dpda_old``: ``∂p/∂a`` of the decisions that set them
    (0 where the action was clipped, the overlay capped the position, or there was no decision:
    an episode's flat start). Units: reward per unit of action."""
    turn = s.fee * (np.greater(new, old) * 1.0 - np.less(new, old))  # the fee's side: sign(Δp)
    held_short = s.borrow_per_bar * ((old if s.delayed else new) < 0.0)
    d_new = ret_new - turn + (0.0 if s.delayed else held_short)
    d_old = ret_old + turn + (held_short if s.delayed else 0.0)
    return s.reward_scale * d_new * dpda_new, s.reward_scale * d_old * dpda_old
