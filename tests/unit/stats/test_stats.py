"""The significance statistics of riskppo.stats against the papers' worked examples,
maintained implementations (skfolio, statsmodels, empyrical) and formulas written out here."""

from __future__ import annotations

import json
import math

import empyrical
import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats as sps

from riskppo import stats as S
from riskppo.stats.core import long_run_variance, sharpe_difference_influence
from riskppo.stats.null import random_signals

PPY = 252


def _heavy(n: int, seed: int, mean: float = 0.0005) -> np.ndarray:
    """Skewed, heavy-tailed daily-like returns."""
    rng = np.random.default_rng(seed)
    return mean + 0.01 * rng.standard_t(5, n) - 0.004 * rng.exponential(1.0, n) + 0.004


def _pair(n: int, seed: int, mean_a: float, mean_b: float, rho: float = 0.9) -> tuple:
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((2, n))
    return mean_a + z[0], mean_b + rho * z[0] + math.sqrt(1 - rho * rho) * z[1]


# -- the papers' worked examples ---------------------------------------------------------------


def test_psr_reproduces_bailey_lopez_de_prado_2012_examples():
    # Monthly SR 0.458 (annual 1.59) over 24 months: PSR(0) = 0.982 if normal, 0.913 with the
    # hedge-fund moments skew -2.448, kurtosis 10.164 (non-excess), 0.953 over 36 months.
    assert S.psr_from_moments(0.458, 0.0, 3.0, 24, 0.0) == pytest.approx(0.982, abs=5e-4)
    assert S.psr_from_moments(0.458, -2.448, 10.164, 24, 0.0) == pytest.approx(0.913, abs=5e-4)
    assert S.psr_from_moments(0.458, -2.448, 10.164, 36, 0.0) == pytest.approx(0.953, abs=1e-3)


@pytest.mark.parametrize(("ppy", "years"), [(252, 2.73), (52, 2.83), (12, 3.24)])
def test_min_trl_reproduces_the_papers_sampling_frequency_example(ppy, years):
    # Annual SR 2 against a target of 1 at 95%, normal returns: 2.73 / 2.83 / 3.24 years of
    # daily / weekly / monthly bars.
    bars = S.min_trl_from_moments(2 / math.sqrt(ppy), 0.0, 3.0, 1 / math.sqrt(ppy), 0.95)
    assert bars / ppy == pytest.approx(years, abs=5e-3)


def test_min_trl_with_non_normal_moments():
    # Same, monthly, skew -0.72 and kurtosis 5.78: 4.99 years.
    bars = S.min_trl_from_moments(2 / math.sqrt(12), -0.72, 5.78, 1 / math.sqrt(12), 0.95)
    assert bars / 12 == pytest.approx(4.99, abs=5e-3)


def test_dsr_reproduces_bailey_lopez_de_prado_2014_example():
    # 100 trials whose annual Sharpe ratios have variance 1/2, 250 days a year: expected maximum
    # 0.1132 per day; the best has annual SR 2.5 over 1,250 days, skew -3, kurtosis 10: DSR 0.9004.
    # After 46 trials instead: 0.9505; with normal returns, 88 trials give 0.9505.
    v, sr = 0.5 / 250, 2.5 / math.sqrt(250)
    assert S.expected_max_sharpe(100, v) == pytest.approx(0.1132, abs=5e-5)
    assert S.dsr_from_moments(sr, -3.0, 10.0, 1250, 100, v) == pytest.approx(0.9004, abs=5e-5)
    assert S.dsr_from_moments(sr, -3.0, 10.0, 1250, 46, v) == pytest.approx(0.9505, abs=5e-5)
    assert S.dsr_from_moments(sr, 0.0, 3.0, 1250, 88, v) == pytest.approx(0.9505, abs=5e-5)


