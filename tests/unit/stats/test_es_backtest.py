"""The VaR/ES backtests against independent references: Kupiec's LR by hand with scipy's χ²,
Z2 by a direct loop, the t's ES by numerical integration, and the simulated p-value's size and
power on seeded records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from riskppo.stats import (
    EmpiricalNull,
    ForecastRecord,
    ParametricNull,
    es_backtest,
    kupiec_test,
    standard_var_es,
    z2_statistic,
    z2_test,
)


def _lr_by_hand(x: int, n: int, a: float) -> float:
    """-2 ln[(1-a)^(n-x) a^x] + 2 ln[(1-x/n)^(n-x) (x/n)^x], Kupiec (1995) eq. (4)."""
    null = (n - x) * math.log(1 - a) + (x * math.log(a) if x else 0.0)
    r = x / n
    alt = ((n - x) * math.log(1 - r) if x < n else 0.0) + (x * math.log(r) if x else 0.0)
    return -2 * null + 2 * alt


@pytest.mark.parametrize(
    ("x", "n", "a"),
    [(8, 250, 0.01), (1, 112, 0.05), (0, 100, 0.05), (17, 17, 0.05), (5, 100, 0.05)],
)
def test_kupiec_lr_and_p_by_hand(x: int, n: int, a: float) -> None:
    k = kupiec_test(x, n, a)
    lr = _lr_by_hand(x, n, a)
    assert k.lr == pytest.approx(lr, rel=1e-12, abs=1e-12)
    assert k.p_value == pytest.approx(sps.chi2.sf(lr, df=1), rel=1e-12)
    assert (k.n, k.exceedances, k.expected) == (n, x, pytest.approx(a * n))
    assert k.reject == (k.p_value < 0.05)


def test_kupiec_known_values() -> None:
    # the LR of binomial likelihoods (scipy's pmf; the binomial coefficient cancels)
    loglik = sps.binom.logpmf(8, 250, 8 / 250) - sps.binom.logpmf(8, 250, 0.01)
    assert kupiec_test(8, 250, 0.01).lr == pytest.approx(2 * loglik, rel=1e-12)
    assert kupiec_test(0, 100, 0.05).lr == pytest.approx(-200 * math.log(0.95))
    assert math.isnan(kupiec_test(0, 0, 0.05).p_value) and not kupiec_test(0, 0, 0.05).reject
    with pytest.raises(ValueError, match="exceedances 3 must be in"):
        kupiec_test(3, 2, 0.05)


def test_z2_equals_a_direct_loop() -> None:
    x = [-0.05, 0.01, -0.031, -0.002, -0.09, 0.03]
    var = [-0.03, -0.03, -0.03, -0.02, -0.06, -0.01]
    es = [-0.04, -0.04, -0.045, -0.03, -0.08, -0.02]
    alpha = 0.05
    total = 0.0
    for xt, vt, et in zip(x, var, es, strict=True):
        if xt < vt:  # exceedance
            total += xt / (len(x) * alpha * -et)  # the paper's ES is a positive loss
    assert z2_statistic(x, var, es, alpha) == pytest.approx(total + 1.0, rel=1e-14)
    # hits at t = 0 (-0.05/-0.04), 2 (-0.031/-0.045) and 4 (-0.09/-0.08), 6 observations
    assert z2_statistic(x, var, es, alpha) == pytest.approx(
        1 - (0.05 / 0.04 + 0.031 / 0.045 + 0.09 / 0.08) / (6 * 0.05)
    )
    assert z2_statistic([0.0], [-0.01], [-0.02], alpha) == 1.0  # no exceedance


@pytest.mark.parametrize("nu", [None, 4.0, 8.0])
def test_standard_var_es_by_integration(nu: float | None) -> None:
    a = 0.05
    dist = sps.norm() if nu is None else sps.t(nu, scale=math.sqrt((nu - 2) / nu))
    assert dist.var() == pytest.approx(1.0)
    q = dist.ppf(a)
    tail, _ = integrate.quad(lambda v: v * dist.pdf(v), -np.inf, q)
    var, es = standard_var_es(a, nu)
    assert var == pytest.approx(q, rel=1e-10)
    assert es == pytest.approx(tail / a, rel=1e-7)


def test_bad_forecasts_are_refused() -> None:
    with pytest.raises(ValueError, match="every ES forecast must be < 0"):
        z2_statistic([0.1], [-0.1], [0.0], 0.05)
    with pytest.raises(ValueError, match="one length"):
        z2_statistic([0.1, 0.2], [-0.1], [-0.2], 0.05)
    with pytest.raises(ValueError, match="finite"):
        z2_statistic([math.nan], [-0.1], [-0.2], 0.05)
    with pytest.raises(ValueError, match="non-empty"):
        EmpiricalNull(np.zeros(3), np.array([0]), np.array([0]), np.ones(1))


def _correct_record(
    rng: np.random.Generator, n: int, nu: float | None, understate: float = 1.0
) -> ForecastRecord:
    """Outcomes from scaled t's, forecasts the true VaR/ES times ``understate`` (and the
    forecaster's null scaled the same way)."""
    scale = np.exp(0.4 * rng.standard_normal(n)) * 0.01
    x = ParametricNull(scale, nu).draw(rng, 1)[0]
    q, e = standard_var_es(0.05, nu)
    f = scale * understate
    return ForecastRecord(x, q * f, e * f, ParametricNull(f, nu))


