"""The position an env would hold for an action decided at its last bar.

An env's ``step`` at bar ``t`` needs bar ``t + 1`` (its fill and returns), so the decision made
at the last bar of a file — tomorrow's order — is never stepped. :func:`decide` takes the
env's own per-bar tables (sizing scale, overlay cap, covariances) and the same float operations,
in the same order, as the first lines of :meth:`TradingEnv.step
<riskppo.envs.TradingEnv.step>` and :meth:`PortfolioEnv.step_weights
<riskppo.envs.portfolio.env.PortfolioEnv.step_weights>`. :func:`check_decisions` replays it on
every stepped bar of an episode and raises unless it gives exactly the position the env held, so
a change to either env's step cannot make the live decision drift from the backtest unnoticed.

The *forecast CVaR* is the overlay's (:mod:`riskppo.envs.execution.overlay`): a position
``p`` at bar ``t`` has forecast ``-|p| · margin · k_t · σ̂_t · √h = -|L| · |p| / cap_t`` (the
overlay's margin included, so a position at the cap forecasts exactly the limit ``L``), a
log return over ``horizon`` bars; ``None`` without an overlay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from riskppo.envs.execution.args import continuous_signal, discrete_signal
from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.envs.portfolio.math import vol_scale
from riskppo.envs.trading.env import TradingEnv

__all__ = ["Decision", "check_decisions", "decide"]


class Decision(NamedTuple):
    """The position decided at one bar, and its inputs.

    ``signal``: the policy's target before sizing (a trading env's signal; a portfolio's
    exposure signal, 1 without one); ``vol_scale``: exposure per unit of signal from the
    sizing alone (1 without sizing); ``overlay_cap``: the overlay's cap on ``|exposure|``
    (portfolio: on the scale of the signal weights), ``None`` without an overlay;
    ``forecast_cvar``: module docstring; ``exposure``: the net exposure held from the next
    fill (portfolio: the sum of ``weights``); ``weights``: ``[N]`` per-asset weights held
    (portfolio only, else ``None``)."""

    bar: int
    signal: float
    vol_scale: float
    overlay_cap: float | None
    forecast_cvar: float | None
    exposure: float
    weights: np.ndarray | None


def decide(env: Any, action: Any, bar: int) -> Decision:
    """The :class:`Decision` of ``action`` at ``bar`` in ``env`` (a :class:`TradingEnv` or a
    :class:`PortfolioEnv`, built and reset; nothing of its episode state changes)."""
    if isinstance(env, TradingEnv):
        return _trading_decision(env, action, bar)
    if isinstance(env, PortfolioEnv):
        return _portfolio_decision(env, action, bar)
    raise TypeError(f"no live decision for {type(env).__name__}")


def _trading_decision(env: TradingEnv, action: Any, t: int) -> Decision:
    """TradingEnv.step's exposure: ``signal · scale_t``, clipped at ``±cap_t``."""
    if env.continuous:
        signal, _ = continuous_signal(action, env.long_only, env.min_signal)
    else:
        signal = discrete_signal(action, env.positions)
    target = signal * env._scale[t]
    cap = env._cap[t]
    if target > cap or target < -cap:
        target = math.copysign(cap, target)
    overlay_cap = None if env.overlay_cap is None else float(env.overlay_cap[t])
    return Decision(
        bar=t,
        signal=float(signal),
        vol_scale=float(env.uncapped_scale[t]),
        overlay_cap=overlay_cap,
        forecast_cvar=_forecast(env.overlay, abs(target), overlay_cap),
        exposure=float(target),
        weights=None,
    )


def _portfolio_decision(env: PortfolioEnv, action: Any, t: int) -> Decision:
    """PortfolioEnv.step_weights' held weights ``w · scale · held`` (its ``_capped`` records
    the bar's cap and uncapped scale, as the step would)."""
    w = env.signal_weights(action)
    signal = env.exposure(action)
    scale = 1.0
    if env._cov is not None:
        scale = vol_scale(w, env._cov[t], env.vol_target, env.max_leverage, env.bars_per_year)
    sized, held = scale, signal
    cap = None
    if env._overlay_tables is not None:
        scale, held = env._capped(t, w, scale, signal)
        cap = float(env._cap_now)
    h = w * scale * held
    return Decision(
        bar=t,
        signal=float(signal),
        vol_scale=float(sized),
        overlay_cap=cap,
        forecast_cvar=_forecast(env.overlay, abs(scale * held), cap),
        exposure=float(np.add.reduce(h)),
        weights=h,
    )


def _forecast(overlay: Any, size: float, cap: float | None) -> float | None:
    """``-|L| · size / cap`` (module docstring); ``None`` without an overlay or a finite cap."""
    if overlay is None or cap is None or not math.isfinite(cap) or cap <= 0.0:
        return None
    return -abs(overlay.limit) * size / cap


def check_decisions(env: Any, actions: Sequence[Any], infos: Sequence[dict[str, Any]]) -> None:
    """Raise ``RuntimeError`` unless :func:`decide` gives, for every step of an episode
    (``actions`` and ``infos``, one per step), exactly the position the env's step held."""
    for action, info in zip(actions, infos, strict=True):
        bar = int(info["bar"]) - 1  # the info is of the bar the step reached
        got = decide(env, action, bar)
        held = info.get("weights")
        same = (
            got.exposure == info["position"]
            if held is None or got.weights is None
            else bool(np.array_equal(got.weights, held))
        )
        if not same:
            raise RuntimeError(
                f"live decision at bar {bar} differs from the env's step "
                f"({got.exposure!r} vs {info['position']!r}): riskppo.live.decide "
                "no longer mirrors the env's step"
            )
