"""Size and power of the paired Sharpe-difference tests on GARCH(1,1)-t return pairs.

Each simulated pair is two GARCH(1,1) return paths of ``--bars`` daily bars with Student-t
innovations (ν = 5, standardised to unit variance), α = 0.08, β = 0.89 (persistence 0.97, a
typical daily equity fit), unconditional volatility 1% a day (about 16% a year), and innovations
correlated ``--rho`` through a bivariate t (one shared χ² mixing variable)::

    r_i,t = μ_i + σ_i,t z_i,t,   σ²_i,t+1 = ω + α (r_i,t - μ_i)² + β σ²_i,t

The unconditional variance is ``ω / (1 - α - β)`` exactly, so the true Sharpe ratio of a path is
``μ_i / σ × sqrt(252)``: the means are set to give annual Sharpe ratios 0.5 and 0.5 (size) or
1.0 and 0.5 (power; a difference of 0.5, ``Δμ = 0.5 σ / sqrt(252)``). Every path starts at the
unconditional variance and drops a 250-bar burn-in.

Reported for every record length in ``--bars`` and correlation in ``--rho``, per test: the
rejection rate of the nominal 5% one-sided test (H1: Sharpe(a) > Sharpe(b)) under equal Sharpe
ratios (size) and under the 0.5 difference (power), each with its Monte Carlo standard error
``sqrt(p(1-p)/pairs)``. The tests: Jobson–Korkie–Memmel, Ledoit–Wolf HAC, the studentised
circular block bootstrap (``--resamples`` resamples, seeded by the pair's index) and **the
verdict's own** :func:`riskppo.stats.paired_sharpe_test` ("the verdict's"), which takes the
bootstrap below :data:`riskppo.stats.SMALL_SAMPLE_BARS` bars and HAC from there on (its target:
size ≤ 5.5% on a short record, ≤ 6.5% and power ≥ 75% at 1,250 bars and correlation 0.9). On the
verdict's row, the power a z-test would have if it knew the true standard error of the Sharpe
difference (its spread over the null pairs). Seeded per setting; vectorised over pairs.

    python benchmarks/stats_calibration.py                       # 1,000 pairs, all six settings
    python benchmarks/stats_calibration.py --bars 350 --rho 0.9 --pairs 2000
    python benchmarks/stats_calibration.py --pairs 200 --resamples 499   # quicker look
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from _common import BenchParser, int_at_least, non_negative_int, run_main, table
from scipy import stats as sps

from riskppo.stats import (
    SMALL_SAMPLE_BARS,
    PairedTest,
    paired_sharpe_test,
    sharpe_difference_bootstrap,
    sharpe_difference_hac,
    sharpe_difference_test,
)

PPY = 252
NU = 5.0
ALPHA, BETA = 0.08, 0.89
DAILY_VOL = 0.01
OMEGA = DAILY_VOL**2 * (1.0 - ALPHA - BETA)
BURN_IN = 250
NOMINAL = 0.05
MIN_BARS = 8  # the block bootstrap's automatic block length (arch's optimal_block_length) needs 8
BARS = (350, 1250, 5000)
RHOS = (0.9, 0.99)

Test = Callable[[np.ndarray, np.ndarray, int, int], PairedTest]
"""A paired test of one pair ``(a [T], b [T], pair index, resamples)``."""

TESTS: dict[str, Test] = {
    "Jobson-Korkie-Memmel": lambda a, b, i, r: sharpe_difference_test(a, b, PPY),
    "Ledoit-Wolf HAC": lambda a, b, i, r: sharpe_difference_hac(a, b, PPY),
    "studentised block bootstrap": lambda a, b, i, r: sharpe_difference_bootstrap(
        a, b, PPY, n_resamples=r, seed=i
    ),
    "the verdict's": lambda a, b, i, r: paired_sharpe_test(a, b, PPY, seed=i, n_resamples=r),
}

SHORT = {"ledoit-wolf-bootstrap": "bootstrap", "ledoit-wolf-hac": "HAC"}
"""The verdict's choice (:attr:`PairedTest.method`) as its table row names it."""


class Setting(NamedTuple):
    """One record length and correlation: rejection rates per test, the oracle's power."""

    bars: int
    rho: float
    pairs: int
    size: dict[str, float]
    power: dict[str, float]
    oracle_power: float
    verdict_method: str


