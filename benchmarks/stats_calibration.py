"""Size and power of the paired Sharpe-difference tests on GARCH(1,1)-t return pairs.

Each simulated pair is two GARCH(1,1) return paths of ``--bars`` daily bars with Student-t
innovations (ν = 5, standardised to unit variance), α = 0.08, β = 0.89 (persistence 0.97, a
typical daily equity fit), unconditional volatility 1% a day (about 16% a year), and innovations
correlated 0.9 through a bivariate t (one shared χ² mixing variable)::

    r_i,t = μ_i + σ_i,t z_i,t,   σ²_i,t+1 = ω + α (r_i,t - μ_i)² + β σ²_i,t

The unconditional variance is ``ω / (1 - α - β)`` exactly, so the true Sharpe ratio of a path is
``μ_i / σ × sqrt(252)``: the means are set to give annual Sharpe ratios 0.5 and 0.5 (size) or
1.0 and 0.5 (power; a difference of 0.5, ``Δμ = 0.5 σ / sqrt(252)``). Every path starts at the
unconditional variance and drops a 250-bar burn-in.

Reported per test variant: the rejection rate of the nominal 5% one-sided test
(H1: Sharpe(a) > Sharpe(b)) under equal Sharpe ratios (target <= 6.5%) and under the 0.5
difference (target >= 75%), with the Monte Carlo standard error. Seeded; vectorised over pairs;
the bootstrap uses ``--resamples`` resamples per pair.

    python benchmarks/stats_calibration.py                  # 1,000 pairs per scenario
    python benchmarks/stats_calibration.py --pairs 200 --resamples 499   # quicker look
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
from _common import BenchParser, int_at_least, non_negative_int, run_main, table
from scipy import stats as sps

from riskppo.stats import (
    sharpe_difference_bootstrap,
    sharpe_difference_hac,
    sharpe_difference_test,
)

PPY = 252
NU = 5.0
ALPHA, BETA = 0.08, 0.89
DAILY_VOL = 0.01
OMEGA = DAILY_VOL**2 * (1.0 - ALPHA - BETA)
CORR = 0.9
BURN_IN = 250
NOMINAL = 0.05
MIN_BARS = 8  # the block bootstrap's automatic block length (arch's optimal_block_length) needs 8


def simulate_pairs(
    n_pairs: int, n_bars: int, sharpe_a: float, sharpe_b: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``[n_pairs, n_bars]`` return paths a and b with true annual Sharpe ratios as given."""
    rng = np.random.default_rng(seed)
    mu = np.array([sharpe_a, sharpe_b]) * DAILY_VOL / math.sqrt(PPY)
    chol = np.linalg.cholesky(np.array([[1.0, CORR], [CORR, 1.0]]))
    total = n_bars + BURN_IN
    gauss = rng.standard_normal((total, n_pairs, 2)) @ chol.T
    mix = np.sqrt((NU - 2.0) / rng.chisquare(NU, size=(total, n_pairs, 1)))
    z = gauss * mix  # bivariate t, unit variances, correlation CORR
    var = np.full((n_pairs, 2), DAILY_VOL**2)
    out = np.empty((total, n_pairs, 2))
    for t in range(total):
        shock = np.sqrt(var) * z[t]
        out[t] = mu + shock
        var = OMEGA + ALPHA * shock * shock + BETA * var
    kept = out[BURN_IN:]
    return kept[:, :, 0].T.copy(), kept[:, :, 1].T.copy()


def rejection_rates(a: np.ndarray, b: np.ndarray, resamples: int) -> dict[str, float]:
    """Share of pairs where each variant rejects at the nominal one-sided level."""
    hits = {"Jobson-Korkie-Memmel": 0, "Ledoit-Wolf HAC": 0, "studentised block bootstrap": 0}
    for i in range(a.shape[0]):
        tests = (
            sharpe_difference_test(a[i], b[i], PPY),
            sharpe_difference_hac(a[i], b[i], PPY),
            sharpe_difference_bootstrap(a[i], b[i], PPY, n_resamples=resamples, seed=i),
        )
        for name, test in zip(hits, tests):
            hits[name] += test.p_one_sided < NOMINAL
    return {name: count / a.shape[0] for name, count in hits.items()}


def oracle_power(a: np.ndarray, b: np.ndarray) -> float:
    """Power at the 0.5 difference of a one-sided z-test that knew the true standard error of
    the annual Sharpe difference (its spread across the equal-Sharpe pairs): the ceiling for a
    test built on this estimator at this sample size."""
    diff = a.mean(axis=1) / a.std(axis=1, ddof=1) - b.mean(axis=1) / b.std(axis=1, ddof=1)
    sd = float(np.std(diff * math.sqrt(PPY), ddof=1))
    return float(sps.norm.cdf(0.5 / sd - sps.norm.ppf(1.0 - NOMINAL)))


def main() -> None:
    parser = BenchParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int_at_least(2), default=1000)
    parser.add_argument("--bars", type=int_at_least(MIN_BARS), default=1250)
    parser.add_argument("--resamples", type=int_at_least(100), default=999)
    parser.add_argument("--seed", type=non_negative_int, default=20250101)
    args = parser.parse_args()
    start = time.perf_counter()
    a0, b0 = simulate_pairs(args.pairs, args.bars, 0.5, 0.5, args.seed)
    a1, b1 = simulate_pairs(args.pairs, args.bars, 1.0, 0.5, args.seed + 1)
    est = np.mean(a0.mean(axis=1) / a0.std(axis=1, ddof=1)) * math.sqrt(PPY)
    corr = np.mean([np.corrcoef(x, y)[0, 1] for x, y in zip(a0, b0)])
    oracle = oracle_power(a0, b0)
    size = rejection_rates(a0, b0, args.resamples)
    power = rejection_rates(a1, b1, args.resamples)
    wall = time.perf_counter() - start

    def cell(p: float) -> str:
        return f"{100 * p:.1f}% ± {100 * math.sqrt(p * (1 - p) / args.pairs):.1f}"

    rows = [
        [
            name,
            cell(size[name]),
            cell(power[name]),
            "yes" if size[name] <= 0.065 else "NO",
            "yes" if power[name] >= 0.75 else "NO",
        ]
        for name in size
    ]
    print(
        f"GARCH(1,1)-t pairs: nu={NU:g}, alpha={ALPHA}, beta={BETA}, daily vol {DAILY_VOL:.0%}, "
        f"innovation corr {CORR}, {args.bars} bars, {args.pairs} pairs per scenario, "
        f"bootstrap {args.resamples} resamples, seed {args.seed}"
    )
    print(
        f"under H0: mean estimated annual Sharpe of a {est:.3f} (true 0.500), mean return "
        f"correlation {corr:.3f}; a z-test knowing the true standard error would have power "
        f"{oracle:.1%}"
    )
    header = [
        "test (one-sided, nominal 5%)",
        "size: SR 0.5 vs 0.5",
        "power: SR 1.0 vs 0.5",
        "size <= 6.5%",
        "power >= 75%",
    ]
    print(table(rows, header))
    print(f"wall time {wall:.0f} s (1 process)")


if __name__ == "__main__":
    sys.exit(run_main(main))