# -- maintained implementations ----------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_sharpe_psr_dsr_match_skfolio_and_empyrical(seed):
    measures = pytest.importorskip("skfolio.measures")
    r = _heavy(800, seed)
    assert S.sharpe(r, PPY) == pytest.approx(empyrical.sharpe_ratio(r, annualization=PPY), 1e-12)
    bench_annual = 0.3
    mine = S.probabilistic_sharpe(r, bench_annual, PPY)
    theirs = measures.probabilistic_sharpe_ratio(r, bench_annual / math.sqrt(PPY))
    assert mine == pytest.approx(theirs, abs=1e-10)
    # skfolio takes the trials' per-bar Sharpe ratios: two with sample variance V/ppy.
    v_annual = 0.4
    half = math.sqrt(v_annual / PPY / 2)
    theirs = measures.deflated_sharpe_ratio(r, np.array([-half, half]))
    assert S.deflated_sharpe(r, 2, v_annual, PPY) == pytest.approx(theirs, abs=1e-10)


def test_hac_alpha_beta_matches_statsmodels_directly():
    rng = np.random.default_rng(3)
    b = _heavy(1000, 4)
    a = 0.0002 + 0.7 * b + 0.004 * rng.standard_t(4, 1000)
    got = S.hac_alpha_beta(a, b, PPY)
    lags = math.floor(4 * (1000 / 100) ** (2 / 9))
    res = sm.OLS(a, sm.add_constant(b)).fit(cov_type="HAC", cov_kwds={"maxlags": lags})
    assert got.lags == lags == 6
    assert got.alpha_annual == pytest.approx(res.params[0] * PPY, rel=1e-10)
    assert got.alpha_t == pytest.approx(res.tvalues[0], rel=1e-10)
    assert got.alpha_p_one_sided == pytest.approx(res.pvalues[0] / 2, rel=1e-8)  # t > 0 here
    assert got.beta == pytest.approx(res.params[1], rel=1e-10)
    assert got.beta_se == pytest.approx(res.bse[1], rel=1e-10)


# -- the paired tests against formulas written here -----------------------------------------


def _memmel_z(a: np.ndarray, b: np.ndarray, corrected: bool = True) -> float:
    """Jobson & Korkie (1981) z in their mean/variance notation; Memmel (2003) corrects the
    last term of θ from -μ1μ2/(2σ1σ2)·(σ12² + σ1²σ2²) to -μ1μ2/(σ1σ2)·σ12²."""
    t = a.size
    m1, m2 = a.mean(), b.mean()
    s1, s2 = a.std(ddof=1), b.std(ddof=1)
    s12 = np.cov(a, b, ddof=1)[0, 1]
    last = (
        m1 * m2 / (s1 * s2) * s12**2
        if corrected
        else (m1 * m2 / (2 * s1 * s2) * (s12**2 + s1**2 * s2**2))
    )
    theta = (
        2 * s1**2 * s2**2 - 2 * s1 * s2 * s12 + 0.5 * m1**2 * s2**2 + 0.5 * m2**2 * s1**2 - last
    ) / t
    return float((s2 * m1 - s1 * m2) / math.sqrt(theta))


def test_jobson_korkie_memmel_matches_memmels_formula():
    a, b = _pair(60, 5, 1.0, 0.6, rho=0.2)  # large per-bar Sharpe ratios: the correction matters
    got = S.sharpe_difference_test(a, b, 12)
    z = _memmel_z(a, b)
    assert got.statistic == pytest.approx(z, rel=1e-12)
    assert abs(z - _memmel_z(a, b, corrected=False)) > 0.05  # the data tells the two apart
    assert got.p_one_sided == pytest.approx(sps.norm.sf(z), rel=1e-12)
    assert got.p_two_sided == pytest.approx(2 * sps.norm.sf(abs(z)), rel=1e-12)
    sharpe_diff = (a.mean() / a.std(ddof=1) - b.mean() / b.std(ddof=1)) * math.sqrt(12)
    assert got.diff == pytest.approx(sharpe_diff, rel=1e-12)
    assert got.method == "jobson-korkie-memmel"


