"""Baseline strategies as per-bar position tables, shared by the backtest and the BC teacher.

A strategy here is a table ``[n_bars]`` of target **exposures** (the position decided at the close
of bar ``t``, filled as the env's ``fill`` says), computed causally from the frame's closes. Both
layers that need them read them from here: :mod:`riskppo.evaluation.baselines` (the backtest's
baselines) and :mod:`riskppo.algo.bc` (the behaviour-cloning teacher, which labels the agent's own
bars).

* ``buy_and_hold`` — exposure 1 on every bar;
* ``vol_target_buy_and_hold`` — exposure ``min(vol_target / σ̂_t, max_leverage)`` (the env's
  sizing parameters; NaN during the volatility warm-up);
* ``sma_crossover`` — 1 where SMA20 > SMA50 of the close, else 0 (:func:`sma_crossover_targets`).

:func:`strategy_signals` turns exposures into the **signal** (action target) that makes a given
:class:`~riskppo.envs.TradingEnv` hold them: the exposure itself without sizing, exposure / scale
with ``sizing="vol_target"`` (clipped to ``[-1, 1]``), 0 where undefined.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from riskppo.envs.execution.sizing import vol_target_scale
from riskppo.envs.trading.env import TradingEnv

__all__ = [
    "TEACHER_STRATEGIES",
    "nearest_actions",
    "sma_crossover_targets",
    "strategy_exposures",
    "strategy_signals",
]

TEACHER_STRATEGIES: tuple[str, ...] = ("buy_and_hold", "vol_target_buy_and_hold", "sma_crossover")
"""The baselines a BC teacher can follow (``bc.teacher``)."""


def sma_crossover_targets(
    close: pd.Series | np.ndarray, fast: int = 20, slow: int = 50, *, allow_short: bool = False
) -> np.ndarray:
    """Target position per bar: 1 where SMA_fast > SMA_slow, else 0 (or -1 with ``allow_short``).

    ``SMA_w[t]`` is the mean of closes ``t-w+1 .. t`` (causal); bars with fewer than ``slow``
    closes get 0 (flat). Returns a ``[n]`` float64 array aligned with ``close``.
    """
    for name, w in (("fast", fast), ("slow", slow)):
        if not isinstance(w, int | np.integer) or w < 1:
            raise ValueError(f"sma_crossover: {name}={w!r} must be an int >= 1")
    if fast >= slow:
        raise ValueError(f"sma_crossover: fast={fast} must be < slow={slow}")
    c = np.asarray(close, dtype=np.float64)
    if c.ndim != 1 or not np.all(np.isfinite(c)):
        raise ValueError("sma_crossover: close must be a 1-d array of finite prices")
    fast_ma, slow_ma = _sma(c, fast), _sma(c, slow)
    targets = np.zeros(len(c), dtype=np.float64)
    valid = np.isfinite(slow_ma)
    up = valid & (fast_ma > slow_ma)
    targets[up] = 1.0
    if allow_short:
        targets[valid & ~up] = -1.0
    return targets


def _env_scale(env: TradingEnv) -> np.ndarray:
    """``[n_bars]`` vol-targeting exposure per unit of signal with the env's sizing parameters."""
    return vol_target_scale(
        env.df["close"].to_numpy(np.float64),
        target=env.vol_target,
        span=env.vol_span,
        max_leverage=env.max_leverage,
        bars_per_year=env.bars_per_year,
    )


def strategy_exposures(env: TradingEnv, name: str) -> np.ndarray:
    """``[n_bars]`` float64 target exposure of strategy ``name`` on ``env``'s frame (NaN: none)."""
    n = len(env.df)
    if name == "buy_and_hold":
        return np.ones(n)
    if name == "vol_target_buy_and_hold":
        return _env_scale(env)
    if name == "sma_crossover":
        return sma_crossover_targets(env.df["close"])
    raise ValueError(f"unknown teacher strategy {name!r}; one of {list(TEACHER_STRATEGIES)}")


def strategy_signals(env: TradingEnv, exposures: np.ndarray) -> np.ndarray:
    """``[n_bars]`` signals (action targets in ``[-1, 1]``) that make ``env`` hold ``exposures``.

    With ``sizing="vol_target"`` the env multiplies the signal by its scale, so the signal is
    ``exposure / scale``; without sizing it is the exposure. Clipped to ``[-1, 1]``; NaN → 0.
    """
    x = np.asarray(exposures, dtype=np.float64)
    if env.sizing == "vol_target":
        with np.errstate(divide="ignore", invalid="ignore"):
            x = x / _env_scale(env)
    return np.nan_to_num(np.clip(x, -1.0, 1.0), nan=0.0, posinf=1.0, neginf=-1.0)


def nearest_actions(env: TradingEnv, signals: np.ndarray) -> np.ndarray:
    """Env actions reaching ``signals`` ``[B]``: ``[B, 1]`` float32 for a continuous env, else
    ``[B]`` int64 indices of the nearest allowed position (ties: the first in the env's list)."""
    s = np.asarray(signals, dtype=np.float64)
    if env.continuous:
        return env.action_for_signal(s)
    allowed = np.asarray(env.positions, dtype=np.float64)
    return np.abs(s[:, None] - allowed[None, :]).argmin(axis=1).astype(np.int64)


def _sma(c: np.ndarray, w: int) -> np.ndarray:
    """Trailing mean of ``w`` values ending at each index (NaN for the first ``w - 1``)."""
    out = np.full(len(c), np.nan)
    if len(c) >= w:
        cs = np.concatenate(([0.0], np.cumsum(c)))
        out[w - 1 :] = (cs[w:] - cs[:-w]) / w
    return out
