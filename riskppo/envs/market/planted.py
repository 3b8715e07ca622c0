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

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

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


def regime_filter(
    r: np.ndarray,
    sigma: np.ndarray,
    drifts: np.ndarray,
    p: float,
    nu: float,
    *,
    start: float = 1.0,
) -> np.ndarray:
    """``E[r_{t+1} | r_0 … r_t]`` ``[n]`` of a two-state hidden drift that switches with
    probability ``p`` per bar, from the log returns ``r`` ``[n]`` alone: the Bayes (Hamilton
    1989) filter with the ``drifts`` ``[2]`` (per bar), the noise's volatility ``sigma``
    ``[n]`` of each ``r_t`` (known from past returns under GARCH) and its unit-variance
    Student-t innovations of ``nu`` degrees of freedom. ``start``: the probability of state 0
    before the first bar (1: the chain starts there, as :func:`regime_market`'s does). A bar
    whose ``r`` or ``sigma`` is not finite tells nothing (the prior carries over)."""
    r, sigma = np.asarray(r, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
    return _filter_pass(r, sigma, np.asarray(drifts, dtype=np.float64), p, nu, start)[0]


def _filter_pass(
    r: np.ndarray, sigma: np.ndarray, drifts: np.ndarray, p: float, nu: float, start: float
) -> tuple[np.ndarray, float]:
    """The filter's forecasts ``[n]`` and the log-likelihood of ``r`` (up to the t density's
    constant), one scalar recursion on the probability of state 0."""
    unit = np.sqrt((nu - 2.0) / nu)
    with np.errstate(invalid="ignore"):
        x = (r[:, None] - drifts) / (sigma[:, None] * unit)
        lik = (1.0 + x * x / nu) ** (-(nu + 1.0) / 2.0) / (sigma[:, None] * unit)
    seen = np.isfinite(lik).all(axis=1) & (lik > 0).all(axis=1)
    l0, l1, ok = lik[:, 0].tolist(), lik[:, 1].tolist(), seen.tolist()
    d0, d1, stay = float(drifts[0]), float(drifts[1]), 1.0 - p
    out = np.empty(len(l0))
    post, loglik = start, 0.0
    for t in range(len(l0)):
        prior = post * stay + (1.0 - post) * p
        if ok[t]:
            z = prior * l0[t] + (1.0 - prior) * l1[t]
            post = prior * l0[t] / z
            loglik += math.log(z)
        else:
            post = prior
        ahead = post * stay + (1.0 - post) * p
        out[t] = ahead * d0 + (1.0 - ahead) * d1
    return out, loglik


@dataclass(frozen=True)
class RegimeFit:
    """Two drifts (per bar, the higher first) and a switching probability per bar, fitted by
    maximum likelihood (:func:`fit_regime_filter`)."""

    drifts: np.ndarray
    p: float
    loglik: float


def fit_regime_filter(r: np.ndarray, sigma: np.ndarray, nu: float = 5.0) -> RegimeFit:
    """The two-state model of :func:`regime_filter` fitted to log returns ``r`` ``[n]`` with
    volatilities ``sigma`` ``[n]`` (each known before its bar; non-finite rows are skipped):
    the drifts and the switching probability maximise the filter's own likelihood (Hamilton
    1989), by Nelder–Mead from two starts (switches every 50 and every 250 bars), with the
    innovations' ``nu`` given. What a learner that knows the model family, but none of its
    numbers, can take from the prices; with :func:`regime_filter` (``start=0.5``) it is the
    forecast of such a learner."""
    from scipy.optimize import minimize
    from scipy.special import expit

    r = np.asarray(r, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    seen = np.isfinite(r) & np.isfinite(sigma) & (sigma > 0)
    if seen.sum() < 50:
        raise ValueError(
            f"fit_regime_filter: need >= 50 bars with a finite return and sigma, got {seen.sum()}"
        )
    scale = float(np.std(r[seen]))

    def loss(v: np.ndarray) -> float:
        drifts = scale * v[:2]
        return -_filter_pass(r, sigma, drifts, float(expit(v[2])), nu, 0.5)[1]

    best = None
    for every in (50.0, 250.0):
        v0 = np.array([0.1, -0.1, -math.log(every - 1.0)])
        res = minimize(loss, v0, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-4})
        if best is None or res.fun < best.fun:
            best = res
    assert best is not None
    drifts = np.sort(scale * best.x[:2])[::-1].copy()
    return RegimeFit(drifts=drifts, p=float(expit(best.x[2])), loglik=-float(best.fun))


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
