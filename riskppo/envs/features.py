"""Causal market features, computed once with numpy (R-TRADE-2).

Every feature value at row ``t`` is a function of bars ``0..t`` only — never of a later bar — so
changing any future bar leaves every earlier row unchanged (tested). Rolling statistics use
explicit sliding windows (no cumulative sums, so no cancellation error and no dependence on rows
outside the window). A feature is *complete* from row ``lookback`` on; earlier rows are NaN.

Feature names (``k``, ``f``, ``s`` are window lengths in bars):

===============  =====================================================================  ==========
name             value at bar t                                                         lookback
===============  =====================================================================  ==========
``ret_k``        log(close_t / close_{t-k})                                             k
``vol_k``        std (ddof=1) of the last k one-bar log returns, k >= 2                 k
``zscore_k``     z-score of log(close_t) within the last k log closes (0 if flat)       k - 1
``rsi_k``        2 * up / (up + down) - 1 over the last k one-bar changes (0 if flat)    k
``volz_k``       z-score of log1p(volume_t) within the last k bars (0 if constant)      k - 1
``hl_range``     log(high_t / low_t)                                                    0
``ewmvol_k``     σ^k_t: EWM volatility (span k) of one-bar log returns, per bar, k >= 2  k
``vret_k``       ret_k / (σ^60_t · sqrt(k)): vol-scaled k-bar return (0 if σ = 0)       max(k, 60)
``macd_f_s``     MACD trend signal, 1 <= f < s (below)                                  L(s) + 251
``regime_k``     two-state regime forecast of r_{t+1} / σ^60_t, refit every k bars       k
                 (below), k >= 110
===============  =====================================================================  ==========

``σ^k_t`` is the estimator of :func:`~riskppo.envs.execution.sizing.ewm_volatility` without
annualisation: ``sqrt(Σ_j w^j r²_{t-j} / Σ_j w^j)``, ``w = 1 - 2/(k+1)``, over the one-bar log
returns ``r_1..r_t`` (zero mean), defined once ``k`` returns exist. ``vret_k`` are the
volatility-scaled multi-horizon returns of Zhang, Zohren & Roberts (2020),
``r_{t-k,t} / (σ_t sqrt(k))``.

``macd_f_s`` follows Baz et al. (2015) as used by Zhang, Zohren & Roberts (2020) and Lim, Zohren
& Roberts (2019)::

    m_n(t) = EWMA of close with time scale n: weights (1 - 1/n)^j on close_{t-j}, j = 0..t
             (alpha = 1/n, i.e. half-life log(0.5)/log(1 - 1/n); normalised, pandas adjust=True)
    q_t    = (m_f(t) - m_s(t)) / std(close_{t-62..t})      (63-bar std of the price, ddof=1)
    macd_t = q_t / std(q_{t-251..t})                        (252-bar std of q, ddof=1)

with ``q = 0`` where the 63 closes are constant and ``macd = 0`` where the 252 ``q`` are. ``q`` is
complete from row ``L(s) = max(s - 1, 62)`` (the slow average has ``s`` closes and the price std
its 63), so ``macd_f_s`` from ``L(s) + 251`` (e.g. 313 for ``macd_8_24``, 346 for
``macd_32_96``). Unlike the published reference code, nothing is back-filled (that would look
ahead): earlier rows are NaN. The exponential averages ``m_n`` and ``σ^k`` are recursive, so
their value at row ``t`` depends on all bars ``0..t`` (still causal; weights of bars older than a
few time scales are negligible).

``regime_k`` is the forecast of the next one-bar log return by a two-state Markov-switching drift
(Hamilton 1989) in units of ``σ^60_t``: the drifts and the switching probability (at most 1/20 a
bar) are fitted by maximum likelihood on all returns up to bar ``k``, ``2k``, … (an expanding
window), and each fit's filter gives the values of the ``k`` bars from its own
(:func:`~riskppo.envs.market.regimes.expanding_regime_forecast`; about a second per fit on a few
thousand bars). It carries a slow bull/bear drift as one number, with its sign and size from the
model rather than from a slope fitted to noisy next-bar returns.

:data:`TRADING_FEATURES` combines them for trading agents (warm-up 346 bars).

The values are raw (not normalised); a learner should normalise observations (riskppo's trainer
does).

Every feature reads the close; ``hl_range`` also needs the high and low, ``volz_k`` the volume
(:func:`feature_columns`). On data without those columns (a close-only file, see
:mod:`riskppo.envs.market.ohlcv`) :func:`split_features` says which features to leave out.

**Signal columns.** ``compute_features(df, features, signals=[...])`` appends ``df``'s own
columns ``signals`` (a user's forecast, read with ``load_ohlcv(..., signals=...)``), raw, as
features of lookback 0: a signal's value at bar ``t`` is known at that bar's close
(:mod:`riskppo.envs.market.signals`).

**Your own features.** :func:`register` adds a named feature — a function of the price frame
returning one float per row — usable in ``features`` (``env.kwargs.features``) like a built-in
one. It is refused (``ValueError``, one line) unless it is causal on a seeded synthetic frame:
the bars after ``t`` are changed for several ``t`` and no value at a row ``<= t`` may move
(:mod:`riskppo.envs.causality`)::

    @register("sma_gap", lookback=19)
    def sma_gap(df):  # log(close / 20-bar mean of the close)
        close = df["close"]
        return np.log(close / close.rolling(20).mean()).to_numpy()
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from riskppo.envs.feature_registry import (
    _REGISTRY,
    FeatureFn,
    RegisteredFeature,
    check_causal,
    new_feature,
    registered_features,
    registered_values,
    unregister,
)
from riskppo.envs.market.estimators import ewm_volatility
from riskppo.envs.market.regimes import MIN_FIT_BARS, expanding_regime_forecast

__all__ = [
    "DEFAULT_FEATURES",
    "TRADING_FEATURES",
    "FeatureMatrix",
    "RegisteredFeature",
    "check_signal_bound",
    "compute_features",
    "feature_columns",
    "feature_lookback",
    "left_out_line",
    "register",
    "registered_features",
    "split_features",
    "unregister",
]

DEFAULT_FEATURES: tuple[str, ...] = (
    "ret_1",
    "ret_5",
    "ret_20",
    "vol_20",
    "zscore_20",
    "rsi_14",
    "volz_20",
    "hl_range",
)

TRADING_FEATURES: tuple[str, ...] = (
    "vret_1",
    "vret_5",
    "vret_20",
    "vret_60",
    "vret_250",
    "macd_8_24",
    "macd_16_48",
    "macd_32_96",
    "rsi_14",
    "ewmvol_20",
    "ewmvol_60",
    "hl_range",
)

_PATTERN = re.compile(r"^(ret|vol|zscore|rsi|volz|vret|ewmvol|regime)_([1-9][0-9]*)$")
_MACD = re.compile(r"^macd_([1-9][0-9]*)_([1-9][0-9]*)$")
_FORMS = (
    "ret_k, vol_k (k>=2), zscore_k (k>=2), rsi_k, volz_k (k>=2), hl_range, ewmvol_k (k>=2), "
    "vret_k, macd_f_s (f<s), regime_k (k>=110)"
)
VRET_SPAN = 60  # span of the EWM volatility that scales vret_k
MACD_PRICE_STD = 63  # bars of the price std that normalises q
MACD_Q_STD = 252  # bars of the std of q that normalises macd
REGIME_MIN_EVERY = VRET_SPAN + MIN_FIT_BARS  # returns with a known volatility a regime fit needs
# the columns besides close that a feature kind reads
_EXTRA_COLUMNS: dict[str, tuple[str, ...]] = {"hl_range": ("high", "low"), "volz": ("volume",)}
_OPTIONAL_COLUMNS = ("open", "high", "low", "volume")  # a file may lack them (close-only data)


@dataclass(frozen=True)
class FeatureMatrix:
    """Precomputed features: ``values[t, j]`` is feature ``names[j]`` at bar ``t``.

    Attributes:
        values: float32 ``[T, F]``, C-contiguous; NaN before ``warmup``.
        names: feature names, in column order.
        warmup: first row at which every feature is complete (the largest lookback).
    """

    values: np.ndarray
    names: tuple[str, ...]
    warmup: int


def _parse(name: str) -> tuple[str, tuple[int, ...]]:
    if name in _REGISTRY:
        return "registered", ()
    if name == "hl_range":
        return name, ()
    m = _MACD.match(name)
    if m is not None:
        f, s = int(m.group(1)), int(m.group(2))
        if not f < s:
            raise ValueError(f"feature {name!r} needs a fast time scale f < the slow one s")
        return "macd", (f, s)
    m = _PATTERN.match(name)
    if m is None:
        mine = f"; registered: {', '.join(_REGISTRY)}" if _REGISTRY else ""
        raise ValueError(
            f"unknown feature {name!r}; valid forms: {_FORMS}, or a name registered with "
            f"riskppo.envs.features.register{mine}"
        )
    kind, k = m.group(1), int(m.group(2))
    if kind in ("vol", "zscore", "volz", "ewmvol") and k < 2:
        raise ValueError(f"feature {name!r} needs a window k >= 2")
    if kind == "regime" and k < REGIME_MIN_EVERY:
        raise ValueError(f"feature {name!r} needs k >= {REGIME_MIN_EVERY} bars between refits")
    return kind, (k,)


def feature_lookback(name: str) -> int:
    """Number of earlier bars feature ``name`` needs (its first complete row)."""
    kind, p = _parse(name)
    if kind == "registered":
        return _REGISTRY[name].lookback
    if kind == "hl_range":
        return 0
    if kind == "macd":
        return max(p[1] - 1, MACD_PRICE_STD - 1) + MACD_Q_STD - 1
    k = p[0]
    return {
        "ret": k,
        "vol": k,
        "zscore": k - 1,
        "rsi": k,
        "volz": k - 1,
        "ewmvol": k,
        "vret": max(k, VRET_SPAN),
        "regime": k,
    }[kind]


def feature_columns(name: str) -> tuple[str, ...]:
    """The columns besides ``close`` that feature ``name`` reads (``("high", "low")`` for
    ``hl_range``, ``("volume",)`` for ``volz_k``; a registered feature's ``columns``)."""
    if name in _REGISTRY:
        return tuple(c for c in _REGISTRY[name].columns if c != "close")
    return _EXTRA_COLUMNS.get(_parse(name)[0], ())


def split_features(
    features: Sequence[str], columns: Collection[str]
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The ``features`` computable from data with ``columns``, in order, and the others, each
    mapped to the price columns (open, high, low, volume) it needs that are missing. (A
    registered feature that reads a missing column of another name is kept: computing it
    raises, naming the column.)"""
    kept: list[str] = []
    left_out: dict[str, tuple[str, ...]] = {}
    for name in features:
        needs = feature_columns(name)
        missing = tuple(c for c in needs if c not in columns and c in _OPTIONAL_COLUMNS)
        if missing:
            left_out[name] = missing
        else:
            kept.append(name)
    return tuple(kept), left_out


def left_out_line(
    label: str, columns: Collection[str], left_out: Mapping[str, tuple[str, ...]]
) -> str:
    """The one line saying which features data ``label`` with ``columns`` leaves out, e.g.
    ``close-only data (my.csv): features hl_range left out (need high/low)``."""
    missing = [c for c in ("open", "high", "low", "volume") if c not in columns]
    kind = "close-only data" if len(missing) == 4 else f"data without {'/'.join(missing)}"
    needs = ", ".join(dict.fromkeys("/".join(cols) for cols in left_out.values()))
    return f"{kind} ({label}): features {', '.join(left_out)} left out (need {needs})"


_BLOCK_VALUES = 1 << 20  # window values one block of windows holds (8 MiB of float64)


def _windowed(x: np.ndarray, k: int, reduce: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``reduce`` of the windows ``x[t-k+1 .. t]``, t = k-1 .. T-1 (shape ``[T-k+1]``).

    ``reduce`` maps a block of windows ``[B, k]`` to ``[B]``; blocks of at most
    ``_BLOCK_VALUES`` values keep memory O(T) (a reduction's temporaries are ``[B, k]``), and
    every window is reduced exactly as it would be in one ``[T-k+1, k]`` array.
    """
    w = sliding_window_view(x, k)
    step = max(1, _BLOCK_VALUES // k)
    blocks = [reduce(w[i : i + step]) for i in range(0, len(w), step)]
    return np.concatenate(blocks) if blocks else np.empty(0)


def _mean(w: np.ndarray) -> np.ndarray:
    return w.mean(axis=1)


def _std(w: np.ndarray) -> np.ndarray:
    return w.std(axis=1)


def _std1(w: np.ndarray) -> np.ndarray:
    return w.std(axis=1, ddof=1)


def _rsi(w: np.ndarray) -> np.ndarray:
    """Relative strength in [-1, 1] of windows of one-bar returns ``[B, k]``; 0 if all flat."""
    up = np.clip(w, 0.0, None).sum(axis=1)
    down = np.clip(-w, 0.0, None).sum(axis=1)
    tot = up + down
    return np.where(tot > 0, 2.0 * up / np.where(tot > 0, tot, 1.0) - 1.0, 0.0)


def _zscore_last(x: np.ndarray, k: int) -> np.ndarray:
    """z-score of x_t within x[t-k+1..t]; 0 where the window is constant; NaN before k-1."""
    out = np.full(len(x), np.nan)
    if len(x) < k:
        return out
    mean = _windowed(x, k, _mean)
    std = _windowed(x, k, _std)
    dev = x[k - 1 :] - mean
    scale = np.maximum(np.abs(mean), 1.0)
    flat = std <= 1e-12 * scale
    out[k - 1 :] = np.where(flat, 0.0, dev / np.where(flat, 1.0, std))
    return out


def _rolling_std(x: np.ndarray, k: int, first: int) -> np.ndarray:
    """std (ddof=1) of x[t-k+1..t] for t >= first + k - 1 (``x`` is NaN before ``first``)."""
    out = np.full(len(x), np.nan)
    if len(x) - first >= k:
        out[first + k - 1 :] = _windowed(x[first:], k, _std1)
    return out


def _ratio_or_zero(num: np.ndarray, den: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """num / den, 0 where ``flat``; NaN stays NaN."""
    out = np.where(flat, 0.0, num / np.where(flat, 1.0, den))
    return np.where(np.isnan(den) | np.isnan(num), np.nan, out)


def _macd(close: np.ndarray, f: int, s: int) -> np.ndarray:
    n = len(close)
    q_first = max(s - 1, MACD_PRICE_STD - 1)
    if n <= q_first:
        return np.full(n, np.nan)
    series = pd.Series(close)
    fast = series.ewm(alpha=1.0 / f, adjust=True).mean().to_numpy()
    slow = series.ewm(alpha=1.0 / s, adjust=True).mean().to_numpy()
    pstd = _rolling_std(close, MACD_PRICE_STD, 0)
    pmean = np.full(n, np.nan)
    pmean[MACD_PRICE_STD - 1 :] = _windowed(close, MACD_PRICE_STD, _mean)
    q = _ratio_or_zero(fast - slow, pstd, pstd <= 1e-12 * np.abs(pmean))
    q[:q_first] = np.nan
    qstd = _rolling_std(q, MACD_Q_STD, q_first)
    qmean = np.full(n, np.nan)
    if n - q_first >= MACD_Q_STD:
        qmean[q_first + MACD_Q_STD - 1 :] = _windowed(q[q_first:], MACD_Q_STD, _mean)
    return _ratio_or_zero(q, qstd, qstd <= 1e-12 * np.maximum(np.abs(qmean), 1.0))


def _one(
    kind: str,
    p: tuple[int, ...],
    close: np.ndarray,
    logc: np.ndarray,
    r1: np.ndarray,
    hl: np.ndarray | None,
    lv: np.ndarray | None,
) -> np.ndarray:
    n = len(logc)
    out = np.full(n, np.nan)
    if kind == "hl_range":
        assert hl is not None
        return hl
    if kind == "macd":
        return _macd(close, p[0], p[1])
    k = p[0]
    if kind == "ret":
        out[k:] = logc[k:] - logc[:-k]
    elif kind == "vol":
        if n > k:
            out[k:] = _windowed(r1[1:], k, _std1)
    elif kind == "rsi":
        if n > k:
            out[k:] = _windowed(r1[1:], k, _rsi)
    elif kind == "zscore":
        out = _zscore_last(logc, k)
    elif kind == "volz":
        assert lv is not None
        out = _zscore_last(lv, k)
    elif kind == "ewmvol":
        out = ewm_volatility(close, k, 1.0)
    elif kind == "vret":
        sigma = ewm_volatility(close, VRET_SPAN, 1.0)
        ret = np.full(n, np.nan)
        ret[k:] = logc[k:] - logc[:-k]
        out = _ratio_or_zero(ret, sigma * math.sqrt(k), sigma == 0.0)
    elif kind == "regime":
        out = expanding_regime_forecast(close, k, span=VRET_SPAN)
    return out


def compute_features(
    df: pd.DataFrame, features: Sequence[str] = DEFAULT_FEATURES, signals: Sequence[str] = ()
) -> FeatureMatrix:
    """Compute ``features`` causally for an OHLCV or close-only frame (canonical columns, see
    ``load_ohlcv``), then append ``df``'s columns ``signals`` raw (lookback 0).

    Raises:
        ValueError: for an unknown or duplicate name, no name at all, a feature whose columns
            ``df`` lacks (:func:`split_features` leaves those out), a registered feature that
            returns anything but one float per row, or a non-finite value after the warm-up
            (e.g. a non-positive price in unvalidated data).
    """
    names = (*features, *signals)
    if not names:
        raise ValueError("features must name at least one feature")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate feature names in {names}")
    lookbacks = [feature_lookback(f) for f in features]
    _check_columns(df, features, signals)
    close = df["close"].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logc = np.log(close)
        r1 = np.concatenate(([np.nan], np.diff(logc)))
        hl = lv = None
        if "high" in df.columns and "low" in df.columns:
            hl = np.log(df["high"].to_numpy(np.float64) / df["low"].to_numpy(np.float64))
        if "volume" in df.columns:
            lv = np.log1p(df["volume"].to_numpy(np.float64))
        cols = [
            registered_values(_REGISTRY[f], df)
            if f in _REGISTRY
            else _one(*_parse(f), close, logc, r1, hl, lv)
            for f in features
        ]
    cols += [df[s].to_numpy(np.float64) for s in signals]
    values = np.ascontiguousarray(np.stack(cols, axis=1).astype(np.float32))
    warmup = max(lookbacks, default=0)
    tail = values[warmup:]
    if not np.isfinite(tail).all():
        row, col = np.argwhere(~np.isfinite(tail))[0]
        raise ValueError(
            f"feature {names[col]!r} is not finite at row {warmup + row} "
            f"({df.index[warmup + row]}); validate the data with load_ohlcv/validate_ohlcv"
        )
    return FeatureMatrix(values=values, names=names, warmup=warmup)


def _check_columns(df: pd.DataFrame, features: Sequence[str], signals: Sequence[str]) -> None:
    """Every column ``features`` read and every signal is in ``df`` (``ValueError`` naming it)."""
    _, left_out = split_features(features, df.columns)
    if left_out:
        name, missing = next(iter(left_out.items()))
        raise ValueError(f"feature {name!r} needs the {'/'.join(missing)} column(s); df lacks it")
    for name in features:
        lacks = [c for c in feature_columns(name) if c not in df.columns]
        if lacks:
            raise ValueError(
                f"feature {name!r} reads column {lacks[0]!r}, which the data lacks (a column "
                "of your file is kept only when named in data.signals / signals=)"
            )
    lacks = [s for s in signals if s not in df.columns]
    if lacks:
        raise ValueError(
            f"signal column {lacks[0]!r} is not in the data; load it with "
            f"load_ohlcv(..., signals=[{lacks[0]!r}]) or set data.signals"
        )


def check_signal_bound(fm: FeatureMatrix, signals: Sequence[str], bound: float) -> None:
    """``ValueError`` naming the first of the ``signals`` columns of ``fm`` whose values reach
    beyond ``±bound`` (an env's observation bound: clipping would change them silently)."""
    for name in signals:
        top = float(np.nanmax(np.abs(fm.values[:, fm.names.index(name)]), initial=0.0))
        if top > bound:
            raise ValueError(
                f"signal column {name!r} reaches {top:g}, beyond the observation bound "
                f"±{bound:g}; rescale it (e.g. divide by 1e6)"
            )


@overload
def register(
    name: str,
    fn: None = None,
    *,
    lookback: int = 0,
    columns: Sequence[str] = (),
    replace: bool = False,
) -> Callable[[FeatureFn], FeatureFn]: ...
@overload
def register(
    name: str,
    fn: FeatureFn,
    *,
    lookback: int = 0,
    columns: Sequence[str] = (),
    replace: bool = False,
) -> FeatureFn: ...
def register(
    name: str,
    fn: FeatureFn | None = None,
    *,
    lookback: int = 0,
    columns: Sequence[str] = (),
    replace: bool = False,
) -> FeatureFn | Callable[[FeatureFn], FeatureFn]:
    """Add feature ``name``: ``fn(df)`` returns the value at each bar of the price frame ``df``
    (a float array or Series of ``len(df)``, NaN before row ``lookback``). Returns ``fn``; with
    ``fn`` omitted, a decorator. ``columns``: the columns besides ``close`` it reads (a feature
    reading ``high``/``low``/``open``/``volume`` is left out on data without them; any other
    column must be a signal column of the data). ``replace``: allow a name already registered.

    Raises:
        ValueError: one line, for a bad name (or a built-in's), a name taken without
            ``replace``, or a feature that fails its check on a seeded synthetic frame: a wrong
            length, non-float values, a non-finite value from row ``lookback`` on, or a look-ahead
            (a value at row ``<= t`` that changes when the bars after ``t`` change).
    """

    def add(f: FeatureFn) -> FeatureFn:
        if name not in _REGISTRY and _is_builtin(name):
            raise ValueError(f"feature name {name!r} is a built-in feature's; choose another")
        feature = new_feature(name, f, lookback, columns, replace)
        check_causal(feature)
        _REGISTRY[name] = feature
        return f

    return add if fn is None else add(fn)


def _is_builtin(name: str) -> bool:
    try:
        _parse(name)
    except ValueError as exc:
        return not str(exc).startswith("unknown feature")
    return True
