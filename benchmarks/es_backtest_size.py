"""Size and power of the ES backtests (Kupiec's POF, Acerbi & Székely's Z2) on GARCH(1,1)-t records.

Each record is one GARCH(1,1) return path with Student-t innovations (ν = 5, unit variance),
α = 0.08, β = 0.89 (persistence 0.97), unconditional volatility 1% a day — the paths of
``benchmarks/stats_calibration.py`` — with ``--history`` bars before ``--bars`` out-of-sample
bars. A forecast is made at every ``h``-th out-of-sample bar for the sum of the next ``h``
returns (non-overlapping windows: ``--bars / h`` per record), at VaR/ES level 5%:

* **true**: the true conditional VaR and ES. ``h = 1``: ``σ_t`` times the unit-variance t's
  (:func:`riskppo.stats.standard_var_es`), null the scaled t itself. ``h > 1``: the sum's law
  given ``σ²_{t+1}`` has no closed form; it is simulated once per point of a grid of
  ``--grid`` starting variances (log-spaced over 0.15–15 times the unconditional one,
  ``--paths`` paths each) and a window takes its nearest grid point (at most 1.5% off in
  ``σ²_{t+1}``, less in the sum's spread): VaR the pool's ``⌈α M⌉``-th lowest sum, ES the
  mean of those, null a draw from that pool — so the forecast is right up to the grid.
* **understated by 30%**: the same forecasts (and the forecaster's null) times 0.7.
* **overlay FHS**: the risk overlay's own forecast (:mod:`riskppo.envs.execution.overlay`,
  default spans, ``min_history`` 250, margin 1) of a unit held long, tested as
  ``riskppo walkforward`` does (:mod:`riskppo.evaluation.limit_backtest`).

Reported: the rejection rate of each test at 5% (Kupiec two-sided, χ²(1); Z2 one-sided, its
p-value from ``--sims`` simulations under the forecaster's null) with its Monte Carlo standard
error, and the mean number of exceedances. Seeded; numpy only.

    python benchmarks/es_backtest_size.py                      # 500 records per scenario
    python benchmarks/es_backtest_size.py --records 100 --sims 200     # quicker look
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

from riskppo.envs.execution.overlay import RiskOverlay, unit_forecast
from riskppo.evaluation.limit_backtest import record_windows
from riskppo.stats import (
    EmpiricalNull,
    ForecastRecord,
    ParametricNull,
    es_backtest,
    standard_var_es,
)

NU = 5.0
A, B = 0.08, 0.89
DAILY_VOL = 0.01
OMEGA = DAILY_VOL**2 * (1.0 - A - B)
TAIL = 0.05
UNDERSTATE = 0.7
BURN_IN = 250


def t_innovations(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_t(NU, shape) * math.sqrt((NU - 2.0) / NU)


def simulate(n_records: int, n_bars: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``[R, n_bars]`` returns and their conditional variances (``var[:, t]`` known after
    return ``t - 1``), after a burn-in from the unconditional variance."""
    rng = np.random.default_rng(seed)
    eps = t_innovations(rng, (BURN_IN + n_bars, n_records))
    var = np.full(n_records, DAILY_VOL**2)
    r, v = np.empty((BURN_IN + n_bars, n_records)), np.empty((BURN_IN + n_bars, n_records))
    for t in range(BURN_IN + n_bars):
        v[t] = var
        r[t] = np.sqrt(var) * eps[t]
        var = OMEGA + A * r[t] * r[t] + B * var
    return r[BURN_IN:].T.copy(), v[BURN_IN:].T.copy()


class SumGrid(NamedTuple):
    """``h``-bar sums simulated from each starting variance ``start[g]``: ``pool`` ``[G * M]``
    (grid point ``g`` owns ``[g M, (g+1) M)``), and each point's VaR and ES ``[G]``."""

    start: np.ndarray
    pool: np.ndarray
    var: np.ndarray
    es: np.ndarray
    paths: int


def sum_grid(h: int, n_grid: int, paths: int, seed: int) -> SumGrid:
    """The law of the next ``h`` returns' sum given the next return's variance (module
    docstring)."""
    rng = np.random.default_rng(seed)
    start = DAILY_VOL**2 * np.exp(np.linspace(math.log(0.15), math.log(15.0), n_grid))
    var = np.repeat(start[:, None], paths, axis=1)
    total = np.zeros_like(var)
    for _ in range(h):
        r = np.sqrt(var) * t_innovations(rng, var.shape)
        total += r
        var = OMEGA + A * r * r + B * var
    pool = np.sort(total, axis=1)
    m = math.ceil(TAIL * paths)
    return SumGrid(start, pool.ravel(), pool[:, m - 1], pool[:, :m].mean(axis=1), paths)


