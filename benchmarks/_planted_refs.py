"""Planted markets and the reference strategies the learnability suite measures the agent
against (``benchmarks/learnability.py``): the markets, the best simple rule, and realised and
expected Sharpe ratios of a strategy frame."""

from __future__ import annotations

from typing import Any

import numpy as np


def make_market(name: str, bars: int, seed: int) -> tuple[Any, Any]:
    """``ar<phi>``, ``regime<duration>``, ``sig<ic>`` (a forecast column ``signal``: train
    with ``--set data.signals=[signal]``) or ``sigshuf<ic>`` (the same file with the column
    permuted in time: it carries nothing)."""
    from riskppo.envs.market.planted import ar_market, regime_market, signal_market

    if name.startswith("regime"):
        return regime_market(bars, duration=float(name[6:]), seed=seed)
    if name.startswith("sigshuf"):
        df, planted = signal_market(bars, ic=float(name[7:]), seed=seed)
        df["signal"] = np.random.default_rng(seed + 10_000).permutation(df["signal"].to_numpy())
        return df, planted
    if name.startswith("sig"):
        return signal_market(bars, ic=float(name[3:]), seed=seed)
    return ar_market(bars, phi=float(name[2:]), seed=seed)


def sharpe(r: np.ndarray) -> float:
    """Annualised Sharpe ratio of the account's simple returns from daily net log returns ``r``
    (the verdict's and the metrics table's statistic)."""
    from riskppo.stats.core import sharpe as annualised

    return annualised(np.expm1(r), 252)


def run_signals(env: Any, signals: np.ndarray) -> Any:
    """The per-bar strategy frame of holding ``signals[bar]`` at each decision bar."""
    from riskppo.evaluation.baselines import run_policy

    return run_policy(env, lambda bar: float(signals[bar]))


def scores(frame: Any, expected_return: Any) -> tuple[float, float]:
    """(realised, expected) annualised Sharpe ratio of a strategy frame. ``expected_return``:
    the planted ``E[r_t | past]`` per bar of the file (a Series on its index); the expected one
    is ``mean(position_t · E[r_t | past] − costs_t) / sd(realised net simple return)``."""
    r = frame["log_return"].to_numpy()
    edge = frame["position"] * expected_return.reindex(frame.index) - frame["costs"]
    return sharpe(r), float(edge.mean() / np.std(np.expm1(r), ddof=1) * np.sqrt(252))


def _rule_signals(close: np.ndarray, k: int, sign: int, band: tuple[float, float]) -> np.ndarray:
    logc = np.log(close)
    move = np.full(len(close), np.nan)
    move[k:] = logc[k:] - logc[:-k]
    return np.where(sign * np.nan_to_num(move) > 0, band[1], band[0])


def best_rule(train_env: Any) -> tuple[str, np.ndarray]:
    """The rule with the best Sharpe on the training rows, and its signals over the frame: the
    k-bar momentum or reversal, all-or-floor, for k over the horizons of the agent's returns."""
    close = train_env.df["close"].to_numpy(np.float64)
    best: tuple[float, str, np.ndarray] | None = None
    for k in (1, 5, 20, 60, 250):
        for sign, label in ((1, "mom"), (-1, "rev")):
            sig = _rule_signals(close, k, sign, train_env.signal_range)
            s = sharpe(run_signals(train_env, sig)["log_return"].to_numpy())
            if best is None or s > best[0]:
                best = (s, f"{label}{k}", sig)
    assert best is not None
    return best[1], best[2]


def fitted_forecast(name: str, df: Any, lo: int, hi: int) -> np.ndarray:
    """The oracle's model family with its numbers estimated on the rows ``[lo, hi)`` only: per
    bar ``t`` of ``df``, the forecast of the next log return in units of the causal EWM
    volatility (span 60) at ``t``. Regime files: the two-state filter fitted by maximum
    likelihood (:func:`~riskppo.envs.market.regimes.fit_regime_filter`); AR(1) and signal files:
    the least-squares line of the next return on the last return (on the signal column)."""
    from riskppo.envs.market.regimes import filter_inputs, fit_regime_filter, regime_filter

    r, before, vol = filter_inputs(df["close"].to_numpy(np.float64))
    if name.startswith("regime"):
        fit = fit_regime_filter(r[lo:hi], before[lo:hi])
        forecast = regime_filter(r, before, fit.drifts, fit.p, 5.0, start=0.5)
    else:
        x = df["signal"].to_numpy(np.float64) if name.startswith("sig") else r
        xs, ys = x[lo : hi - 1], r[lo + 1 : hi]
        ok = np.isfinite(xs) & np.isfinite(ys)
        slope, intercept = np.polyfit(xs[ok], ys[ok], 1)
        forecast = intercept + slope * x
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(forecast / vol)
