"""Seeded synthetic OHLCV generators for tests and experiments (R-TRADE-1).

Both generators return the canonical frame of :func:`~riskppo.envs.load_ohlcv` (float64
``open, high, low, close, volume``; DatetimeIndex ``timestamp``) that passes
:func:`~riskppo.envs.validate_ohlcv`. Randomness comes only from a local
``numpy.random.default_rng(seed)``: the same arguments give an identical frame and no global RNG is
touched.

Bar construction (shared): the close path is exactly the simulated log-return path; each bar
opens at the previous close times a small gap ``exp(N(0, (0.1 sigma_bar)^2))``; the high and low
extend ``max/min(open, close)`` by ``exp(±|N(0, (0.5 sigma_bar)^2)|)``, so
``low <= min(open, close) <= max(open, close) <= high`` always holds; volume is log-normal and
rises with the size of the bar's move.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

__all__ = [
    "DEFAULT_REGIMES",
    "DEFAULT_TRANSITIONS",
    "Regime",
    "gbm",
    "regime_switching",
    "regime_switching_with_states",
]

_BARS_PER_YEAR = {"B": 252, "D": 365, "C": 365, "h": 24 * 365, "min": 24 * 365 * 60, "W": 52}


class Regime(NamedTuple):
    """A market regime: annualised drift ``mu`` and volatility ``sigma`` of log prices."""

    name: str
    mu: float
    sigma: float


DEFAULT_REGIMES: tuple[Regime, ...] = (
    Regime("bull", 0.30, 0.12),
    Regime("bear", -0.15, 0.25),
    Regime("crash", -1.50, 0.60),
)
# Per-bar transition probabilities, row = from, column = to (daily bars: a bull market lasts
# ~100 bars on average, a crash ~7; stationary shares ~69% / 28% / 3%). With the default jumps
# the long-run log drift is about +5% a year at ~24% volatility.
DEFAULT_TRANSITIONS: tuple[tuple[float, ...], ...] = (
    (0.990, 0.008, 0.002),
    (0.020, 0.970, 0.010),
    (0.050, 0.100, 0.850),
)


def _bars_per_year(freq: str, bars_per_year: float | None) -> float:
    if bars_per_year is not None:
        if not bars_per_year > 0:
            raise ValueError(f"bars_per_year must be > 0, got {bars_per_year}")
        return float(bars_per_year)
    if freq not in _BARS_PER_YEAR:
        raise ValueError(
            f"no default bars_per_year for freq={freq!r} (known: {sorted(_BARS_PER_YEAR)}); "
            "pass bars_per_year="
        )
    return float(_BARS_PER_YEAR[freq])


def _check_n(n: int) -> int:
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    return int(n)


def _bars(
    logret: np.ndarray,
    sigma_bar: np.ndarray,
    s0: float,
    rng: np.random.Generator,
    index: pd.DatetimeIndex,
) -> pd.DataFrame:
    """OHLCV bars whose closes follow ``s0 * exp(cumsum(logret))`` (see the module docstring)."""
    n = len(logret)
    logc = np.log(s0) + np.cumsum(logret)
    close = np.exp(logc)
    prev = np.exp(np.concatenate(([np.log(s0)], logc[:-1])))
    open_ = prev * np.exp(0.1 * sigma_bar * rng.standard_normal(n))
    top = np.maximum(open_, close)
    bottom = np.minimum(open_, close)
    high = top * np.exp(0.5 * sigma_bar * np.abs(rng.standard_normal(n)))
    low = bottom * np.exp(-0.5 * sigma_bar * np.abs(rng.standard_normal(n)))
    # guard the invariant against exp rounding (a no-op except in the last ulp)
    high = np.maximum(high, top)
    low = np.minimum(low, bottom)
    move = np.minimum(np.abs(logret) / np.maximum(sigma_bar, 1e-12), 10.0)
    volume = np.round(1e6 * np.exp(0.3 * rng.standard_normal(n) + 0.3 * move))
    return pd.DataFrame(
        {"open": open_, "high": high, "low": low, "close": close, "volume": volume},
        index=index,
    )


def _index(start: str | pd.Timestamp, n: int, freq: str) -> pd.DatetimeIndex:
    idx = pd.date_range(start=start, periods=n, freq=freq, name="timestamp")
    if idx[-1] > pd.Timestamp.max:
        raise ValueError(
            f"{n} bars of freq={freq!r} from {start} end after {pd.Timestamp.max.date()}, the "
            "last nanosecond timestamp; use a higher freq (e.g. 'h') with bars_per_year"
        )
    return idx.as_unit("ns")  # the canonical unit of riskppo frames


def gbm(
    n: int,
    *,
    mu: float = 0.05,
    sigma: float = 0.2,
    s0: float = 100.0,
    seed: int | None = 0,
    freq: str = "B",
    start: str | pd.Timestamp = "2000-01-03",
    bars_per_year: float | None = None,
) -> pd.DataFrame:
    """Geometric Brownian motion bars.

    ``log(close_t / close_{t-1}) = (mu - sigma^2 / 2) dt + sigma sqrt(dt) z_t`` with
    ``dt = 1 / bars_per_year``; ``mu`` and ``sigma`` are annualised. ``freq`` is a pandas
    frequency (``"B"`` business days — the default, 252 bars/year — ``"D"``, ``"h"``, ``"min"``,
    ``"W"``; others need ``bars_per_year``). ``seed=None`` draws fresh entropy.
    """
    n = _check_n(n)
    if sigma < 0 or not np.isfinite(sigma) or not np.isfinite(mu):
        raise ValueError(f"need finite mu and sigma >= 0, got mu={mu}, sigma={sigma}")
    if not s0 > 0:
        raise ValueError(f"s0 must be > 0, got {s0}")
    dt = 1.0 / _bars_per_year(freq, bars_per_year)
    rng = np.random.default_rng(seed)
    logret = (mu - 0.5 * sigma**2) * dt + sigma * np.sqrt(dt) * rng.standard_normal(n)
    sigma_bar = np.full(n, sigma * np.sqrt(dt))
    return _bars(logret, sigma_bar, s0, rng, _index(start, n, freq))


def regime_switching_with_states(
    n: int,
    *,
    seed: int | None = 0,
    regimes: Sequence[Regime] = DEFAULT_REGIMES,
    transitions: Sequence[Sequence[float]] = DEFAULT_TRANSITIONS,
    initial_regime: int = 0,
    jump_rate: float = 5.0,
    jump_mean: float = -0.01,
    jump_std: float = 0.04,
    s0: float = 100.0,
    freq: str = "B",
    start: str | pd.Timestamp = "2000-01-03",
    bars_per_year: float | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`regime_switching` that also returns the regime index of every bar (int64 ``[n]``)."""
    n = _check_n(n)
    regs = [Regime(*r) for r in regimes]
    k = len(regs)
    p = np.asarray(transitions, dtype=np.float64)
    if k < 1 or p.shape != (k, k):
        raise ValueError(f"transitions must be a {k}x{k} matrix, got shape {p.shape}")
    if (p < 0).any() or not np.allclose(p.sum(axis=1), 1.0, atol=1e-9):
        raise ValueError("transitions must be non-negative with rows summing to 1")
    if not 0 <= initial_regime < k:
        raise ValueError(f"initial_regime must be in [0, {k}), got {initial_regime}")
    if any(r.sigma < 0 for r in regs) or jump_rate < 0 or jump_std < 0:
        raise ValueError("regime sigmas, jump_rate and jump_std must be >= 0")
    if not s0 > 0:
        raise ValueError(f"s0 must be > 0, got {s0}")
    dt = 1.0 / _bars_per_year(freq, bars_per_year)
    rng = np.random.default_rng(seed)

    # Markov chain: state_t drawn from row state_{t-1} of the transition matrix.
    cum = np.cumsum(p, axis=1)
    cum[:, -1] = 1.0
    u = rng.random(n)
    states = np.empty(n, dtype=np.int64)
    s = int(initial_regime)
    for t in range(n):
        if t > 0:
            s = int(np.searchsorted(cum[s], u[t], side="right"))
        states[t] = s

    mu = np.array([r.mu for r in regs])[states]
    sig = np.array([r.sigma for r in regs])[states]
    diffusion = (mu - 0.5 * sig**2) * dt + sig * np.sqrt(dt) * rng.standard_normal(n)
    # Compound Poisson jumps (Merton 1976): N_t ~ Poisson(rate dt), sizes N(mean, std^2) each.
    counts = rng.poisson(jump_rate * dt, size=n)
    jumps = counts * jump_mean + np.sqrt(counts) * jump_std * rng.standard_normal(n)
    logret = diffusion + jumps
    df = _bars(logret, sig * np.sqrt(dt), s0, rng, _index(start, n, freq))
    return df, states


