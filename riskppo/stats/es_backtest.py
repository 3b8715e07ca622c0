"""Backtests of a Value-at-Risk / expected-shortfall forecast: Kupiec's proportion-of-failures
test and Acerbi & Székely's Z2 test, with Z2's p-value simulated under the forecast's own model.

**Sign convention.** Outcomes ``X_t`` are returns (or P&L); the forecasts are returns too, the
α-tail of the forecast distribution of ``X_t``: ``VaR_t`` its α-quantile and ``ES_t`` its tail
mean ``E[X_t | X_t <= VaR_t]`` — negative numbers for a position at risk (``ES_t <= VaR_t``). An
*exceedance* is ``X_t < VaR_t``.

* **Kupiec (1995)**, "Techniques for verifying the accuracy of risk measurement models", Journal
  of Derivatives 3(2), 73–84: with ``x`` exceedances in ``T`` independent observations, the
  likelihood ratio of the observed rate ``x/T`` against ``α``::

      LR = 2 [x ln(x/T) + (T-x) ln(1 - x/T) - x ln α - (T-x) ln(1-α)]   ~ χ²(1) under H0

  (``0 ln 0 = 0``); two-sided: too many exceedances and too few both reject.
* **Acerbi & Székely (2014)**, "Backtesting expected shortfall", Risk (December), test 2
  ("testing ES directly"), with this module's negative ``ES_t``::

      Z2 = 1 - Σ_t X_t I_t / (T α ES_t),     I_t = 1{X_t < VaR_t}

  (the paper's ``Σ X_t I_t / (T α ES_t) + 1`` with ES as a positive loss). ``E[Z2] = 0`` when
  every forecast distribution is the true one; ``Z2 < 0`` when the tail is heavier or more
  frequent than forecast (risk under-stated). One-sided: ``p = P_H0(Z2 <= z2)``, estimated as in
  the paper by simulating every ``X_t`` from its forecast distribution (``(1 + #{Z2* <= z2}) /
  (1 + n_sims)``), so the p-value needs no asymptotics and no independence of the forecasts
  from each other — only independent outcomes.

The forecast distribution under H0 is a *null model* of the outcomes: :class:`ParametricNull`
(a scaled normal or Student-t) or :class:`EmpiricalNull` (each outcome a scaled draw from its own
slice of a pool of values — filtered historical simulation's standardised returns). Both tests
assume independent observations: backtest ``h``-bar forecasts on non-overlapping windows.

Several records (markets) pool into one test (:func:`es_backtest` over a sequence): Kupiec adds
the counts, Z2 sums over all observations and simulates each record from its own null, drawn
independently — so a pooled test over correlated markets (one crash, many exceedances) is
anti-conservative, as the binomial count is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special
from scipy import stats as sps

__all__ = [
    "EmpiricalNull",
    "EsBacktest",
    "ForecastRecord",
    "KupiecTest",
    "NullModel",
    "ParametricNull",
    "Z2Test",
    "es_backtest",
    "kupiec_test",
    "standard_var_es",
    "z2_statistic",
    "z2_test",
]

Array = NDArray[np.float64]
_CHUNK = 2_000_000  # simulated outcomes held at once


class NullModel(Protocol):
    """The outcomes' distribution under H0: :meth:`draw` gives ``[n_sims, T]`` outcomes."""

    def draw(self, rng: np.random.Generator, n_sims: int) -> Array: ...


@dataclass(frozen=True)
class ParametricNull:
    """``X_t = scale_t · ε_t``, ``ε`` iid standard normal (``nu`` None) or Student-t with ``nu``
    degrees of freedom standardised to unit variance (``nu > 2``). ``scale`` ``[T]``."""

    scale: Array
    nu: float | None = None

    def draw(self, rng: np.random.Generator, n_sims: int) -> Array:
        shape = (n_sims, len(self.scale))
        if self.nu is None:
            eps = rng.standard_normal(shape)
        else:
            eps = rng.standard_t(self.nu, shape) * math.sqrt((self.nu - 2.0) / self.nu)
        return eps * np.asarray(self.scale, dtype=np.float64)


