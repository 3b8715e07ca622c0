"""The verdict's paired Sharpe test on short records: the studentised circular block bootstrap
(Ledoit & Wolf 2008, §3.2, studentised as Götze & Künsch 1996) below ``SMALL_SAMPLE_BARS`` bars,
the HAC test from there on — against a direct re-implementation, a closed form, and its size on
simulated GARCH(1,1)-t pairs where the HAC test's is visibly too high."""

from __future__ import annotations

import math

import numpy as np
import pytest
from arch.bootstrap import optimal_block_length

import riskppo.stats as S
from riskppo.stats.bootstrap import block_variance, min_block_length

PPY = 252


def _garch_t_pairs(
    n_pairs: int, n: int, rho: float, seed: int, nu: float = 5.0
) -> tuple[np.ndarray, np.ndarray]:
    """``[n_pairs, n]`` GARCH(1,1) paths (α 0.08, β 0.89) with bivariate-t innovations (ν = 5,
    unit variance, correlation ``rho``), 1% a day, equal means: pairs with equal Sharpe ratios."""
    rng = np.random.default_rng(seed)
    total = n + 100
    g = rng.standard_normal((total, n_pairs, 2))
    g[..., 1] = rho * g[..., 0] + math.sqrt(1.0 - rho * rho) * g[..., 1]
    z = g * np.sqrt((nu - 2.0) / rng.chisquare(nu, (total, n_pairs, 1)))
    var = np.ones((n_pairs, 2))
    out = np.empty((total, n_pairs, 2))
    for t in range(total):
        shock = np.sqrt(var) * z[t]
        out[t] = shock
        var = 0.03 + 0.08 * shock * shock + 0.89 * var
    r = 0.0003 + 0.01 * out[100:]
    return r[..., 0].T.copy(), r[..., 1].T.copy()