def test_hac_influence_is_ledoit_wolfs_gradient_times_the_centred_moments():
    a, b = _heavy(500, 6), _heavy(500, 7, mean=0.0001)
    y = np.column_stack(
        [a - a.mean(), b - b.mean(), a * a - np.mean(a * a), b * b - np.mean(b * b)]
    )
    mu1, mu2, g1, g2 = a.mean(), b.mean(), np.mean(a * a), np.mean(b * b)
    grad = np.array(
        [
            g1 / (g1 - mu1**2) ** 1.5,
            -g2 / (g2 - mu2**2) ** 1.5,
            -0.5 * mu1 / (g1 - mu1**2) ** 1.5,
            0.5 * mu2 / (g2 - mu2**2) ** 1.5,
        ]
    )
    np.testing.assert_allclose(sharpe_difference_influence(a, b), y @ grad, rtol=1e-9, atol=1e-12)


def test_long_run_variance_of_an_ar1_series():
    # v_t = φ v_{t-1} + e_t, Var(e) = 1: long-run variance 1/(1-φ)² = 4 at φ = 0.5.
    rng = np.random.default_rng(8)
    e = rng.standard_normal(20000)
    v = np.empty_like(e)
    v[0] = e[0]
    for t in range(1, e.size):
        v[t] = 0.5 * v[t - 1] + e[t]
    assert long_run_variance(v - v.mean()) == pytest.approx(4.0, rel=0.08)
    assert long_run_variance(e - e.mean()) == pytest.approx(1.0, rel=0.05)


def test_hac_and_memmel_agree_on_iid_normal_pairs():
    a, b = _pair(2000, 9, 0.03, 0.0)
    jk, hac = S.sharpe_difference_test(a, b, PPY), S.sharpe_difference_hac(a, b, PPY)
    assert hac.diff == jk.diff
    assert hac.statistic == pytest.approx(jk.statistic, rel=0.1)


@pytest.mark.parametrize("test", [S.sharpe_difference_test, S.sharpe_difference_hac])
def test_one_sided_tests_are_symmetric(test):
    a, b = _pair(500, 10, 0.05, 0.0)
    ab, ba = test(a, b, PPY), test(b, a, PPY)
    assert ab.p_one_sided + ba.p_one_sided == pytest.approx(1.0, abs=1e-12)
    assert ab.diff == pytest.approx(-ba.diff, abs=1e-12)
    assert ab.p_two_sided == pytest.approx(ba.p_two_sided, abs=1e-12)


def test_bootstrap_test_agrees_with_hac_and_is_centred_on_the_observed_difference():
    for seed, mean_a in [(11, 0.1), (12, 0.06), (13, 0.0)]:
        a, b = _pair(500, seed, mean_a, 0.0)
        hac = S.sharpe_difference_hac(a, b, PPY)
        boot = S.sharpe_difference_bootstrap(a, b, PPY, n_resamples=999, seed=seed)
        # studentised by the bootstrap's own block variance (Götze & Künsch), close to HAC's
        assert boot.diff == hac.diff
        assert boot.statistic == pytest.approx(hac.statistic, rel=0.1, abs=0.02)
        assert boot.p_one_sided == pytest.approx(hac.p_one_sided, abs=0.05), seed
        assert boot.p_two_sided == pytest.approx(hac.p_two_sided, abs=0.06), seed


# -- invariants --------------------------------------------------------------------------------


def test_psr_is_one_half_at_the_benchmark_in_annual_units():
    r = _heavy(600, 14)
    assert S.psr_from_moments(0.07, -1.0, 6.0, 600, 0.07) == 0.5
    assert S.probabilistic_sharpe(r, S.sharpe(r, PPY), PPY) == pytest.approx(0.5, abs=1e-12)
    m = S.moments(r)
    assert m.kurtosis == pytest.approx(sps.kurtosis(r, fisher=False), rel=1e-12) and m.kurtosis > 3


