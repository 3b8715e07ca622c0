"""Backtest metrics of one strategy, computed through ``empyrical`` (R-TRADE-3).

Inputs are per-bar **net log returns** (after costs) and the **position held** over each bar, both
indexed by the timestamp of the bar at which the return is realised. ``empyrical`` works on simple
returns, so ``r = exp(log_return) - 1`` is what it sees; every annualised quantity uses
``annualization=bars_per_year`` (252 for daily stock bars, 6240 for the hourly EURUSD file).

Undefined values (a Sharpe ratio of a series with zero volatility, a Calmar ratio without a
drawdown, a hit rate without a single bar in the market, ...) are ``None`` — ``null`` in JSON —
never NaN or ±inf; :meth:`StrategyMetrics.to_dict` and :func:`dumps_metrics` guarantee it.

Besides the return statistics every strategy carries how much it was **in the market**
(``market_share``, ``mean_abs_exposure``), how often its own signal chose more than the least it
must hold (``active_share``), and the risk constraint's own figure, the CVaR of its
``cvar_horizon``-bar log returns next to the limit. A strategy in the market on fewer than
:data:`FLAT_MARKET_SHARE` of the bars is ``flat``: its risk figures describe holding (almost)
nothing, so the report never calls them "best" (R-TRADE-3).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from riskppo.core.risk import empirical_cvar

__all__ = [
    "DEFAULT_CVAR_HORIZON",
    "FLAT_MARKET_SHARE",
    "IN_MARKET_EXPOSURE",
    "METRIC_KEYS",
    "SPEC_METRIC_KEYS",
    "StrategyMetrics",
    "active_share",
    "aggregate_metrics",
    "dumps_metrics",
    "horizon_cvar",
    "signal_floor",
    "strategy_metrics",
]

IN_MARKET_EXPOSURE = 0.05
"""A bar is *in the market* when the exposure held over it has ``|exposure| >= 0.05`` (5% of a
full unit position). A continuous agent never holds exactly 0; an exposure of 0.3% is still
flat for every practical purpose and must not count as trading."""

FLAT_MARKET_SHARE = 0.05
"""A strategy in the market on fewer than this share of bars is flat/near-flat (``flat: true``)."""

DEFAULT_CVAR_HORIZON = 20
"""Bars per window of the horizon CVaR when the config's ``risk.cvar_horizon`` is None."""

# Keys every strategy entry of metrics.json carries (design §1.4); the rest are extras.
SPEC_METRIC_KEYS: tuple[str, ...] = (
    "sharpe",
    "sortino",
    "max_drawdown",
    "calmar",
    "cvar_95",
    "annual_return",
    "turnover",
)

MetricValue = float | int | None


