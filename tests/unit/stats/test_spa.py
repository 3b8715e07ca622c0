"""Hansen's SPA and Romano & Wolf's StepM (riskppo.stats.spa): size on null candidates, power
with a planted superior one, and invariants checked against formulas and a stationary bootstrap
written out here (not arch's own API)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from riskppo import stats as S
from riskppo.stats.spa import sharpe_differentials, stationary_bootstrap_variance

PPY = 252


def _market(seed: int, t: int, k: int, edge: float = 0.0, rho: float = 0.8) -> tuple:
    """A benchmark ``[t]`` and ``k`` candidates ``[t, k]`` with the benchmark's Sharpe ratio
    (Student-t(5) noise, each correlated ``rho`` with the benchmark); ``edge`` per bar added to
    candidate 0."""
    rng = np.random.default_rng(seed)
    z = rng.standard_t(5, (t, k + 1)) / math.sqrt(5 / 3)
    bench = 0.01 * z[:, 0] + 0.0003
    cands = 0.01 * (rho * z[:, [0]] + math.sqrt(1 - rho * rho) * z[:, 1:]) + 0.0003
    cands[:, 0] += edge
    return bench, cands


def _kernel_variance(d: np.ndarray, block: float) -> np.ndarray:
    """Hansen (2005, eq. 6) as a plain sum over lags."""
    t, q = d.shape[0], 1.0 / block
    x = d - d.mean(axis=0)
    total = (x * x).sum(axis=0) / t
    for i in range(1, t):
        kappa = (1 - i / t) * (1 - q) ** i + (i / t) * (1 - q) ** (t - i)
        total += 2 * kappa * (x[: t - i] * x[i:]).sum(axis=0) / t
    return total


def _stationary_means(d: np.ndarray, block: float, reps: int, seed: int) -> np.ndarray:
    """``[reps]`` means of stationary-bootstrap resamples of ``d`` ``[T]`` (Politis & Romano
    1994: each bar starts a new block at a uniform position with probability 1/block, else
    continues the block, wrapping round the end)."""
    rng = np.random.default_rng(seed)
    t = d.size
    idx = np.empty((reps, t), dtype=np.int64)
    idx[:, 0] = rng.integers(0, t, reps)
    for j in range(1, t):
        new = rng.random(reps) < 1.0 / block
        idx[:, j] = np.where(new, rng.integers(0, t, reps), (idx[:, j - 1] + 1) % t)
    return d[idx].mean(axis=1)


def test_the_variance_is_hansens_kernel_sum():
    rng = np.random.default_rng(0)
    d = rng.standard_normal((300, 3))
    d[:, 1] = np.convolve(rng.standard_normal(302), [1.0, 1.0, 1.0], "valid")  # MA(2)
    for block in (1, 4, 17.5):
        np.testing.assert_allclose(
            stationary_bootstrap_variance(d, block), _kernel_variance(d, block), rtol=1e-10
        )


def test_the_loss_is_the_sharpe_difference_and_ignores_leverage():
    bench, cands = _market(1, 400, 3)
    d = sharpe_differentials(bench, cands)
    sr = cands.mean(axis=0) / cands.std(axis=0, ddof=1)
    sr_b = bench.mean() / bench.std(ddof=1)
    np.testing.assert_allclose(d.mean(axis=0), bench.std(ddof=1) * (sr - sr_b), rtol=1e-12)
    levered = cands * np.array([3.0, 0.5, 1.0])  # same Sharpe ratios, other risk
    np.testing.assert_allclose(sharpe_differentials(bench, levered), d, atol=1e-15)
    out = S.superior_ability(bench, cands, PPY, n_resamples=199)
    np.testing.assert_allclose(out.sharpe_diff, (sr - sr_b) * math.sqrt(PPY), rtol=1e-12)


def test_one_candidate_matches_a_one_sided_block_bootstrap_of_the_mean_difference():
    # K = 1: the SPA is the recentred one-sided bootstrap test of E[d] <= 0 (studentising by a
    # fixed ω̂ cancels), checked against a stationary bootstrap written out above and against
    # the normal approximation with Hansen's ω̂ (the bootstrap mean's variance is ω̂² / T)
    bench, cands = _market(2, 600, 1, edge=0.00035)
    block, reps = 6, 4000
    d = sharpe_differentials(bench, cands)[:, 0]
    assert d.mean() > 0
    means = _stationary_means(d, block, reps, seed=11)
    p_own = (1 + np.count_nonzero(means - d.mean() >= d.mean())) / (reps + 1)
    omega = math.sqrt(_kernel_variance(d[:, None], block)[0])
    p_normal = float(sps.norm.sf(math.sqrt(d.size) * d.mean() / omega))
    out = S.superior_ability(bench, cands, PPY, n_resamples=reps, block=block, seed=5)
    assert 0.02 < p_own < 0.3  # a case where the p-value is informative
    assert out.p_consistent == pytest.approx(p_own, abs=0.02)
    assert out.p_consistent == pytest.approx(p_normal, abs=0.025)
    assert out.t_stats[0] == pytest.approx(math.sqrt(d.size) * d.mean() / omega, rel=1e-9)


def test_size_on_null_candidates():
    # five candidates with the benchmark's Sharpe ratio, correlated 0.8 with it (0.64 with each
    # other), heavy tails: the test rejects at about its nominal 5% or less
    sims, hits, found = 150, 0, 0
    for i in range(sims):
        bench, cands = _market(100 + i, 500, 5)
        out = S.superior_ability(bench, cands, PPY, n_resamples=199, seed=i)
        hits += out.p_consistent < 0.05
        found += bool(out.superior)
    assert hits / sims <= 0.09
    assert found / sims <= 0.09  # StepM's familywise error


def test_power_with_one_planted_superior_candidate():
    # candidate 0 earns 6 bp a bar more (an annual Sharpe difference of about 1.0)
    sims, hits, right = 40, 0, 0
    for i in range(sims):
        bench, cands = _market(300 + i, 1000, 5, edge=0.0006)
        out = S.superior_ability(bench, cands, PPY, n_resamples=199, seed=i)
        hits += out.p_consistent < 0.05
        right += out.superior == (0,)
    assert hits / sims >= 0.8
    assert right / sims >= 0.7


def test_stepm_keeps_only_candidates_significant_on_their_own():
    # the step-down critical value is a maximum's, so never below a single candidate's: what
    # StepM keeps must be significant alone (same resamples: same seed and bars)
    for seed in range(4):
        bench, cands = _market(500 + seed, 500, 4, edge=0.0005)
        cands[:, 1] += 0.0004
        out = S.superior_ability(bench, cands, PPY, n_resamples=499, block=5, seed=seed)
        alone = [
            S.superior_ability(bench, cands[:, [k]], PPY, n_resamples=499, block=5, seed=seed)
            for k in range(4)
        ]
        significant = {k for k in range(4) if alone[k].p_consistent < out.size}
        assert set(out.superior) <= significant
        assert bool(out.superior) == (out.p_consistent < out.size)


def test_a_noisy_null_candidate_does_not_hide_a_steady_superior_one():
    # candidate 0 is the benchmark plus a small steady edge (tracking error tiny, t ≈ 3.8);
    # candidate 1 is unrelated to the benchmark with its Sharpe ratio (a differential 12 times
    # noisier). Unstudentised, candidate 1's bootstrap swings set the maximum's critical value
    # and the edge is missed (p = 0.14, nothing found); studentised (Hansen 2005) it is found.
    rng = np.random.default_rng(7)
    t = 1000
    z = rng.standard_normal((t, 3))
    bench = 0.01 * z[:, 0] + 0.0004
    steady = bench + 0.0012 * z[:, 1] + 0.0002
    noisy = 0.01 * z[:, 2] + 0.0004
    out = S.superior_ability(bench, np.column_stack([steady, noisy]), PPY, n_resamples=999)
    assert out.t_stats[0] > 3.0
    assert out.p_consistent < 0.01 and out.superior == (0,)


def test_seeded_and_degenerate_candidates():
    bench, cands = _market(9, 300, 3)
    cands[:, 1] = 0.0  # never traded: Sharpe 0
    cands[:, 2] = bench * 2.0  # the benchmark levered: no different in Sharpe terms
    first = S.superior_ability(bench, cands, PPY, n_resamples=199, seed=3)
    again = S.superior_ability(bench, cands, PPY, n_resamples=199, seed=3)
    assert first.p_consistent == again.p_consistent and first.superior == again.superior
    assert first.p_lower <= first.p_consistent <= first.p_upper
    sr_b = bench.mean() / bench.std(ddof=1) * math.sqrt(PPY)
    assert first.sharpe_diff[1] == pytest.approx(-sr_b, rel=1e-12)
    assert first.t_stats[2] == 0.0 and first.sharpe_diff[2] == pytest.approx(0.0, abs=1e-12)
    assert 0 < first.p_consistent <= 1 and first.n_candidates == 3 and first.n_bars == 300


@pytest.mark.parametrize(
    ("bench", "cands", "message"),
    [
        (np.ones(50), np.zeros((50, 2)), "benchmark never varies"),
        (np.arange(50.0), np.zeros((49, 2)), r"\[T, K\] matrix with T = 50"),
        (np.arange(50.0), np.zeros(50), r"got shape \(50,\)"),
        (np.arange(50.0), np.full((50, 2), np.nan), "non-finite value nan at bar 0, column 0"),
        (np.r_[np.arange(49.0), np.inf], np.zeros((50, 2)), "benchmark has a non-finite"),
    ],
)
def test_bad_input_is_one_clear_error(bench, cands, message):
    with pytest.raises(ValueError, match=message):
        S.superior_ability(bench, cands, PPY, n_resamples=199)


def test_stepm_rejects_in_steps_down_to_the_last_candidate():
    # candidate 0 far ahead (t ≈ 12), candidate 1 a little (t ≈ 1.71): the first step's
    # critical value is the maximum's over both (about 1.86 here), which rejects only 0; the
    # second step's is candidate 1's alone (about 1.55), which rejects it. (arch 8.0's StepM
    # fails here: it tests an empty set after the last rejection.)
    rng = np.random.default_rng(8)
    t = 1000
    z = rng.standard_normal((t, 3))
    bench = 0.01 * z[:, 0]
    far = bench + 0.002 * z[:, 1] + 0.0008
    near = bench + 0.002 * z[:, 2] + 0.00017
    out = S.superior_ability(bench, np.column_stack([far, near]), PPY, n_resamples=999, seed=1)
    assert out.t_stats[0] > 10 and 1.6 < out.t_stats[1] < 1.8
    assert out.superior == (0, 1)