def test_dsr_deflates_and_reduces_to_psr_for_one_trial():
    r = _heavy(1000, 15)
    psr0 = S.probabilistic_sharpe(r)
    assert S.deflated_sharpe(r, 1, 0.5, PPY) == psr0
    assert S.deflated_sharpe(r, 2, 0.5, PPY) < psr0
    assert S.deflated_sharpe(r, 50, 0.5, PPY) < S.deflated_sharpe(r, 5, 0.5, PPY)
    # the annual trials' variance V is V/ppy per bar
    m = S.moments(r)
    expected = S.dsr_from_moments(m.sharpe, m.skew, m.kurtosis, m.n, 10, 0.5 / PPY)
    assert S.deflated_sharpe(r, 10, 0.5, PPY) == pytest.approx(expected, abs=1e-15)


def test_min_track_record_length_units_and_infinity():
    r = _heavy(1500, 16, mean=0.002)
    m = S.moments(r)
    target = 0.2
    bars = S.min_track_record_length(r, target, 0.95, PPY)
    expected = S.min_trl_from_moments(m.sharpe, m.skew, m.kurtosis, target / math.sqrt(PPY), 0.95)
    assert bars == pytest.approx(expected, rel=1e-12)
    # at the MinTRL the PSR against the target reaches the confidence level
    n = round(bars)
    psr = S.psr_from_moments(m.sharpe, m.skew, m.kurtosis, n, target / math.sqrt(PPY))
    assert psr == pytest.approx(0.95, abs=2e-3)
    assert S.min_track_record_length(r, S.sharpe(r, PPY) + 0.01, 0.95, PPY) == math.inf


def test_bootstrap_interval_covers_the_true_sharpe_about_95_percent():
    true_annual = 1.0
    mean = true_annual / math.sqrt(PPY)
    rng = np.random.default_rng(17)
    hits = 0
    reps = 200
    for i in range(reps):
        r = mean + rng.standard_normal(250)
        ci = S.sharpe_ci(r, PPY, n_resamples=300, seed=i)
        hits += ci.low <= true_annual <= ci.high
    assert 0.90 <= hits / reps <= 0.99


def test_seeded_results_repeat_and_depend_on_the_seed():
    a, b = _pair(300, 18, 0.05, 0.0)
    ret = np.random.default_rng(19).standard_normal(300) * 0.01
    for method in ("stationary", "circular"):
        first = S.sharpe_ci(a, PPY, n_resamples=300, method=method, seed=3)
        assert first == S.sharpe_ci(a, PPY, n_resamples=300, method=method, seed=3)
        assert first != S.sharpe_ci(a, PPY, n_resamples=300, method=method, seed=4)
    first_test = S.sharpe_difference_bootstrap(a, b, PPY, n_resamples=300, seed=3)
    assert first_test == S.sharpe_difference_bootstrap(a, b, PPY, n_resamples=300, seed=3)
    null = S.random_timing_null(0.5, ret, np.ones(300), (0, 1), fee=1e-3, periods_per_year=PPY)
    again = S.random_timing_null(0.5, ret, np.ones(300), (0, 1), fee=1e-3, periods_per_year=PPY)
    np.testing.assert_array_equal(null.null_sharpes, again.null_sharpes)


def _rejection_rate(test, mean_a: float, pairs: int = 300) -> float:
    hits = 0
    for i in range(pairs):
        a, b = _pair(250, 1000 + i, mean_a, 0.0)
        hits += test(a, b, PPY).p_one_sided < 0.05
    return hits / pairs


@pytest.mark.parametrize("test", [S.sharpe_difference_test, S.sharpe_difference_hac])
def test_size_and_power_on_iid_normal_pairs(test):
    # 250 bars, correlation 0.9: se of the per-bar difference ≈ sqrt(0.2/250) = 0.028.
    assert _rejection_rate(test, 0.0) <= 0.085
    assert _rejection_rate(test, 0.1) >= 0.85  # z ≈ 3.5: power ≈ 0.96 at 5%


def test_bootstrap_has_power():
    hits = 0
    for i in range(40):
        a, b = _pair(250, 2000 + i, 0.1, 0.0)
        hits += S.sharpe_difference_bootstrap(a, b, PPY, n_resamples=199, seed=i).p_one_sided < 0.05
    assert hits / 40 >= 0.8