def true_records(
    r: np.ndarray, v: np.ndarray, h: int, grid: SumGrid | None, k: float
) -> list[ForecastRecord]:
    """Per record: the windows' realised sums and the true forecasts times ``k`` (with the
    forecaster's null scaled the same way)."""
    n = r.shape[1] // h
    starts = np.arange(n) * h
    sums = r[:, : n * h].reshape(len(r), n, h).sum(axis=2)
    out = []
    for i in range(len(r)):
        s2 = v[i, starts]
        if h == 1:
            q, e = standard_var_es(TAIL, NU)
            scale = np.sqrt(s2) * k
            out.append(ForecastRecord(sums[i], q * scale, e * scale, ParametricNull(scale, NU)))
            continue
        assert grid is not None
        g = np.abs(np.log(grid.start)[None, :] - np.log(s2)[:, None]).argmin(axis=1)
        null = EmpiricalNull(grid.pool, g * grid.paths, (g + 1) * grid.paths, np.full(n, k))
        out.append(ForecastRecord(sums[i], grid.var[g] * k, grid.es[g] * k, null))
    return out


def overlay_records(r: np.ndarray, history: int, n_bars: int, h: int) -> list[ForecastRecord]:
    """Per record: the overlay's FHS forecast of one unit held long, on every ``h``-th of the
    ``n_bars`` bars after ``history`` (the closes before are its history; ``r`` runs ``h`` bars
    past them, the last window's outcome)."""
    ov = RiskOverlay(limit=-0.04, alpha=TAIL, horizon=h, min_history=250)
    bars = np.arange(history, history + n_bars)
    out = []
    for path in r:
        close = 100.0 * np.exp(np.concatenate([[0.0], np.cumsum(path)]))
        f = unit_forecast(close, ov, delay=0)
        out.append(record_windows(f, h, ov.min_history, bars, np.ones(n_bars)).record)
    return out


def rates(records: list[ForecastRecord], sims: int, seed: int) -> dict[str, float]:
    tests = [es_backtest(rec, TAIL, n_sims=sims, seed=seed + i) for i, rec in enumerate(records)]
    return {
        "kupiec": float(np.mean([t.kupiec.reject for t in tests])),
        "z2": float(np.mean([t.z2.reject for t in tests])),
        "hits": float(np.mean([t.kupiec.exceedances for t in tests])),
        "windows": float(np.mean([t.kupiec.n for t in tests])),
    }


Scenario = tuple[str, int, Callable[[], list[ForecastRecord]]]


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    """(forecast, h, its records) of every row; the records are made when the row runs."""
    n_total = args.history + args.bars
    r, v = simulate(args.records, n_total + 20, args.seed)
    oos_r, oos_v = r[:, args.history : n_total], v[:, args.history : n_total]
    grid = sum_grid(20, args.grid, args.paths, args.seed + 1)
    out: list[Scenario] = []
    for h in (1, 20):
        g = grid if h == 20 else None

        def true(k: float, h: int = h, g: SumGrid | None = g) -> list[ForecastRecord]:
            return true_records(oos_r, oos_v, h, g, k)

        def fhs(h: int = h) -> list[ForecastRecord]:
            return overlay_records(r[:, : n_total + h], args.history, args.bars, h)

        out.append(("true conditional VaR/ES", h, lambda true=true: true(1.0)))
        out.append((f"understated by {1 - UNDERSTATE:.0%}", h, lambda true=true: true(UNDERSTATE)))
        out.append(("overlay FHS (margin 1)", h, fhs))
    return out


def main() -> None:
    parser = BenchParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int_at_least(10), default=500)
    parser.add_argument("--bars", type=int_at_least(20), default=2000)
    parser.add_argument("--history", type=int_at_least(400), default=1000)
    parser.add_argument("--sims", type=int_at_least(99), default=500)
    parser.add_argument("--grid", type=int_at_least(10), default=160)
    parser.add_argument("--paths", type=int_at_least(1000), default=20000)
    parser.add_argument("--seed", type=non_negative_int, default=20250101)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = []

    def cell(p: float) -> str:
        return f"{100 * p:.1f}% ± {100 * math.sqrt(p * (1 - p) / args.records):.1f}"

    for name, h, make in scenarios(args):
        res = rates(make(), args.sims, args.seed)
        hits = f"{res['hits']:.2f} / {TAIL * res['windows']:.1f}"
        rows.append(
            [name, str(h), f"{res['windows']:.0f}", hits, cell(res["kupiec"]), cell(res["z2"])]
        )
    print(
        f"GARCH(1,1)-t records: nu={NU:g}, alpha={A}, beta={B}, daily vol {DAILY_VOL:.0%}; "
        f"{args.bars} out-of-sample bars after {args.history}, {args.records} records per "
        f"scenario, Z2 p-values from {args.sims} simulations, VaR/ES at {TAIL:.0%}, "
        f"seed {args.seed}"
    )
    header = [
        "forecast",
        "h",
        "windows",
        "exceedances: mean / expected",
        "Kupiec rejects (5%)",
        "Z2 rejects (5%)",
    ]
    print(table(rows, header))
    print(f"wall time {time.perf_counter() - start:.0f} s (1 process)")


if __name__ == "__main__":
    sys.exit(run_main(main))