def regime_switching(
    n: int,
    *,
    seed: int | None = 0,
    regimes: Sequence[Regime] = DEFAULT_REGIMES,
    transitions: Sequence[Sequence[float]] = DEFAULT_TRANSITIONS,
    initial_regime: int = 0,
    jump_rate: float = 5.0,
    jump_mean: float = -0.01,
    jump_std: float = 0.04,
    s0: float = 100.0,
    freq: str = "B",
    start: str | pd.Timestamp = "2000-01-03",
    bars_per_year: float | None = None,
) -> pd.DataFrame:
    """Markov regime-switching bars with Poisson jumps (heavy tails, volatility clustering).

    Each bar's regime follows a Markov chain (``transitions[i][j]`` = P(next = j | now = i), per
    bar; default bull/bear/crash, see ``DEFAULT_REGIMES``); within a regime log returns are GBM
    with that regime's annualised ``mu``/``sigma``, plus compound-Poisson jumps at ``jump_rate``
    per year with log sizes ``N(jump_mean, jump_std^2)``. Use
    :func:`regime_switching_with_states` to also get the regime path.
    """
    df, _ = regime_switching_with_states(
        n,
        seed=seed,
        regimes=regimes,
        transitions=transitions,
        initial_regime=initial_regime,
        jump_rate=jump_rate,
        jump_mean=jump_mean,
        jump_std=jump_std,
        s0=s0,
        freq=freq,
        start=start,
        bars_per_year=bars_per_year,
    )
    return df
