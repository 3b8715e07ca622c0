"""The random-timing null: could an agent's Sharpe ratio come from smooth random positions?

Part of :mod:`riskppo.stats`. The null strategies hold random exposures inside the
agent's own band with a comparable turnover, pay the same costs through the trading env's return
model, and see the same sizing, so beating them says the agent's *timing* carries information
(a Monte Carlo permutation-style test; p-value with the +1 correction of Phipson & Smyth 2010).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.signal import lfilter
from scipy.special import ndtr

from riskppo.stats.core import as_returns

__all__ = [
    "RandomTiming",
    "matched_smoothness",
    "random_signals",
    "random_timing_null",
    "rank_against_null",
]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class RandomTiming:
    """The agent's annualised Sharpe ratio against ``n`` random-timing strategies.

    ``null_sharpes`` ``[n]`` are their annualised Sharpe ratios (``nan`` for one that never
    varies, e.g. a band of ``[0, 0]``); ``percentile`` the share (in %) of them strictly below
    the agent; ``p_value = (1 + #{null >= agent}) / (n + 1)``.
    """

    agent_sharpe: float
    null_sharpes: Array
    percentile: float
    p_value: float
    n: int


def random_signals(
    n: int, length: int, band: tuple[float, float], smoothness: float, seed: int
) -> Array:
    """``[n, length]`` smooth random signals in ``[lo, hi]``.

    Gaussian noise through the EWM filter ``x_t = (1-α) x_{t-1} + α ε_t`` with
    ``α = 2/(smoothness + 1)`` (span ``smoothness`` bars), started in its stationary law so every
    bar has the same marginal ``N(0, α/(2-α))``; standardised and mapped by the fixed monotone map
    ``lo + (hi - lo) Φ(z)``, so each signal is uniform on the band. A larger ``smoothness`` means
    slower signals and lower turnover.
    """
    lo, hi = band
    rng = np.random.default_rng(seed)
    alpha = 2.0 / (smoothness + 1.0)
    var = alpha / (2.0 - alpha)
    noise = rng.standard_normal((n, length))
    start = rng.standard_normal((n, 1)) * math.sqrt(var) * (1.0 - alpha)
    x, _ = lfilter([alpha], [1.0, alpha - 1.0], noise, axis=1, zi=start)
    return lo + (hi - lo) * ndtr(x / math.sqrt(var))


def matched_smoothness(
    signal: ArrayLike, band: tuple[float, float], *, n: int = 64, seed: int = 0
) -> float:
    """The span (in bars) whose :func:`random_signals` in ``band`` move as much per bar as
    ``signal`` does: mean ``|signal_t - signal_{t-1}|`` matched by bisection on the log span.

    A null of random timings is only fair at the agent's own turnover: faster random signals
    pay more costs (on hourly bars a 20-bar span loses to costs what no timing could earn back),
    slower ones pay fewer. The mean move falls with the span, so the bisection is well posed;
    the span is kept within ``[1, 100 × T]``.
    """
    x = as_returns(signal, "signal")
    lo, hi = _check_band(band)
    target = float(np.mean(np.abs(np.diff(x)))) if x.size > 1 else 0.0
    length = int(min(x.size, 4096))
    if hi - lo <= 0.0 or length < 2:
        return 1.0

    def move(span: float) -> float:
        sig = random_signals(n, length, (lo, hi), span, seed)
        return float(np.mean(np.abs(np.diff(sig, axis=1))))

    a, b = 0.0, math.log(100.0 * x.size)  # log spans: 1 .. 100 T
    if move(math.exp(a)) <= target:
        return 1.0
    if move(math.exp(b)) >= target:
        return math.exp(b)
    for _ in range(40):
        mid = 0.5 * (a + b)
        a, b = (mid, b) if move(math.exp(mid)) > target else (a, mid)
    return math.exp(0.5 * (a + b))


def _check_band(band: tuple[float, float]) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in band)
    except (TypeError, ValueError):
        raise ValueError(f"band must be a pair (lo, hi) of numbers, got {band!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"band must be a finite pair with lo <= hi, got {band!r}")
    return lo, hi


def random_timing_null(
    agent_sharpe: float,
    asset_log_returns: ArrayLike,
    scale: ArrayLike,
    band: tuple[float, float],
    *,
    fee: float,
    periods_per_year: float,
    n: int = 2000,
    smoothness: float = 20,
    seed: int = 0,
) -> RandomTiming:
    """Where the agent's annualised Sharpe ratio ranks among ``n`` random-timing strategies.

    Each null strategy holds ``exposure_t = signal_t × scale_t`` with a :func:`random_signals`
    signal in ``band`` (the agent's action range, before sizing) and earns the env's per-bar
    return ``exposure_t × asset_log_returns_t - fee × |exposure_t - exposure_{t-1}|`` with
    ``exposure_{-1} = 0`` (it starts flat). ``asset_log_returns[t]`` is what the exposure held
    over bar t earns and ``scale[t]`` the sizing multiplier (all ones without sizing); both
    ``[T]``. All ``n`` paths are one ``[n, T]`` computation.
    """
    ret = as_returns(asset_log_returns, "asset_log_returns")
    sizing = as_returns(scale, "scale")
    if sizing.size != ret.size:
        raise ValueError(f"scale has {sizing.size} bars but asset_log_returns has {ret.size}")
    lo, hi = _check_band(band)
    if not (math.isfinite(fee) and fee >= 0.0):
        raise ValueError(f"fee must be finite and >= 0, got {fee!r}")
    if not (math.isfinite(periods_per_year) and periods_per_year > 0):
        raise ValueError(f"periods_per_year must be a positive number, got {periods_per_year!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not (math.isfinite(smoothness) and smoothness >= 1.0):
        raise ValueError(f"smoothness must be a span >= 1 bar, got {smoothness!r}")
    if not math.isfinite(agent_sharpe):
        raise ValueError(f"agent_sharpe must be finite, got {agent_sharpe!r}")
    exposure = random_signals(int(n), ret.size, (lo, hi), smoothness, seed) * sizing
    turnover = np.abs(np.diff(exposure, axis=1, prepend=0.0))
    return rank_against_null(agent_sharpe, exposure * ret - fee * turnover, periods_per_year)


def rank_against_null(
    agent_sharpe: float, paths: ArrayLike, periods_per_year: float
) -> RandomTiming:
    """Where ``agent_sharpe`` (annualised) ranks among the annualised Sharpe ratios of the null
    strategies' per-bar net returns ``paths`` ``[n, T]`` (one row per strategy): the share in
    percent strictly below it and the p-value ``(1 + #{null >= agent}) / (n + 1)``. A row
    that never varies has Sharpe ``nan`` (counted neither below nor at or above)."""
    r = np.asarray(paths, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] < 1 or r.shape[1] < 1:
        raise ValueError(f"paths must be [n >= 1, T >= 1] per-bar returns, got shape {r.shape}")
    if not math.isfinite(agent_sharpe):
        raise ValueError(f"agent_sharpe must be finite, got {agent_sharpe!r}")
    n = r.shape[0]
    per_bar = np.full(n, np.nan)  # one bar: no spread, no Sharpe ratio
    if r.shape[1] > 1:
        sd = r.std(axis=1, ddof=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            per_bar = np.where(np.ptp(r, axis=1) > 0.0, r.mean(axis=1) / sd, np.nan)
    null = per_bar * math.sqrt(periods_per_year)
    return RandomTiming(
        agent_sharpe=float(agent_sharpe),
        null_sharpes=null,
        percentile=float(100.0 * np.count_nonzero(null < agent_sharpe) / n),
        p_value=float((1 + np.count_nonzero(null >= agent_sharpe)) / (n + 1)),
        n=int(n),
    )