@dataclass(frozen=True)
class EmpiricalNull:
    """``X_t = scale_t · pool[lo_t + ⌊U (hi_t - lo_t)⌋]``, ``U`` uniform on [0, 1): each
    outcome a scaled draw, uniform, from its own slice ``[lo_t, hi_t)`` of ``pool`` ``[P]``.
    Filtered historical simulation: ``pool`` the standardised returns in the order they became
    known, ``lo_t = 0`` and ``hi_t`` the number known when forecast ``t`` was made. ``scale``
    ``[T]`` may be negative (a short position earns minus the asset's return)."""

    pool: Array
    lo: NDArray[np.int64]
    hi: NDArray[np.int64]
    scale: Array

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.lo), np.asarray(self.hi)
        if lo.shape != hi.shape or lo.shape != np.shape(self.scale):
            raise ValueError("EmpiricalNull: lo, hi and scale must have one entry per outcome")
        if len(lo) and (lo.min() < 0 or (hi <= lo).any() or hi.max() > len(self.pool)):
            raise ValueError("EmpiricalNull: every slice [lo, hi) must be non-empty, in the pool")

    def draw(self, rng: np.random.Generator, n_sims: int) -> Array:
        u = rng.random((n_sims, len(self.lo)))
        width = (np.asarray(self.hi) - np.asarray(self.lo)).astype(np.float64)
        idx = np.asarray(self.lo) + np.minimum((u * width).astype(np.int64), width - 1)
        return np.asarray(self.pool, dtype=np.float64)[idx.astype(np.int64)] * self.scale


class ForecastRecord(NamedTuple):
    """One record to backtest: ``realised`` ``X_t``, forecasts ``var`` and ``es`` (returns,
    ``es < 0``; module docstring), each ``[T]``, and the ``null`` the forecasts came from."""

    realised: Array
    var: Array
    es: Array
    null: NullModel


class KupiecTest(NamedTuple):
    """``n`` observations, ``exceedances`` of VaR against ``expected = α n``; the LR statistic,
    its χ²(1) p-value, and whether it rejects at ``level`` (``nan``/False when ``n = 0``)."""

    n: int
    exceedances: int
    expected: float
    lr: float
    p_value: float
    reject: bool


class Z2Test(NamedTuple):
    """``n`` observations, the statistic ``z2``, its simulated one-sided p-value (``n_sims``
    draws under H0) and whether it rejects at ``level`` (``nan``/False when ``n = 0``)."""

    n: int
    z2: float
    p_value: float
    n_sims: int
    reject: bool


class EsBacktest(NamedTuple):
    """Both tests on the same observations."""

    kupiec: KupiecTest
    z2: Z2Test


def standard_var_es(alpha: float, nu: float | None = None) -> tuple[float, float]:
    """``(VaR_α, ES_α)`` of a standard normal (``nu`` None) or of a unit-variance Student-t with
    ``nu > 2`` degrees of freedom (negative numbers; ES of the t: McNeil, Frey & Embrechts 2015,
    *Quantitative Risk Management*, Example 2.15)."""
    if nu is None:
        q = float(sps.norm.ppf(alpha))
        return q, float(-sps.norm.pdf(q) / alpha)
    t = float(sps.t.ppf(alpha, nu))
    es = -float(sps.t.pdf(t, nu)) / alpha * (nu + t * t) / (nu - 1.0)
    unit = math.sqrt((nu - 2.0) / nu)
    return t * unit, es * unit


def kupiec_test(exceedances: int, n: int, alpha: float, level: float = 0.05) -> KupiecTest:
    """Kupiec's (1995) proportion-of-failures test of ``exceedances`` in ``n`` observations at
    VaR level ``alpha`` (module docstring)."""
    x, t = int(exceedances), int(n)
    if not 0 <= x <= t:
        raise ValueError(f"kupiec_test: exceedances {x} must be in [0, n = {t}]")
    if t == 0:
        return KupiecTest(0, 0, 0.0, math.nan, math.nan, False)
    rate = x / t
    fitted = special.xlogy(x, rate) + special.xlogy(t - x, 1.0 - rate)
    null = special.xlogy(x, alpha) + special.xlogy(t - x, 1.0 - alpha)
    lr = max(2.0 * float(fitted - null), 0.0)
    p = float(sps.chi2.sf(lr, 1))
    return KupiecTest(t, x, alpha * t, lr, p, p < level)