# -- exposure scaling, random timing, multiple testing, verdict --------------------------------


def _env_returns(exposure: np.ndarray, log_ret: np.ndarray, fee: float) -> np.ndarray:
    """The trading env's per-bar reward: exposure × log-return − fee × |Δexposure|, from flat."""
    return exposure * log_ret - fee * np.abs(np.diff(exposure, prepend=0.0))


def test_scaled_benchmark_is_the_benchmark_run_at_the_agents_exposure():
    rng = np.random.default_rng(20)
    log_ret = 0.01 * rng.standard_normal(400)
    bench_exposure = np.clip(0.8 + 0.3 * rng.standard_normal(400), 0.1, 1.5)
    bench = _env_returns(bench_exposure, log_ret, 1e-3)
    agent_mean_abs = 0.45
    k = agent_mean_abs / np.abs(bench_exposure).mean()
    scaled = S.scale_to_exposure(bench, np.abs(bench_exposure).mean(), agent_mean_abs)
    np.testing.assert_allclose(scaled, _env_returns(k * bench_exposure, log_ret, 1e-3), atol=1e-15)
    assert S.sharpe(scaled, PPY) == pytest.approx(S.sharpe(bench, PPY), rel=1e-12)
    with pytest.raises(ValueError, match="bench_mean_abs_exposure"):
        S.scale_to_exposure(bench, 0.0, 0.5)


def test_random_timing_null_follows_the_env_return_model():
    rng = np.random.default_rng(21)
    log_ret = 0.01 * rng.standard_normal(500) + 0.0003
    ones = np.ones(500)
    # a band of one point: every null strategy is buy-and-hold, paying the entry fee once
    res = S.random_timing_null(0.0, log_ret, ones, (1.0, 1.0), fee=0.01, periods_per_year=PPY, n=5)
    expected = S.sharpe(_env_returns(ones, log_ret, 0.01), PPY)
    np.testing.assert_allclose(res.null_sharpes, expected, rtol=1e-12)
    # the sizing multiplies the exposure; a scale of 2 on a one-point band is exposure 2
    res2 = S.random_timing_null(
        0.0, log_ret, 2 * ones, (1.0, 1.0), fee=0.01, periods_per_year=PPY, n=2
    )
    expected2 = S.sharpe(_env_returns(2 * ones, log_ret, 0.01), PPY)
    np.testing.assert_allclose(res2.null_sharpes, expected2, rtol=1e-12)


def test_random_timing_signals_and_p_value():
    signals = random_signals(400, 300, (-0.5, 1.0), 20, 0)
    assert signals.min() >= -0.5 and signals.max() <= 1.0
    assert signals.mean() == pytest.approx(0.25, abs=0.03)  # uniform on the band
    slow = random_signals(400, 300, (-0.5, 1.0), 60, 0)
    assert np.abs(np.diff(slow)).mean() < 0.7 * np.abs(np.diff(signals)).mean()
    rng = np.random.default_rng(22)
    log_ret = 0.01 * rng.standard_normal(300)
    kw = {"fee": 0.0, "periods_per_year": PPY, "n": 199}
    # perfect foresight inside the band beats every random-timing strategy
    oracle = S.sharpe(np.where(log_ret > 0, 1.0, -0.5) * log_ret, PPY)
    best = S.random_timing_null(oracle, log_ret, np.ones(300), (-0.5, 1.0), **kw)
    assert best.p_value == 1 / 200 and best.percentile == 100.0 and best.n == 199
    median = float(np.median(best.null_sharpes))
    mid = S.random_timing_null(median, log_ret, np.ones(300), (-0.5, 1.0), **kw)
    assert mid.p_value == pytest.approx((1 + 100) / 200)


