"""Seeded markets with an edge planted by construction, and the information that carries it.

A learner is judged first where the answer is known: each generator returns the OHLCV frame of
:func:`~riskppo.envs.load_ohlcv` (it passes :func:`~riskppo.envs.validate_ohlcv`) together with a
:class:`Planted` record of, per bar ``t``, the **true conditional mean** of the next bar's log
return given everything up to ``t`` (what an oracle trades on) and the **planted information**
(what the edge is a function of: the last log return for AR(1) markets, the current regime's
drift for regime markets, a forecast column the user would bring for signal markets). Both are
known at the close of bar ``t``.

Noise is GARCH(1, 1) with Student-t innovations (Bollerslev 1986, 1987): volatility clusters and
tails are heavy, as in daily equity returns. The close path is exactly the simulated log-return
path; each bar opens at the previous close times a small unpredictable gap (a tenth of the bar's
volatility), so nearly all of the predictable move falls inside the session and the edge is
tradable by an order filled at the next open (:mod:`riskppo.envs.execution.fills`). Highs, lows and
volume are built as in :mod:`riskppo.envs.market.synthetic`.

Randomness comes only from ``numpy.random.default_rng(seed)``: the same arguments give the same
frame and no global RNG is touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from riskppo.envs.market.regimes import RegimeFit, fit_regime_filter, regime_filter
from riskppo.envs.market.synthetic import _bars, _check_n, _index

__all__ = [
    "Garch",
    "Planted",
    "RegimeFit",
    "ar_market",
    "fit_regime_filter",
    "regime_filter",
    "regime_market",
    "signal_market",
]

_BARS_PER_YEAR = 252


@dataclass(frozen=True)
class Garch:
    """GARCH(1, 1) noise ``sigma_t^2 = omega + alpha eps_{t-1}^2 + beta sigma_{t-1}^2`` with
    unit-variance Student-t innovations of ``nu`` degrees of freedom; ``omega`` is set so the
    unconditional volatility is ``vol`` (annualised, 252 bars a year)."""

    vol: float = 0.20
    alpha: float = 0.08
    beta: float = 0.90
    nu: float = 5.0

    def __post_init__(self) -> None:
        if not (self.vol > 0 and self.alpha >= 0 and self.beta >= 0):
            raise ValueError(f"GARCH needs vol > 0 and alpha, beta >= 0, got {self}")
        if self.alpha + self.beta >= 1:
            raise ValueError(f"GARCH needs alpha + beta < 1 (stationary), got {self}")
        if not self.nu > 2:
            raise ValueError(f"Student-t innovations need nu > 2 (finite variance), got {self}")

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(eps, sigma)``, each float64 ``[n]``: the noise and its conditional volatility (per
        bar, log-return units)."""
        var_u = self.vol**2 / _BARS_PER_YEAR
        omega = var_u * (1.0 - self.alpha - self.beta)
        z = rng.standard_t(self.nu, size=n) * np.sqrt((self.nu - 2.0) / self.nu)
        eps = np.empty(n)
        sig = np.empty(n)
        var = var_u
        for t in range(n):
            sig[t] = np.sqrt(var)
            eps[t] = sig[t] * z[t]
            var = omega + self.alpha * eps[t] ** 2 + self.beta * var
        return eps, sig


@dataclass(frozen=True)
class Planted:
    """What was planted in a market, per bar ``t`` (float64 ``[n]``, log-return units per bar).

    ``cond_mean[t]`` is ``E[r_{t+1} | bars <= t]`` under the generating model (the regime
    market's oracle also knows the hidden regime), ``info[t]`` the quantity the edge is a function
    of (known at the close of ``t``) and ``sigma[t]`` the noise's conditional volatility of
    ``r_{t+1}``. ``forecast[t]`` is the best forecast of ``r_{t+1}`` from the prices up to ``t``
    alone, under the generating model: ``cond_mean`` itself where nothing is hidden (AR(1) and
    signal markets), the Bayes filter's where the regime is (the most any learner that sees the
    prices can know). The last bar's values look past the end of the frame and are never traded."""

    cond_mean: np.ndarray
    info: np.ndarray
    sigma: np.ndarray
    kind: str
    forecast: np.ndarray