@dataclass(frozen=True)
class StrategyMetrics:
    """Performance of one strategy over one backtest period (net of costs).

    Attributes:
        annual_return: compound annual growth rate, ``final_equity ** (1 / years) - 1``
            with ``years = n_bars / bars_per_year`` (empyrical ``annual_return``).
        annual_volatility: sample std (ddof=1) of simple per-bar returns × √bars_per_year.
        sharpe: mean / std (ddof=1) of simple per-bar returns × √bars_per_year, risk-free rate 0.
        sortino: mean per-bar return × bars_per_year / annualised downside deviation (target 0).
        max_drawdown: largest peak-to-trough fall of equity as a **negative** fraction
            (``-0.25`` = a 25 % drawdown; empyrical's sign convention; ``0.0`` = never below a
            previous peak).
        calmar: ``annual_return / |max_drawdown|``; ``None`` without a drawdown.
        cvar_95: historical CVaR (expected shortfall) at 95 %: the mean of the worst 5 % of simple
            per-bar returns (empyrical ``conditional_value_at_risk(r, cutoff=0.05)``: the lowest
            ``int((n - 1) * 0.05) + 1`` returns). A per-bar return, typically negative.
        var_95: historical 5 % quantile of simple per-bar returns (empyrical ``value_at_risk``).
        turnover: **annualised** turnover, ``mean_t |p_t - p_{t-1}| × bars_per_year`` with
            ``p_{-1} = 0`` (the strategy starts flat, so entering counts): the number of full
            position changes per year (a round trip flat→long→flat is 2).
        hit_rate: fraction of bars with a positive net return among the bars in the market
            (``|position| >= IN_MARKET_EXPOSURE``); ``None`` if the strategy never held a position.
        n_bars: number of bars (returns) in the period.
        final_equity: ``exp(Σ log returns)``, equity at the end starting from 1.
        total_return: ``final_equity - 1``.
        market_share: share of bars in the market, ``|position| >= IN_MARKET_EXPOSURE`` (the
            position is the exposure actually held, after any volatility sizing).
        mean_abs_exposure: mean ``|position|`` over all bars.
        active_share: share of bars on which the strategy's own signal (its target position
            before sizing, in units of the sized position) is at least ``IN_MARKET_EXPOSURE``
            beyond the least it must hold: ``|signal| - signal_floor >= 0.05``, where the floor
            is a long-only env's core position ``min_signal`` (else 0). Unlike ``market_share``
            it does not depend on how small the sizing makes a position (a volatile stock's
            full position may be 0.09), and a core long held only because the agent cannot go
            lower does not count. ``None`` without signals.
        cvar_horizon: the constraint's own figure: empirical lower-tail CVaR at ``cvar_alpha``
            of the sums of net log returns over all overlapping ``cvar_horizon_bars``-bar windows
            (:func:`horizon_cvar`); ``None`` with fewer bars than one window.
        cvar_horizon_bars: the window length used.
        cvar_alpha: the tail level used.
        cvar_limit: the limit ``cvar_horizon`` is held against (``risk.cvar_limit``), or ``None``.
        cvar_limit_met: ``cvar_horizon >= cvar_limit``; ``None`` without a limit (or a figure).
        flat: ``market_share < flat_threshold`` (default :data:`FLAT_MARKET_SHARE`): the strategy
            (almost) never held a position.

    Every float field is ``None`` where the quantity is undefined (see the module docstring).
    """

    annual_return: float | None
    annual_volatility: float | None
    sharpe: float | None
    sortino: float | None
    max_drawdown: float | None
    calmar: float | None
    cvar_95: float | None
    var_95: float | None
    turnover: float | None
    hit_rate: float | None
    n_bars: int
    final_equity: float | None
    total_return: float | None
    market_share: float | None = None
    mean_abs_exposure: float | None = None
    active_share: float | None = None
    cvar_horizon: float | None = None
    cvar_horizon_bars: int = DEFAULT_CVAR_HORIZON
    cvar_alpha: float = 0.05
    cvar_limit: float | None = None
    cvar_limit_met: bool | None = None
    flat: bool = False

    def to_dict(self) -> dict[str, MetricValue]:
        """Plain JSON-ready dict: SPEC keys first, then the extras; non-finite values → None
        (ints and booleans stay as they are)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        ordered = {k: values.pop(k) for k in SPEC_METRIC_KEYS}
        ordered.update(values)
        return {k: (v if isinstance(v, int) else _finite_or_none(v)) for k, v in ordered.items()}


# All keys of a strategy entry, in metrics.json order (SPEC keys first, as in to_dict()).
METRIC_KEYS: tuple[str, ...] = (
    *SPEC_METRIC_KEYS,
    *(f.name for f in dataclasses.fields(StrategyMetrics) if f.name not in SPEC_METRIC_KEYS),
)


def horizon_cvar(
    log_returns: np.ndarray | Sequence[float], alpha: float, horizon: int
) -> float | None:
    """Empirical CVaR_α of the ``horizon``-bar log returns: the mean of the worst ``α`` fraction
    (a partially covered sample counted with its covered fraction) of the ``n - horizon + 1``
    sums ``Σ_{k<horizon} r_{t+k}`` over all overlapping windows
    (:func:`riskppo.core.empirical_cvar`).

    ``None`` when there are fewer than ``horizon`` returns.
    """
    if not (isinstance(horizon, int | np.integer) and horizon >= 1):
        raise ValueError(f"horizon={horizon!r} must be an int >= 1")
    r = np.asarray(log_returns, dtype=np.float64)
    if len(r) < horizon:
        return None
    cs = np.concatenate(([0.0], np.cumsum(r)))
    sums = cs[horizon:] - cs[:-horizon]
    cvar, _ = empirical_cvar(torch.from_numpy(sums), float(alpha))
    return _finite_or_none(cvar.item())


def active_share(signals: pd.Series | np.ndarray, floor: float) -> float | None:
    """Share of bars whose ``|signal|`` is at least :data:`IN_MARKET_EXPOSURE` above ``floor``
    (the least signal the strategy must hold); ``None`` without bars. ``signals`` ``[T]``."""
    s = np.abs(np.asarray(signals, dtype=np.float64))
    if not np.isfinite(s).all():
        raise ValueError("signals must be finite")
    # 1e-12: a signal 0.05 above its floor counts although 0.30 - 0.25 < 0.05 in floating point
    return float(np.mean(s - float(floor) >= IN_MARKET_EXPOSURE - 1e-12)) if len(s) else None


def signal_floor(env_kwargs: Mapping[str, Any]) -> float:
    """The least signal a trading env's strategy must hold: its ``min_signal`` (a core long
    position, only with ``long_only`` and continuous actions), else 0."""
    return float(env_kwargs.get("min_signal") or 0.0)


def strategy_metrics(
    log_returns: pd.Series,
    positions: pd.Series,
    *,
    bars_per_year: float,
    cvar_alpha: float = 0.05,
    cvar_horizon: int | None = None,
    cvar_limit: float | None = None,
    flat_threshold: float = FLAT_MARKET_SHARE,
    signals: pd.Series | None = None,
    signal_floor: float = 0.0,
) -> StrategyMetrics:
    """Metrics of a strategy from its per-bar net log returns and positions (see the class).

    Args:
        log_returns: ``[n]`` net log return of each bar (after costs), indexed by timestamp.
        positions: ``[n]`` position (exposure) held over each bar (the one that earned that bar's
            return), same index as ``log_returns``.
        bars_per_year: bars in a year, for annualisation (``> 0``).
        cvar_alpha: tail level of the horizon CVaR (``risk.cvar_alpha``).
        cvar_horizon: bars per window of the horizon CVaR (``risk.cvar_horizon``; ``None``:
            :data:`DEFAULT_CVAR_HORIZON`).
        cvar_limit: the limit the horizon CVaR is held against (``risk.cvar_limit``), or None.
        flat_threshold: market share below which the strategy is ``flat``.
        signals: the strategy's per-bar signals (same index as ``positions``), for
            ``active_share``; None leaves it ``None``.
        signal_floor: the least signal the strategy must hold (a core long's ``min_signal``).

    Raises:
        ValueError: on mismatched lengths/indexes, non-finite inputs or ``bars_per_year <= 0``.
    """
    if not (math.isfinite(bars_per_year) and bars_per_year > 0):
        raise ValueError(f"bars_per_year={bars_per_year!r} must be finite and > 0")
    horizon = DEFAULT_CVAR_HORIZON if cvar_horizon is None else int(cvar_horizon)
    lr, pos = _checked_inputs(log_returns, positions)
    n = lr.shape[0]
    ann = float(bars_per_year)
    dpos = np.abs(np.diff(pos, prepend=0.0))
    in_market = np.abs(pos) >= IN_MARKET_EXPOSURE
    share = float(in_market.mean()) if n else None
    hcvar = horizon_cvar(lr, cvar_alpha, horizon)
    limit_met = None if cvar_limit is None or hcvar is None else bool(hcvar >= cvar_limit)
    log_total = float(lr.sum())
    return StrategyMetrics(
        **_return_stats(lr, ann),
        turnover=_finite_or_none(dpos.mean() * ann) if n else None,
        hit_rate=(_finite_or_none(np.mean(lr[in_market] > 0.0)) if in_market.any() else None),
        n_bars=int(n),
        final_equity=_finite_or_none(math.exp(log_total)) if n else 1.0,
        total_return=_finite_or_none(math.expm1(log_total)) if n else 0.0,
        market_share=share,
        mean_abs_exposure=_finite_or_none(np.abs(pos).mean()) if n else None,
        active_share=None if signals is None else active_share(signals, signal_floor),
        cvar_horizon=hcvar,
        cvar_horizon_bars=horizon,
        cvar_alpha=float(cvar_alpha),
        cvar_limit=None if cvar_limit is None else float(cvar_limit),
        cvar_limit_met=limit_met,
        flat=share is None or share < flat_threshold,
    )


def _checked_inputs(log_returns: pd.Series, positions: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(log_returns, positions)`` as finite float64 ``[n]`` arrays of equal length (and equal
    index when both are Series); ``ValueError`` otherwise."""
    lr = _as_array(log_returns, "log_returns")
    pos = _as_array(positions, "positions")
    if lr.shape != pos.shape:
        raise ValueError(
            f"log_returns ({lr.shape[0]} bars) and positions ({pos.shape[0]} bars) differ in length"
        )
    if (
        isinstance(log_returns, pd.Series)
        and isinstance(positions, pd.Series)
        and not log_returns.index.equals(positions.index)
    ):
        raise ValueError("log_returns and positions must share the same index")
    return lr, pos


def _return_stats(lr: np.ndarray, ann: float) -> dict[str, float | None]:
    """The empyrical statistics of the simple returns ``expm1(lr)`` (``[n]`` net log returns),
    annualised with ``ann`` bars a year; all ``None`` when ``n == 0``."""
    import empyrical  # with scipy's statistics, ~1 s: imported by the first backtest

    simple = np.expm1(lr)

    def metric(fn: Any, *args: Any, **kwargs: Any) -> float | None:
        if len(lr) == 0:
            return None
        with np.errstate(all="ignore"):
            return _finite_or_none(fn(simple, *args, **kwargs))

    return {
        "annual_return": metric(empyrical.annual_return, annualization=ann),
        "annual_volatility": metric(empyrical.annual_volatility, annualization=ann),
        "sharpe": metric(empyrical.sharpe_ratio, annualization=ann),
        "sortino": metric(empyrical.sortino_ratio, annualization=ann),
        "max_drawdown": metric(empyrical.max_drawdown),
        "calmar": metric(empyrical.calmar_ratio, annualization=ann),
        "cvar_95": metric(empyrical.conditional_value_at_risk, cutoff=0.05),
        "var_95": metric(empyrical.value_at_risk, cutoff=0.05),
    }


def dumps_metrics(metrics: Mapping[str, StrategyMetrics | Mapping[str, Any]]) -> str:
    """``metrics.json`` text: ``{strategy: {metric: value}}``, strictly valid JSON.

    Raises ``ValueError`` (``allow_nan=False``) rather than ever writing NaN/Infinity.
    """
    plain = {
        name: (m.to_dict() if isinstance(m, StrategyMetrics) else dict(m))
        for name, m in metrics.items()
    }
    return json.dumps(plain, indent=2, allow_nan=False) + "\n"


def aggregate_metrics(
    runs: Sequence[Mapping[str, Mapping[str, MetricValue]]],
) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Mean, sample std and count over runs (e.g. seeds) per strategy and metric.

    ``runs`` are parsed ``metrics.json`` objects. ``None`` values are left out of a metric's
    statistics (``n`` says how many runs defined it); std is ``None`` for fewer than 2 values.
    Returns ``{strategy: {metric: {"mean", "std", "n"}}}``.
    """
    out: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for run in runs:
        for strategy, values in run.items():
            for key in values:
                out.setdefault(strategy, {}).setdefault(key, {})
    for strategy, keys in out.items():
        for key in keys:
            xs = np.array(
                [
                    float(v)
                    for run in runs
                    if (v := run.get(strategy, {}).get(key)) is not None and math.isfinite(float(v))
                ],
                dtype=np.float64,
            )
            keys[key] = {
                "mean": float(xs.mean()) if len(xs) else None,
                "std": float(xs.std(ddof=1)) if len(xs) > 1 else None,
                "n": len(xs),
            }
    return out


def _as_array(x: pd.Series | np.ndarray | Sequence[float], name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    bad = np.flatnonzero(~np.isfinite(a))
    if len(bad):
        where = x.index[bad[0]] if isinstance(x, pd.Series) else int(bad[0])
        raise ValueError(f"{name} has a non-finite value ({a[bad[0]]}) at {where}")
    return a


def _finite_or_none(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None