def test_sidak_adjustment():
    assert S.adjust_p(0.012, 1) == 0.012
    assert S.adjust_p(0.012, 3) == pytest.approx(1 - 0.988**3, rel=1e-12)
    assert S.adjust_p(1e-12, 10) == pytest.approx(1e-11, rel=1e-6)  # no cancellation
    assert S.adjust_p(1.0, 5) == 1.0 and math.isnan(S.adjust_p(math.nan, 5))
    with pytest.raises(ValueError, match="n_trials"):
        S.adjust_p(0.1, 0)


def _test_with_adjusted_p(p_adjusted: float, n: int) -> S.PairedTest:
    p_one = 1 - (1 - p_adjusted) ** (1 / n)
    return S.PairedTest(0.4, 2.0, p_one, 2 * p_one, "ledoit-wolf-hac")


def test_verdict_lines():
    claim = S.verdict(_test_with_adjusted_p(0.012, 3), 3, "vol-targeted buy-and-hold")
    assert claim.claim and claim.p_adjusted == pytest.approx(0.012)
    assert claim.text == (
        "beats vol-targeted buy-and-hold "
        "(Sharpe difference +0.40, one-sided p = 0.012 by the HAC test, adjusted for N = 3 trials)"
    )
    no = S.verdict(_test_with_adjusted_p(0.27, 11), 11, "vol-targeted buy-and-hold")
    assert not no.claim
    assert no.text == (
        "edge over vol-targeted buy-and-hold not established "
        "(Sharpe difference +0.40, one-sided p = 0.27 by the HAC test, adjusted for N = 11 trials)"
    )
    # at the line: p = 0.05 after adjustment is not below 0.05
    assert not S.verdict(S.PairedTest(0.1, 1.6, 0.05, 0.1, "x"), 1, "B").claim
    assert S.verdict(S.PairedTest(0.0, math.nan, math.nan, math.nan, "x"), 1, "B").text == (
        "edge over B not established "
        "(Sharpe difference +0.00, one-sided p = undefined, adjusted for N = 1 trial)"
    )


# -- bad input and degenerate records ----------------------------------------------------------


def test_bad_input_names_the_argument():
    good = np.zeros(10) + np.arange(10) * 1e-3
    with pytest.raises(ValueError, match=r"^r has a non-finite value nan at index 2$"):
        S.sharpe(np.array([0.1, 0.2, np.nan, 0.3]), PPY)
    with pytest.raises(ValueError, match=r"^b has a non-finite value inf at index 0$"):
        S.sharpe_difference_test(good, np.r_[np.inf, good[1:]], PPY)
    with pytest.raises(ValueError, match="a and b must have equal length, got 10 and 9"):
        S.sharpe_difference_hac(good, good[:9], PPY)
    with pytest.raises(ValueError, match="r must be a 1-D array"):
        S.sharpe(np.zeros((3, 3)), PPY)
    with pytest.raises(ValueError, match="periods_per_year must be a positive number"):
        S.sharpe(good, 0)
    with pytest.raises(ValueError, match="periods_per_year is needed"):
        S.probabilistic_sharpe(good, 0.5)
    with pytest.raises(ValueError, match="method must be one of"):
        S.sharpe_ci(good, PPY, method="moving")
    with pytest.raises(ValueError, match="band must be a finite pair"):
        S.random_timing_null(0.1, good, np.ones(10), (1, 0), fee=0.0, periods_per_year=PPY)


def test_a_flat_record_gives_nan_not_an_exception():
    flat, r = np.full(50, 0.001), _heavy(50, 23)
    assert math.isnan(S.sharpe(flat, PPY))
    assert math.isnan(S.probabilistic_sharpe(flat))
    assert math.isnan(S.min_track_record_length(flat))
    assert math.isnan(S.sharpe_ci(flat, PPY, n_resamples=100).estimate)
    for test in (S.sharpe_difference_test, S.sharpe_difference_hac, S.sharpe_difference_bootstrap):
        assert math.isnan(test(r, flat, PPY).p_one_sided)
    assert math.isnan(S.hac_alpha_beta(r, flat, PPY).beta)
    assert not S.verdict(S.sharpe_difference_hac(r, flat, PPY), 1, "B").claim
    same = S.sharpe_difference_hac(r, r, PPY)
    assert same.diff == 0.0 and same.p_one_sided == 0.5