def _reference_bootstrap(
    x: np.ndarray, y: np.ndarray, block: int, n_resamples: int, seed: int
) -> tuple[float, float]:
    """Ledoit & Wolf's studentised circular block bootstrap written out bar by bar (one-sided
    p-value of their Remark 3.2 and the observed statistic), for ``n_resamples <= 1000`` (one
    draw of block starts, as the library draws a chunk)."""
    n = x.size

    def sharpe(r: np.ndarray) -> float:
        return float(r.mean() / r.std(ddof=1))

    def influence(r: np.ndarray) -> np.ndarray:
        sd = r.std()
        u = (r - r.mean()) / sd
        return u - 0.5 * (r.mean() / sd) * (u * u - 1.0)

    d_hat = sharpe(x) - sharpe(y)
    v = influence(x) - influence(y)
    sums = [sum(v[(i + j) % n] for j in range(block)) for i in range(n)]
    t_obs = d_hat / math.sqrt(sum(s * s for s in sums) / (block * n * n))
    starts = np.random.default_rng(seed).integers(0, n, size=(n_resamples, -(-n // block)))
    count = 0
    for row in starts:
        idx = np.array([(s + j) % n for s in row for j in range(block)][:n])
        xs, ys = x[idx], y[idx]
        w = influence(xs) - influence(ys)
        se = math.sqrt(sum(w[k : k + block].sum() ** 2 for k in range(0, n, block))) / n
        count += (sharpe(xs) - sharpe(ys) - d_hat) / se >= t_obs
    return (1.0 + count) / (n_resamples + 1.0), t_obs


def test_bootstrap_p_value_equals_a_direct_reimplementation() -> None:
    x, y = _garch_t_pairs(1, 350, 0.9, 5)
    x, y = x[0] + 0.0004, y[0]  # a difference, so the p-value is away from 1/2
    got = S.sharpe_difference_bootstrap(x, y, PPY, n_resamples=999, block=9, seed=17)
    p, t = _reference_bootstrap(x, y, 9, 999, 17)
    assert got.p_one_sided == p and got.statistic == pytest.approx(t, rel=1e-10)
    assert 0.0 < p < 0.2 and got.method == "ledoit-wolf-bootstrap"


def test_block_variance_is_the_circular_bartlett_long_run_variance() -> None:
    v = np.random.default_rng(3).standard_normal(200)
    v -= v.mean()
    for block in (1, 2, 7, 50):
        gamma = [float(v @ np.roll(v, -j)) / v.size for j in range(block)]
        lrv = gamma[0] + 2.0 * sum((1.0 - j / block) * gamma[j] for j in range(1, block))
        assert block_variance(v, block) == pytest.approx(lrv / v.size, rel=1e-12)


def test_the_default_block_is_politis_white_but_at_least_the_cube_root_of_the_length() -> None:
    rng = np.random.default_rng(4)
    x = 0.01 * rng.standard_normal(350)  # iid: Politis–White picks a short block
    y = 0.9 * x + 0.004 * rng.standard_normal(350)
    pw = optimal_block_length(np.column_stack([x, y, x * x, y * y]))["circular"].max()
    assert math.ceil(pw) < min_block_length(350) == 7
    chosen = S.sharpe_difference_bootstrap(x, y, PPY, n_resamples=300, seed=1)
    assert chosen == S.sharpe_difference_bootstrap(x, y, PPY, n_resamples=300, block=7, seed=1)
    assert min_block_length(1250) == 11 and min_block_length(5000) == 17


def test_identical_records_give_one_half_not_an_edge() -> None:
    x = _garch_t_pairs(1, 350, 0.9, 6)[0][0]
    for same in (x, 2.0 * x):  # 2x: same Sharpe ratio, same standardised returns
        test = S.paired_sharpe_test(x, same, PPY)
        assert test.method == "ledoit-wolf-bootstrap"
        assert (test.diff, test.statistic, test.p_one_sided) == (0.0, 0.0, 0.5)
        assert not S.verdict(test, 1, "B").claim


def test_the_verdicts_test_is_chosen_by_length_and_seeded() -> None:
    x, y = _garch_t_pairs(1, S.SMALL_SAMPLE_BARS, 0.9, 7)
    x, y = x[0], y[0] + 0.0003  # p about 0.15
    short = S.paired_sharpe_test(x[:-1], y[:-1], PPY, seed=3)
    assert short == S.sharpe_difference_bootstrap(x[:-1], y[:-1], PPY, n_resamples=5000, seed=3)
    assert short == S.paired_sharpe_test(x[:-1], y[:-1], PPY, seed=3)
    assert short.p_one_sided != S.paired_sharpe_test(x[:-1], y[:-1], PPY, seed=4).p_one_sided
    assert S.paired_sharpe_test(x, y, PPY, seed=3) == S.sharpe_difference_hac(x, y, PPY)


def test_verdict_line_names_the_test() -> None:
    x, y = _garch_t_pairs(1, 350, 0.9, 8)
    text = S.verdict(S.paired_sharpe_test(x[0], y[0], PPY), 1, "B").text
    assert "one-sided p = " in text and " by the small-sample bootstrap test, adjusted" in text


def test_on_short_garch_records_the_verdicts_test_holds_its_size_where_hac_does_not() -> None:
    """600 equal-Sharpe GARCH(1,1)-t pairs of 120 bars: the verdict's test (the bootstrap, 199
    resamples) rejects at most 5% + 2 Monte Carlo SEs of them at 5%, the HAC test more (9.3%:
    its long-run variance from 120 heavy-tailed, clustered bars is too small too often)."""
    x, y = _garch_t_pairs(600, 120, 0.9, 1)
    bound = 0.05 + 2.0 * math.sqrt(0.05 * 0.95 / 600)
    chosen = [
        S.paired_sharpe_test(a, b, PPY, seed=i, n_resamples=199)
        for i, (a, b) in enumerate(zip(x, y, strict=True))
    ]
    assert {t.method for t in chosen} == {"ledoit-wolf-bootstrap"}
    size = np.mean([t.p_one_sided < 0.05 for t in chosen])
    hac = np.mean([S.sharpe_difference_hac(a, b, PPY).p_one_sided < 0.05 for a, b in zip(x, y)])
    assert size <= bound < hac
