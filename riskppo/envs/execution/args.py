"""Argument checks of :class:`~riskppo.envs.TradingEnv` and its actions: each raises one
``ValueError`` naming the argument, its value and what it must be."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from riskppo.envs.execution.sizing import SIZINGS, check_sizing

__all__ = [
    "action_positions",
    "continuous_signal",
    "discrete_signal",
    "validate_min_signal",
    "validate_scalars",
    "validate_sizing",
]

DEFAULT_POSITIONS: tuple[float, ...] = (-1.0, 0.0, 1.0)


def validate_scalars(
    *,
    window: int,
    fee: float,
    borrow_rate: float,
    reward_scale: float,
    bars_per_year: float,
    episode_length: int | None,
    ruin_equity: float | None,
) -> None:
    _require(isinstance(window, int | np.integer) and window >= 1, "window", window, ">= 1")
    for name, v in (("fee", fee), ("borrow_rate", borrow_rate)):
        _require(_finite(v) and v >= 0, name, v, "finite and >= 0")
    _require(_finite(reward_scale) and reward_scale > 0, "reward_scale", reward_scale, "> 0")
    _require(_finite(bars_per_year) and bars_per_year > 0, "bars_per_year", bars_per_year, "> 0")
    _require(
        episode_length is None
        or (isinstance(episode_length, int | np.integer) and episode_length >= 1),
        "episode_length",
        episode_length,
        "None or an int >= 1",
    )
    _require(
        ruin_equity is None or (_finite(ruin_equity) and 0 < ruin_equity < 1),
        "ruin_equity",
        ruin_equity,
        "None or in (0, 1)",
    )


def validate_sizing(sizing: str, vol_target: float, vol_span: int, max_leverage: float) -> None:
    """``sizing`` is one of :data:`SIZINGS` and the vol-targeting parameters are valid."""
    _require(isinstance(sizing, str) and sizing in SIZINGS, "sizing", sizing, f"one of {SIZINGS}")
    check_sizing(target=vol_target, span=vol_span, max_leverage=max_leverage)


def action_positions(
    continuous: bool, positions: Sequence[float] | None, long_only: bool
) -> tuple[float, ...]:
    """The discrete actions' target positions (empty for continuous actions)."""
    if continuous:
        if positions is not None:
            raise ValueError("positions applies to discrete actions; omit it with continuous")
        return ()
    pos = tuple(float(p) for p in (DEFAULT_POSITIONS if positions is None else positions))
    _require(
        len(pos) >= 1 and all(map(math.isfinite, pos)),
        "positions",
        positions,
        "a non-empty list of finite numbers",
    )
    if long_only and min(pos) < 0:
        raise ValueError(
            f"long_only=True with discrete positions {list(pos)}: give positions >= 0 "
            "(e.g. [0, 0.5, 1]) or use continuous=True"
        )
    return pos


def validate_min_signal(min_signal: Any, continuous: bool, long_only: bool) -> None:
    _require(
        isinstance(min_signal, int | float | np.number)
        and not isinstance(min_signal, bool)
        and 0.0 <= float(min_signal) < 1.0,
        "min_signal",
        min_signal,
        "a number in [0, 1)",
    )
    if float(min_signal) > 0 and not (continuous and long_only):
        raise ValueError(
            f"min_signal={min_signal} needs continuous=True and long_only=True (a core long "
            "position the agent scales between min_signal and 1)"
        )


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _require(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid: must be {allowed}")


def discrete_signal(action: Any, positions: Sequence[float]) -> float:
    """The target position of discrete ``action`` (an index into ``positions``); ValueError for
    anything else."""
    a = action.item() if isinstance(action, np.ndarray) and action.size == 1 else action
    try:
        i = operator.index(a)
    except TypeError:
        raise ValueError(
            f"discrete action must be an integer in [0, {len(positions)}), got {action!r}"
        ) from None
    if not 0 <= i < len(positions):
        raise ValueError(f"action {i} is outside [0, {len(positions)})")
    return positions[i]


def continuous_signal(action: Any, long_only: bool, min_signal: float) -> tuple[float, bool]:
    """``(signal, inside)`` of a continuous ``action`` (one number): clipped to ``[-1, 1]``, and
    mapped to ``[m, 1]`` long-only (``m + (1 - m)(a + 1)/2``, ``m = min_signal``); ``inside``:
    the action was strictly inside ``(-1, 1)`` (not clipped). ValueError for anything else."""
    try:
        if isinstance(action, np.ndarray):
            x = float(action.item())
        elif isinstance(action, list | tuple):
            (x,) = (float(v) for v in action)
        else:
            x = float(action)
    except (TypeError, ValueError):
        raise ValueError(
            f"continuous action must be one number (shape (1,)), got {action!r}"
        ) from None
    if not math.isfinite(x):
        raise ValueError(f"continuous action is not finite: {action!r}")
    inside = -1.0 < x < 1.0
    x = 1.0 if x > 1.0 else (-1.0 if x < -1.0 else x)
    if not long_only:
        return x, inside
    return min_signal + (1.0 - min_signal) * (0.5 * (x + 1.0)), inside