# -- the summary -------------------------------------------------------------------------------


BENCH = _heavy(600, 24)
AGENT = 0.6 * BENCH + 0.003 * np.random.default_rng(25).standard_normal(600) + 0.0004


@pytest.fixture(scope="module")
def summary() -> S.StatsSummary:
    return S.summarize(
        AGENT,
        BENCH,
        periods_per_year=PPY,
        agent_exposure=0.6,
        benchmark_exposure=1.2,
        n_trials=3,
        trials_sharpe_var=0.3,
        n_resamples=300,
        seed=1,
    )


def test_summary_figures(summary):
    s = summary
    assert s.exposure_scale == 0.5
    assert s.scaled_benchmark.sharpe.estimate == pytest.approx(s.benchmark.sharpe.estimate)
    assert s.scaled_benchmark.annual_volatility == pytest.approx(
        0.5 * s.benchmark.annual_volatility
    )
    assert s.scaled_benchmark.max_drawdown > s.benchmark.max_drawdown  # less deep
    assert s.verdict == s.vs_benchmark.verdict
    # 600 bars: a short record, judged by the bootstrap (its own row, same seed and resamples)
    boot = s.vs_benchmark.bootstrap
    assert s.vs_benchmark.test_method == boot.method == "ledoit-wolf-bootstrap"
    assert s.verdict.p_adjusted == pytest.approx(S.adjust_p(boot.p_one_sided, 3))
    bench_sharpe = S.sharpe(BENCH, PPY)
    assert s.vs_benchmark.psr_vs_benchmark == S.probabilistic_sharpe(AGENT, bench_sharpe, PPY)
    assert s.deflated_sharpe == S.deflated_sharpe(AGENT, 3, 0.3, PPY)
    assert s.vs_scaled_benchmark.alpha_beta.beta == pytest.approx(
        2 * s.vs_benchmark.alpha_beta.beta
    )


def test_summary_risk_figures_match_empyrical():
    bench = _heavy(500, 26)
    agent = _heavy(500, 27)
    s = S.summarize(
        agent,
        bench,
        periods_per_year=PPY,
        agent_exposure=1.0,
        benchmark_exposure=1.0,
        n_resamples=100,
        log_returns=False,
    )
    assert s.agent.max_drawdown == pytest.approx(empyrical.max_drawdown(agent), rel=1e-10)
    cvar = empyrical.conditional_value_at_risk(agent, cutoff=0.05)
    assert s.agent.cvar_95 == pytest.approx(cvar, rel=1e-10)
    # log returns: the same figures of the simple returns exp(r) - 1
    s_log = S.summarize(
        np.log1p(agent),
        np.log1p(bench),
        periods_per_year=PPY,
        agent_exposure=1.0,
        benchmark_exposure=1.0,
        n_resamples=100,
    )
    assert s_log.agent.max_drawdown == pytest.approx(s.agent.max_drawdown, rel=1e-10)
    assert s_log.agent.cvar_95 == pytest.approx(s.agent.cvar_95, rel=1e-10)
    assert s.deflated_sharpe == S.probabilistic_sharpe(agent)  # one trial


def test_summary_serialises_and_tabulates(summary):
    d = summary.to_dict()
    text = json.dumps(d, allow_nan=False)
    assert "numpy" not in text and d["n_trials"] == 3
    assert d["vs_benchmark"]["verdict"]["text"] == summary.verdict.text
    rows = summary.rows()
    assert all(len(row) == 5 and isinstance(row[0], str) for row in rows)
    labels = [row[0] for row in rows]
    assert len(set(labels)) == len(labels)
    for _label, *values, _note in rows:
        assert all(v is None or (isinstance(v, float) and math.isfinite(v)) for v in values)
    by_label = {row[0]: row for row in rows}
    assert by_label["p one-sided, HAC"][2] == summary.vs_benchmark.hac.p_one_sided
