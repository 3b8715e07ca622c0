"""Causal market estimators: the volatility and covariance of one-bar log returns that sizing,
the risk overlay and the features read. Entry ``t`` of every estimate uses the closes
``c_0 .. c_t`` only (returns ``r_1 .. r_t``); it is NaN until enough returns exist.

**Volatility** (``[T]``, annualised): the zero-mean exponentially weighted mean of squared
returns (RiskMetrics 1996; the estimator usual for daily returns, Moreira & Muir 2017):

.. code-block:: text

    σ̂²_t = Σ_{k=0}^{t-1} w^k r²_{t-k} / Σ_{k=0}^{t-1} w^k,   w = 1 − 2/(span+1),
    σ̂_t  = sqrt(σ̂²_t · bars_per_year)

defined once ``span`` returns exist.

**Covariance** (``[T, N, N]``, per bar):

* ``"ewm"``: the same zero-mean EWM estimate for every pair,
  ``Σ̂_t = Σ_k w^k r_{t-k} r_{t-k}ᵀ / Σ_k w^k``, defined once ``span`` returns exist;
* ``"ledoit_wolf"``: the Ledoit & Wolf (2004) shrinkage of the sample covariance of the last
  ``window`` returns towards a scaled identity (scikit-learn's ``ledoit_wolf``), defined once
  ``window`` returns exist.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = [
    "COVARIANCES",
    "as_finite",
    "causal_covariance",
    "check_vol_span",
    "ewm_covariance",
    "ewm_volatility",
    "ledoit_wolf_covariance",
    "log_returns",
]

COVARIANCES: tuple[str, ...] = ("ewm", "ledoit_wolf")


def check_vol_span(span: object) -> None:
    """Raise ``ValueError`` unless ``span`` is an int ``>= 2`` (bools are refused)."""
    if isinstance(span, bool) or not isinstance(span, int | np.integer) or span < 2:
        raise ValueError(f"vol_span={span!r} is invalid: must be an int >= 2")


def as_finite(v: object) -> float | None:
    """``float(v)`` if ``v`` is a finite real number (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        return None
    x = float(v)
    return x if math.isfinite(x) else None


def ewm_volatility(close: np.ndarray, span: int, bars_per_year: float) -> np.ndarray:
    """Annualised causal EWM volatility ``σ̂_t`` per bar (module docstring).

    Args:
        close: ``[T]`` positive close prices.
        span: EWM span in bars (``>= 2``); also the number of returns needed before ``σ̂_t`` is
            defined.
        bars_per_year: bars in one year (252 for daily equity bars); 1 gives the per-bar
            volatility (used by the ``vret_k`` / ``ewmvol_k`` features).

    Returns:
        ``[T]`` float64; NaN for bars ``t < span``.
    """
    check_vol_span(span)
    bpy = as_finite(bars_per_year)
    if bpy is None or bpy <= 0:
        raise ValueError(f"bars_per_year={bars_per_year!r} is invalid: must be finite and > 0")
    c = np.asarray(close, dtype=np.float64)
    r = np.concatenate(([np.nan], np.diff(np.log(c))))
    # pandas' adjust=True EWM is the normalised weighted mean above; rows depend on r_1..r_t only.
    var = pd.Series(r * r).ewm(span=span, adjust=True, min_periods=span).mean().to_numpy()
    return np.sqrt(var * bars_per_year)


def log_returns(close: np.ndarray) -> np.ndarray:
    """``[T, N]`` one-bar log returns of ``[T, N]`` closes; row 0 is NaN."""
    lc = np.log(np.asarray(close, dtype=np.float64))
    out = np.full(lc.shape, np.nan)
    out[1:] = np.diff(lc, axis=0)
    return out


def ewm_covariance(close: np.ndarray, span: int) -> np.ndarray:
    """``[T, N, N]`` zero-mean EWM covariance of one-bar log returns, per bar (module docstring;
    NaN for bars ``t < span``)."""
    r = log_returns(close)
    n_bars, n = r.shape
    decay = 1.0 - 2.0 / (span + 1.0)
    out = np.full((n_bars, n, n), np.nan)
    acc = np.zeros((n, n))
    norm = 0.0
    for t in range(1, n_bars):
        acc = decay * acc + np.outer(r[t], r[t])
        norm = decay * norm + 1.0
        if t >= span:
            out[t] = acc / norm
    return out


def ledoit_wolf_covariance(close: np.ndarray, window: int, first: int = 0) -> np.ndarray:
    """``[T, N, N]`` Ledoit-Wolf shrunk covariance of the last ``window`` one-bar log returns
    (centred), per bar from ``max(first, window)`` on (NaN before)."""
    from sklearn.covariance import ledoit_wolf

    r = log_returns(close)
    n_bars, n = r.shape
    out = np.full((n_bars, n, n), np.nan)
    for t in range(max(first, window), n_bars):
        out[t] = ledoit_wolf(r[t - window + 1 : t + 1])[0]
    return out


def causal_covariance(close: np.ndarray, kind: str, span: int, first: int = 0) -> np.ndarray:
    """The ``kind`` estimate (:data:`COVARIANCES`) with span / window ``span`` (``[T, N, N]``);
    ``first``: bars before it may be left NaN (never used)."""
    if kind == "ewm":
        return ewm_covariance(close, span)
    if kind == "ledoit_wolf":
        return ledoit_wolf_covariance(close, span, first)
    raise ValueError(f"covariance={kind!r} is invalid: must be one of {COVARIANCES}")