def test_simulated_p_value_has_its_size_and_power() -> None:
    """400 seeded records of 250 correct forecasts: both tests reject about 5%; forecasts that
    understate the risk by 30% are rejected by Z2 most of the time."""
    rng = np.random.default_rng(11)
    size, power = [], []
    for i in range(400):
        b = es_backtest(_correct_record(rng, 250, 5.0), 0.05, n_sims=200, seed=i)
        size.append((b.kupiec.reject, b.z2.reject))
    for i in range(100):
        b = es_backtest(_correct_record(rng, 250, 5.0, 0.7), 0.05, n_sims=200, seed=i)
        power.append((b.kupiec.reject, b.z2.reject))
    kupiec_size, z2_size = np.mean(size, axis=0)
    assert 0.02 <= kupiec_size <= 0.09 and 0.02 <= z2_size <= 0.09, (kupiec_size, z2_size)
    kupiec_power, z2_power = np.mean(power, axis=0)
    assert z2_power > 0.8 and kupiec_power > 0.5, (kupiec_power, z2_power)


def test_z2_p_value_is_uniform_under_an_empirical_null() -> None:
    """FHS-style null: each outcome drawn from its own slice of a pool; forecasts the slices'
    own quantile and tail mean. The simulated p-values are about uniform."""
    rng = np.random.default_rng(5)
    pool = rng.standard_t(4, 3000)
    ps = []
    for i in range(300):
        hi = rng.integers(400, 3001, size=60)
        lo = np.zeros(60, dtype=np.int64)
        scale = rng.choice([-1.0, 1.0], 60) * rng.uniform(0.5, 2.0, 60)
        null = EmpiricalNull(pool, lo, hi, scale)
        x = null.draw(rng, 1)[0]
        var, es = np.empty(60), np.empty(60)
        for t in range(60):
            own = np.sort(pool[: hi[t]] * scale[t])
            m = math.ceil(0.05 * hi[t])
            var[t], es[t] = own[m], own[:m].mean()  # P(X < var) = m / n, tail mean below it
        ps.append(z2_test(ForecastRecord(x, var, es, null), 0.05, n_sims=200, seed=i).p_value)
    assert 0.02 <= np.mean(np.asarray(ps) < 0.05) <= 0.09
    assert 0.4 <= float(np.mean(ps)) <= 0.6


def test_records_pool_into_one_test() -> None:
    rng = np.random.default_rng(2)
    a, b = _correct_record(rng, 50, None), _correct_record(rng, 70, None, 0.8)
    pooled = es_backtest([a, b], 0.05, n_sims=300, seed=1)
    cat = [np.concatenate([a[i], b[i]]) for i in range(3)]
    assert pooled.z2.z2 == pytest.approx(z2_statistic(*cat, 0.05))
    hits = int(np.sum(a.realised < a.var) + np.sum(b.realised < b.var))
    assert (pooled.kupiec.n, pooled.kupiec.exceedances) == (120, hits)
    again = es_backtest([a, b], 0.05, n_sims=300, seed=1)
    assert again == pooled  # seeded
    empty = ForecastRecord(np.zeros(0), np.zeros(0), np.zeros(0), ParametricNull(np.zeros(0)))
    none = es_backtest(empty, 0.05, n_sims=10)
    assert none.z2.n == 0 and math.isnan(none.z2.p_value) and not none.z2.reject


def test_empirical_null_draws_each_slice_uniformly() -> None:
    pool = np.arange(10.0)
    null = EmpiricalNull(pool, np.array([0, 7]), np.array([3, 10]), np.array([1.0, -2.0]))
    draws = null.draw(np.random.default_rng(0), 30_000)
    assert set(np.unique(draws[:, 0])) == {0.0, 1.0, 2.0}
    assert set(np.unique(draws[:, 1])) == {-14.0, -16.0, -18.0}
    counts = np.unique(draws[:, 1], return_counts=True)[1]
    assert sps.chisquare(counts).pvalue > 0.001