def simulate_pairs(
    n_pairs: int, n_bars: int, sharpe_a: float, sharpe_b: float, rho: float, seed: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """``[n_pairs, n_bars]`` return paths a and b with true annual Sharpe ratios as given and
    innovations correlated ``rho``."""
    rng = np.random.default_rng(seed)
    mu = np.array([sharpe_a, sharpe_b]) * DAILY_VOL / math.sqrt(PPY)
    chol = np.linalg.cholesky(np.array([[1.0, rho], [rho, 1.0]]))
    total = n_bars + BURN_IN
    gauss = rng.standard_normal((total, n_pairs, 2)) @ chol.T
    mix = np.sqrt((NU - 2.0) / rng.chisquare(NU, size=(total, n_pairs, 1)))
    z = gauss * mix  # bivariate t, unit variances, correlation rho
    var = np.full((n_pairs, 2), DAILY_VOL**2)
    out = np.empty((total, n_pairs, 2))
    for t in range(total):
        shock = np.sqrt(var) * z[t]
        out[t] = mu + shock
        var = OMEGA + ALPHA * shock * shock + BETA * var
    kept = out[BURN_IN:]
    return kept[:, :, 0].T.copy(), kept[:, :, 1].T.copy()


def rejection_rates(a: np.ndarray, b: np.ndarray, resamples: int) -> dict[str, float]:
    """Share of pairs where each test rejects at the nominal one-sided level."""
    hits = dict.fromkeys(TESTS, 0)
    for i in range(a.shape[0]):
        for name, test in TESTS.items():
            hits[name] += test(a[i], b[i], i, resamples).p_one_sided < NOMINAL
    return {name: count / a.shape[0] for name, count in hits.items()}


def oracle_power(a: np.ndarray, b: np.ndarray) -> float:
    """Power at the 0.5 difference of a one-sided z-test that knew the true standard error of
    the annual Sharpe difference (its spread across the equal-Sharpe pairs): the ceiling for a
    test built on this estimator at this sample size."""
    diff = a.mean(axis=1) / a.std(axis=1, ddof=1) - b.mean(axis=1) / b.std(axis=1, ddof=1)
    sd = float(np.std(diff * math.sqrt(PPY), ddof=1))
    return float(sps.norm.cdf(0.5 / sd - sps.norm.ppf(1.0 - NOMINAL)))


def run_setting(bars: int, rho: float, pairs: int, resamples: int, seed: int) -> Setting:
    """Size and power of every test at one record length and correlation."""
    key = [seed, bars, round(rho * 1000)]
    a0, b0 = simulate_pairs(pairs, bars, 0.5, 0.5, rho, [*key, 0])
    a1, b1 = simulate_pairs(pairs, bars, 1.0, 0.5, rho, [*key, 1])
    method = paired_sharpe_test(a0[0], b0[0], PPY, n_resamples=100).method
    return Setting(
        bars=bars,
        rho=rho,
        pairs=pairs,
        size=rejection_rates(a0, b0, resamples),
        power=rejection_rates(a1, b1, resamples),
        oracle_power=oracle_power(a0, b0),
        verdict_method=method,
    )


def cell(p: float, n: int) -> str:
    """A rejection rate with its Monte Carlo standard error, in percent."""
    return f"{100 * p:.1f}% ± {100 * math.sqrt(p * (1 - p) / n):.1f}"


def setting_rows(s: Setting) -> list[list[str]]:
    """One table row per test of a setting; the verdict's row names the test it chose and
    carries the setting's true-SE power."""
    rows = []
    for name in TESTS:
        verdicts = name.startswith("the verdict's")
        rows.append(
            [
                f"{s.bars:,}",
                f"{s.rho:g}",
                f"{name} (= {SHORT[s.verdict_method]})" if verdicts else name,
                cell(s.size[name], s.pairs),
                cell(s.power[name], s.pairs),
                f"{s.oracle_power:.0%}" if verdicts else "",
            ]
        )
    return rows


def correlation(text: str) -> float:
    """An argparse type: an innovation correlation in (-1, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not -1.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a correlation in (-1, 1), got {value:g}")
    return value


def main() -> None:
    parser = BenchParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int_at_least(2), default=1000)
    parser.add_argument("--bars", type=int_at_least(MIN_BARS), nargs="+", default=list(BARS))
    parser.add_argument("--rho", type=correlation, nargs="+", default=list(RHOS))
    parser.add_argument("--resamples", type=int_at_least(100), default=999)
    parser.add_argument("--seed", type=non_negative_int, default=20250101)
    args = parser.parse_args()
    start = time.perf_counter()
    print(
        f"GARCH(1,1)-t pairs: nu={NU:g}, alpha={ALPHA}, beta={BETA}, daily vol {DAILY_VOL:.0%}; "
        f"{args.pairs} pairs per scenario, bootstrap {args.resamples} resamples, seed "
        f"{args.seed}; the verdict's test: the bootstrap below {SMALL_SAMPLE_BARS:,} bars, HAC "
        "from there on",
        flush=True,
    )
    rows: list[list[str]] = []
    for bars in args.bars:
        for rho in args.rho:
            tic = time.perf_counter()
            rows += setting_rows(run_setting(bars, rho, args.pairs, args.resamples, args.seed))
            print(f"  {bars} bars, rho {rho:g}: {time.perf_counter() - tic:.0f} s", flush=True)
    header = [
        "bars",
        "innovation corr",
        "test (one-sided, nominal 5%)",
        "size: SR 0.5 vs 0.5",
        "power: SR 1.0 vs 0.5",
        "power, true SE",
    ]
    print(table(rows, header))
    print(f"wall time {time.perf_counter() - start:.0f} s (1 process)")


if __name__ == "__main__":
    sys.exit(run_main(main))