def ar_market(
    n: int,
    *,
    phi: float,
    drift: float = 0.06,
    garch: Garch = Garch(),
    seed: int = 0,
    start: str = "2000-01-03",
) -> tuple[pd.DataFrame, Planted]:
    """AR(1) log returns ``r_t = m + phi (r_{t-1} - m) + eps_t`` with GARCH-t ``eps``.

    ``phi > 0`` plants momentum, ``phi < 0`` short-term reversal, ``phi = 0`` a random walk with
    drift. ``drift`` is the annualised mean log return ``m * 252``. The planted information is the
    last log return; the conditional mean of the next one is ``m + phi (r_t - m)``.
    """
    n = _check_n(n)
    if not -1 < phi < 1:
        raise ValueError(f"phi must be in (-1, 1) for a stationary AR(1), got {phi}")
    rng = np.random.default_rng(seed)
    eps, sig = garch.sample(n, rng)
    m = drift / _BARS_PER_YEAR
    r = np.empty(n)
    prev = m
    for t in range(n):
        r[t] = m + phi * (prev - m) + eps[t]
        prev = r[t]
    df = _bars(r, sig, 100.0, rng, _index(start, n, "B"))
    cond = m + phi * (r - m)
    next_sig = np.concatenate((sig[1:], sig[-1:]))
    return df, Planted(
        cond_mean=cond, info=r.copy(), sigma=next_sig, kind=f"ar({phi:g})", forecast=cond
    )


def regime_market(
    n: int,
    *,
    duration: float,
    bull: float = 0.30,
    bear: float = -0.20,
    garch: Garch = Garch(vol=0.18),
    seed: int = 0,
    start: str = "2000-01-03",
) -> tuple[pd.DataFrame, Planted]:
    """A hidden two-state bull/bear drift (annualised ``bull``/``bear`` log drifts) that switches
    with probability ``1 / duration`` per bar (mean stay ``duration`` bars), plus GARCH-t noise.

    The planted information is the current regime's drift (per bar); the oracle's conditional
    mean of the next return is the expected drift after one more switch draw.
    """
    n = _check_n(n)
    if not duration > 1:
        raise ValueError(f"duration must be > 1 bar, got {duration}")
    rng = np.random.default_rng(seed)
    switch = rng.random(n) < 1.0 / duration
    state = np.cumsum(switch) % 2  # 0 = bull, 1 = bear; starts in a bull market
    mu = np.where(state == 0, bull, bear) / _BARS_PER_YEAR
    eps, sig = garch.sample(n, rng)
    r = mu + eps
    df = _bars(r, sig, 100.0, rng, _index(start, n, "B"))
    p = 1.0 / duration
    other = np.where(state == 0, bear, bull) / _BARS_PER_YEAR
    cond = (1.0 - p) * mu + p * other
    next_sig = np.concatenate((sig[1:], sig[-1:]))
    drifts = np.array([bull, bear]) / _BARS_PER_YEAR
    forecast = regime_filter(r, sig, drifts, p, garch.nu)
    kind = f"regime({duration:g})"
    return df, Planted(cond_mean=cond, info=mu.copy(), sigma=next_sig, kind=kind, forecast=forecast)


def signal_market(
    n: int,
    *,
    ic: float,
    drift: float = 0.06,
    garch: Garch = Garch(),
    column: str = "signal",
    seed: int = 0,
    start: str = "2000-01-03",
) -> tuple[pd.DataFrame, Planted]:
    """A random walk with drift whose next log return a forecast column predicts: the frame gets
    a column ``column`` (a user's own signal, known at its bar's close) with standard-normal
    values ``s_t``, and ``r_{t+1} = m + sigma_{t+1} (ic s_t + sqrt(1 - ic^2) z_{t+1})`` with the
    GARCH-t noise ``sigma z``: the column's correlation with the next return in units of its
    volatility, ``(r_{t+1} - m) / sigma_{t+1}``, is ``ic`` (its information coefficient; with the
    raw return a little less, ``ic E[sigma] / sqrt(E[sigma^2])``, as volatility clusters), and
    the price alone predicts nothing.

    The planted information is ``s_t``; the conditional mean of the next return is
    ``m + ic sigma_{t+1} s_t`` (``sigma_{t+1}`` is known at ``t`` under GARCH).
    """
    n = _check_n(n)
    if not -1 < ic < 1:
        raise ValueError(f"ic must be in (-1, 1), got {ic}")
    rng = np.random.default_rng(seed)
    eps, sig = garch.sample(n, rng)
    s = rng.standard_normal(n)
    m = drift / _BARS_PER_YEAR
    r = m + np.sqrt(1.0 - ic * ic) * eps
    r[1:] += ic * sig[1:] * s[:-1]
    df = _bars(r, sig, 100.0, rng, _index(start, n, "B"))
    df[column] = s
    next_sig = np.concatenate((sig[1:], sig[-1:]))
    cond = m + ic * next_sig * s
    return df, Planted(
        cond_mean=cond, info=s.copy(), sigma=next_sig, kind=f"signal({ic:g})", forecast=cond
    )