def z2_statistic(realised: ArrayLike, var: ArrayLike, es: ArrayLike, alpha: float) -> float:
    """Acerbi & Székely's Z2 of outcomes ``realised`` against forecasts ``var``, ``es`` (each
    ``[T]``, module docstring); ``nan`` for no observations."""
    x, v, e = _checked(realised, var, es)
    if not len(x):
        return math.nan
    return 1.0 - _tail_sum(x, v, e) / (len(x) * alpha)


def z2_test(
    records: ForecastRecord | Sequence[ForecastRecord],
    alpha: float,
    *,
    n_sims: int = 2000,
    seed: int = 0,
    level: float = 0.05,
) -> Z2Test:
    """Z2 over all observations of ``records`` and its one-sided p-value from ``n_sims``
    simulations, each record's outcomes drawn from its own ``null`` (module docstring). Seeded."""
    recs = _records(records)
    checked = [_checked(r.realised, r.var, r.es) for r in recs]
    n = sum(len(x) for x, _, _ in checked)
    if n == 0:
        return Z2Test(0, math.nan, math.nan, n_sims, False)
    observed = 1.0 - sum(_tail_sum(*c) for c in checked) / (n * alpha)
    rng = np.random.default_rng(seed)
    total = np.zeros(n_sims)
    for rec, (_, v, e) in zip(recs, checked, strict=True):
        chunk = max(1, _CHUNK // max(len(v), 1))
        for start in range(0, n_sims, chunk):
            x = rec.null.draw(rng, min(chunk, n_sims - start))
            total[start : start + len(x)] += np.sum(np.where(x < v, x / e, 0.0), axis=1)
    simulated = 1.0 - total / (n * alpha)
    p = (1.0 + float(np.sum(simulated <= observed))) / (1.0 + n_sims)
    return Z2Test(n, observed, p, n_sims, p < level)


def es_backtest(
    records: ForecastRecord | Sequence[ForecastRecord],
    alpha: float,
    *,
    n_sims: int = 2000,
    seed: int = 0,
    level: float = 0.05,
) -> EsBacktest:
    """Kupiec's test and the Z2 test over all observations of ``records`` (pooled when several)."""
    recs = _records(records)
    checked = [_checked(r.realised, r.var, r.es) for r in recs]
    hits = sum(int(np.sum(x < v)) for x, v, _ in checked)
    n = sum(len(x) for x, _, _ in checked)
    return EsBacktest(
        kupiec_test(hits, n, alpha, level),
        z2_test(recs, alpha, n_sims=n_sims, seed=seed, level=level),
    )


def _records(records: ForecastRecord | Sequence[ForecastRecord]) -> list[ForecastRecord]:
    return [records] if isinstance(records, ForecastRecord) else list(records)


def _checked(realised: ArrayLike, var: ArrayLike, es: ArrayLike) -> tuple[Array, Array, Array]:
    """Three finite ``[T]`` float arrays with ``es < 0``; ``ValueError`` naming what is wrong."""
    x, v, e = (np.asarray(a, dtype=np.float64) for a in (realised, var, es))
    if x.ndim != 1 or x.shape != v.shape or x.shape != e.shape:
        raise ValueError(
            f"ES backtest: realised, var and es must be 1-D of one length, got shapes "
            f"{x.shape}, {v.shape}, {e.shape}"
        )
    if not (np.isfinite(x).all() and np.isfinite(v).all() and np.isfinite(e).all()):
        raise ValueError("ES backtest: realised, var and es must be finite")
    if (e >= 0).any():
        raise ValueError("ES backtest: every ES forecast must be < 0 (a return; module docstring)")
    return x, v, e


def _tail_sum(x: Array, v: Array, e: Array) -> float:
    """``Σ X_t I_t / ES_t``."""
    return float(np.sum(np.where(x < v, x / e, 0.0)))
