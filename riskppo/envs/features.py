"""Causal market features, computed once with numpy (R-TRADE-2).

Every feature value at row ``t`` is a function of bars ``0..t`` only — never of a later bar — so
changing any future bar leaves every earlier row unchanged (tested). Rolling statistics use
explicit sliding windows (no cumulative sums, so no cancellation error and no dependence on rows
outside the window). A feature is *complete* from row ``lookback`` on; earlier rows are NaN.

Feature names (``k`` is a window length in bars):

===============  =====================================================================  ==========
name             value at bar t                                                         lookback
===============  =====================================================================  ==========
``ret_k``        log(close_t / close_{t-k})                                             k
``vol_k``        std (ddof=1) of the last k one-bar log returns, k >= 2                 k
``zscore_k``     z-score of log(close_t) within the last k log closes (0 if flat)       k - 1
``rsi_k``        2 * up / (up + down) - 1 over the last k one-bar changes (0 if flat)    k
``volz_k``       z-score of log1p(volume_t) within the last k bars (0 if constant)      k - 1
``hl_range``     log(high_t / low_t)                                                    0
===============  =====================================================================  ==========

The values are raw (not normalised); a learner should normalise observations (riskppo's trainer
does).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["DEFAULT_FEATURES", "FeatureMatrix", "compute_features", "feature_lookback"]

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

_PATTERN = re.compile(r"^(ret|vol|zscore|rsi|volz)_([1-9][0-9]*)$")
_FORMS = "ret_k, vol_k (k>=2), zscore_k (k>=2), rsi_k, volz_k (k>=2), hl_range"


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


def _parse(name: str) -> tuple[str, int]:
    if name == "hl_range":
        return name, 0
    m = _PATTERN.match(name)
    if m is None:
        raise ValueError(f"unknown feature {name!r}; valid forms: {_FORMS}")
    kind, k = m.group(1), int(m.group(2))
    if kind in ("vol", "zscore", "volz") and k < 2:
        raise ValueError(f"feature {name!r} needs a window k >= 2")
    return kind, k


def feature_lookback(name: str) -> int:
    """Number of earlier bars feature ``name`` needs (its first complete row)."""
    kind, k = _parse(name)
    return {"hl_range": 0, "ret": k, "vol": k, "zscore": k - 1, "rsi": k, "volz": k - 1}[kind]


def _rolling(x: np.ndarray, k: int) -> np.ndarray:
    """Windows ``x[t-k+1 .. t]`` as rows, for t = k-1 .. T-1 (shape ``[T-k+1, k]``)."""
    return sliding_window_view(x, k)


def _zscore_last(x: np.ndarray, k: int) -> np.ndarray:
    """z-score of x_t within x[t-k+1..t]; 0 where the window is constant; NaN before k-1."""
    out = np.full(len(x), np.nan)
    if len(x) < k:
        return out
    w = _rolling(x, k)
    mean = w.mean(axis=1)
    std = w.std(axis=1)
    dev = x[k - 1 :] - mean
    scale = np.maximum(np.abs(mean), 1.0)
    flat = std <= 1e-12 * scale
    out[k - 1 :] = np.where(flat, 0.0, dev / np.where(flat, 1.0, std))
    return out


def _one(
    kind: str, k: int, logc: np.ndarray, r1: np.ndarray, hl: np.ndarray, lv: np.ndarray
) -> np.ndarray:
    n = len(logc)
    out = np.full(n, np.nan)
    if kind == "hl_range":
        return hl
    if kind == "ret":
        out[k:] = logc[k:] - logc[:-k]
    elif kind == "vol":
        if n > k:
            out[k:] = _rolling(r1[1:], k).std(axis=1, ddof=1)
    elif kind == "rsi":
        if n > k:
            w = _rolling(r1[1:], k)
            up = np.clip(w, 0.0, None).sum(axis=1)
            down = np.clip(-w, 0.0, None).sum(axis=1)
            tot = up + down
            out[k:] = np.where(tot > 0, 2.0 * up / np.where(tot > 0, tot, 1.0) - 1.0, 0.0)
    elif kind == "zscore":
        out = _zscore_last(logc, k)
    elif kind == "volz":
        out = _zscore_last(lv, k)
    return out


def compute_features(df: pd.DataFrame, features: Sequence[str] = DEFAULT_FEATURES) -> FeatureMatrix:
    """Compute ``features`` causally for an OHLCV frame (canonical columns, see ``load_ohlcv``).

    Raises:
        ValueError: for an unknown or duplicate feature name, an empty feature list, or a
            non-finite value after the warm-up (e.g. a non-positive price in unvalidated data).
    """
    names = tuple(features)
    if not names:
        raise ValueError("features must name at least one feature")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate feature names in {names}")
    lookbacks = [feature_lookback(f) for f in names]
    close = df["close"].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logc = np.log(close)
        r1 = np.concatenate(([np.nan], np.diff(logc)))
        hl = np.log(df["high"].to_numpy(np.float64) / df["low"].to_numpy(np.float64))
        lv = np.log1p(df["volume"].to_numpy(np.float64))
        cols = [_one(*_parse(f), logc, r1, hl, lv) for f in names]
    values = np.ascontiguousarray(np.stack(cols, axis=1).astype(np.float32))
    warmup = max(lookbacks)
    tail = values[warmup:]
    if not np.isfinite(tail).all():
        row, col = np.argwhere(~np.isfinite(tail))[0]
        raise ValueError(
            f"feature {names[col]!r} is not finite at row {warmup + row} "
            f"({df.index[warmup + row]}); validate the data with load_ohlcv/validate_ohlcv"
        )
    return FeatureMatrix(values=values, names=names, warmup=warmup)
