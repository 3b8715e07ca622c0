"""A two-state Markov-switching drift (Hamilton 1989): its Bayes filter, its maximum-likelihood
fit, and the causal forecast a trading feature reads.

The model: one-bar log returns ``r_t = μ_{s_t} + σ_t z_t`` with a hidden state ``s_t ∈ {0, 1}``
that switches with probability ``p`` per bar, drifts ``μ_0 > μ_1`` (per bar), a volatility
``σ_t`` known before bar ``t`` (the causal EWM volatility of the returns before it) and
unit-variance Student-t innovations ``z_t`` of ``ν`` degrees of freedom. The filter carries
``P(s_t = 0 | r_1 … r_t)`` forward one bar at a time; its forecast of the next return is
``E[μ_{s_{t+1}} | r_1 … r_t]``. Fitting maximises the filter's own likelihood.

Entry ``t`` of every forecast uses ``r_1 … r_t`` only: :func:`expanding_regime_forecast` refits
the model on all bars so far at every ``every``-th bar and filters with the latest fit, so no
fitted number is ever taken from a later bar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from riskppo.envs.market.estimators import ewm_volatility, log_returns

__all__ = [
    "MIN_FIT_BARS",
    "RegimeFit",
    "expanding_regime_forecast",
    "filter_inputs",
    "fit_regime_filter",
    "regime_filter",
]

MIN_FIT_BARS = 50  # bars with a finite return and volatility a fit needs


def filter_inputs(close: np.ndarray, span: int = 60) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the filter reads from closes ``[T]``: ``(r, before, vol)``, each ``[T]`` — the one-bar
    log returns (``r_0`` NaN), the per-bar EWM volatility (``span``) of each ``r_t`` known before
    it (``vol`` one bar back), and ``vol`` itself (at ``t``, from ``r_1 … r_t``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = log_returns(close)
    vol = ewm_volatility(close, span, 1.0)
    return r, np.concatenate(([np.nan], vol[:-1])), vol


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
    before the first bar (1: the chain starts there, as the planted regime market's does). A bar
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


def fit_regime_filter(
    r: np.ndarray, sigma: np.ndarray, nu: float = 5.0, *, max_p: float = 1.0
) -> RegimeFit:
    """The two-state model of :func:`regime_filter` fitted to log returns ``r`` ``[n]`` with
    volatilities ``sigma`` ``[n]`` (each known before its bar; non-finite rows are skipped):
    the drifts and the switching probability ``p ∈ (0, max_p)`` maximise the filter's own
    likelihood (Hamilton 1989), by Nelder–Mead from two starts (switches every 50 and every 250
    bars), with the innovations' ``nu`` given. What a learner that knows the model family, but
    none of its numbers, can take from the prices; with :func:`regime_filter` (``start=0.5``)
    it is the forecast of such a learner. ``max_p < 1`` keeps the states regimes (``max_p =
    0.05``: each lasts 20 bars or more on average) rather than a bar-to-bar flip-flop, which a
    short noisy sample can fit."""
    from scipy.optimize import minimize
    from scipy.special import expit

    r = np.asarray(r, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    seen = np.isfinite(r) & np.isfinite(sigma) & (sigma > 0)
    if seen.sum() < MIN_FIT_BARS:
        raise ValueError(
            f"fit_regime_filter: need >= {MIN_FIT_BARS} bars with a finite return and sigma, "
            f"got {seen.sum()}"
        )
    if not 0.0 < max_p <= 1.0:
        raise ValueError(f"fit_regime_filter: max_p must be in (0, 1], got {max_p}")
    scale = float(np.std(r[seen]))

    def loss(v: np.ndarray) -> float:
        drifts = scale * v[:2]
        return -_filter_pass(r, sigma, drifts, max_p * float(expit(v[2])), nu, 0.5)[1]

    best = None
    for every in (50.0, 250.0):
        # p = max_p · expit(v) starts at 1 / every (at max_p / 2 if that is lower)
        v0 = np.array([0.1, -0.1, -math.log(max_p * every - 1.0) if max_p * every > 2 else 0.0])
        res = minimize(loss, v0, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-4})
        if best is None or res.fun < best.fun:
            best = res
    assert best is not None
    drifts = np.sort(scale * best.x[:2])[::-1].copy()
    return RegimeFit(drifts=drifts, p=max_p * float(expit(best.x[2])), loglik=-float(best.fun))


def expanding_regime_forecast(
    close: np.ndarray, every: int, *, span: int = 60, nu: float = 5.0, max_p: float = 0.05
) -> np.ndarray:
    """Causal regime forecast ``[T]`` of the next one-bar log return in units of the per-bar
    EWM volatility (``span``) at ``t``: at every bar ``t = every, 2·every, …`` the model is
    fitted (:func:`fit_regime_filter`, ``max_p``) on the returns ``r_1 … r_t`` (each with the
    volatility of the bars before it), and the forecasts of bars ``t … t + every − 1`` are the
    filter's with that fit, run from the first bar. NaN before bar ``every`` (or while the fit
    lacks bars), 0 where the volatility is 0.

    Args:
        close: ``[T]`` positive closes.
        every: bars between refits, and the first fit's bar (``>= span + 50``).
    """
    if every < span + MIN_FIT_BARS:
        raise ValueError(f"a regime fit needs every >= {span + MIN_FIT_BARS} bars, got {every}")
    r, before, vol = filter_inputs(close, span)
    n = len(r)
    out = np.full(n, np.nan)
    for t in range(every, n, every):
        fit = fit_regime_filter(r[: t + 1], before[: t + 1], nu, max_p=max_p)
        hi = min(t + every, n)
        forecast = regime_filter(r[:hi], before[:hi], fit.drifts, fit.p, nu, start=0.5)
        out[t:hi] = forecast[t:hi]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(vol == 0.0, 0.0, out / vol)
