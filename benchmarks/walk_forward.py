"""Walk-forward choice of a trading config: several validation windows before the test split.

One validation period can flatter a config: the shipped GOOGL default met its CVaR limit on the
2016–2017 validation bars in 3/3 seeds and missed it on the 2014–2015 bars before them. This
script trains every *candidate* (the config plus a few ``--set`` overrides) on every *fold*
(train on all bars before a validation window of ``--val-width`` of the data, starting at each
``--folds`` fraction) for every seed, backtests the validation window only, and ranks the
candidates by a rule fixed before any run:

1. a candidate with any (fold, seed) cell in the market on fewer than half of the bars is out
   (a flat agent is a failure, not a low-risk result);
2. most cells meeting ``--limit`` (the horizon CVaR of the config, judged against this one limit
   whatever limit a candidate trains to);
3. then most cells with Sharpe ≥ vol-targeted buy-and-hold's;
4. then the higher mean Sharpe; an exact tie goes to the candidate listed first.

The test split is never read. A candidate may train to a tighter limit than it is judged
against (``risk.cvar_limit=-0.03`` judged at ``--limit -0.04``): a safety margin for a market
riskier out of sample than in it.

    python benchmarks/walk_forward.py --config trading_googl --folds 0.40 0.55 0.70 \\
        --candidate default --candidate long_only env.kwargs.long_only=true \\
        --candidate tight risk.cvar_limit=-0.03 --limit -0.04 --seeds 0 1 2

``--candidate NAME [SET ...]`` (no SET: the config as shipped). Runs go to
``OUT/NAME/val_FROM-TO/``; ``--reuse`` skips runs already finished there with the same config.
``--data-path`` runs on a user's CSV. Smoke test: ``--seeds 0 --set total_timesteps=4096``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import BenchError, BenchParser, non_negative_int, run_main, table
from trading_results import HOLDS_SHARE, Dataset, SeedRun, run_seed


@dataclass(frozen=True)
class Cell:
    """One (candidate, fold, seed) validation backtest, judged against the common limit."""

    fold: str
    seed: int
    sharpe: float
    vt_sharpe: float
    cvar: float
    market_share: float

    def holds(self) -> bool:
        return self.market_share >= HOLDS_SHARE

    def meets(self, limit: float) -> bool:
        return self.cvar >= limit

    def beats_vt(self) -> bool:
        return self.sharpe >= self.vt_sharpe


def cell(fold: str, run: SeedRun) -> Cell:
    agent, vt = run.metrics["agent"], run.metrics["vol_target_buy_and_hold"]
    return Cell(
        fold,
        run.seed,
        float(agent["sharpe"] or 0.0),
        float(vt["sharpe"] or 0.0),
        float(agent["cvar_horizon"]),
        float(agent["market_share"] or 0.0),
    )


def rank_key(cells: list[Cell], limit: float) -> tuple[bool, int, int, float]:
    """The declared rule (module doc) as a sort key, larger is better."""
    return (
        all(c.holds() for c in cells),
        sum(c.meets(limit) for c in cells),
        sum(c.beats_vt() for c in cells),
        statistics.fmean(c.sharpe for c in cells),
    )


def ranking(results: dict[str, list[Cell]], limit: float) -> list[str]:
    """Candidate names, best first; ``sorted`` is stable, so a tie keeps the listed order."""
    return sorted(results, key=lambda name: rank_key(results[name], limit), reverse=True)


def fold_split(start: float, width: float) -> list[float]:
    if not 0.0 < start < start + width < 1.0:
        raise SystemExit(f"--folds {start} with --val-width {width} leaves no test bars")
    return [round(start, 6), round(width, 6), round(1.0 - start - width, 6)]


def run_cells(name: str, sets: list[str], a: argparse.Namespace) -> list[Cell]:
    ds = Dataset(name, a.config, a.data_path)
    cells = []
    for start in a.folds:
        split = fold_split(start, a.val_width)
        fold = f"val_{start:.2f}-{start + a.val_width:.2f}"
        ns = argparse.Namespace(
            out=str(Path(a.out) / name / fold),
            split="val",
            reuse=a.reuse,
            set=[f"data.split={split}", *a.set, *sets],
        )
        cells += [cell(fold, run_seed(ds, seed, ns)) for seed in a.seeds]
    return cells


def candidate_table(results: dict[str, list[Cell]], limit: float) -> str:
    folds = list(dict.fromkeys(c.fold for cells in results.values() for c in cells))
    rows = []
    for name in ranking(results, limit):
        cells = results[name]
        per_fold = []
        for f in folds:
            fc = [c for c in cells if c.fold == f]
            sharpes = " · ".join(f"{c.sharpe:.2f}" for c in fc)
            cvars = " · ".join(f"{100 * c.cvar:.1f}" for c in fc)
            per_fold.append(f"{sum(c.meets(limit) for c in fc)}/{len(fc)} ({cvars}%) S {sharpes}")
        holds, met, beats, mean = rank_key(cells, limit)
        n = len(cells)
        rows.append([name, *per_fold, f"{met}/{n}", f"{beats}/{n}", f"{mean:.2f}", str(holds)])
    header = ["candidate", *folds, "limit met", "≥ VT B&H", "mean Sharpe", "trades"]
    return table(rows, header)


def baseline_lines(results: dict[str, list[Cell]]) -> str:
    """Vol-targeted buy-and-hold's Sharpe per fold at the first candidate's settings (each
    candidate is compared with its own, run at its own target)."""
    name, cells = next(iter(results.items()))
    seen = {c.fold: c.vt_sharpe for c in cells}
    per_fold = ", ".join(f"{f} {s:.2f}" for f, s in seen.items())
    return f"vol-targeted buy-and-hold Sharpe ({name}'s settings): {per_fold}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default="trading_googl")
    p.add_argument(
        "--candidate",
        action="append",
        nargs="+",
        required=True,
        metavar=("NAME", "SET"),
        help="a name and its overrides (key=value ...); repeat for each candidate",
    )
    p.add_argument("--folds", type=float, nargs="+", default=[0.40, 0.55, 0.70])
    p.add_argument("--val-width", type=float, default=0.15)
    p.add_argument("--limit", type=float, required=True, help="CVaR limit every cell is judged on")
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--data-path", type=Path, help="a user's OHLCV CSV instead of the config's data")
    p.add_argument("--set", action="append", default=[], help="overrides for every candidate")
    p.add_argument("--out", default="runs/walk_forward")
    p.add_argument("--reuse", action="store_true", help="do not retrain runs already in OUT")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    candidates = {name: sets for name, *sets in a.candidate}
    if len(candidates) < len(a.candidate) or any("=" in name for name in candidates):
        raise BenchError("--candidate: each needs a distinct NAME first, then its key=value sets")
    results = {name: run_cells(name, sets, a) for name, sets in candidates.items()}
    print(f"\nwalk-forward validation, config {a.config}, seeds {a.seeds}, judged at CVaR ≥ "
          f"{a.limit}; cells: limit met (CVaR % per seed) and Sharpe per seed")  # fmt: skip
    print(candidate_table(results, a.limit))
    print(baseline_lines(results))
    order = ranking(results, a.limit)
    print(f"chosen by the declared rule: {order[0]}")
    summary: dict[str, Any] = {
        "config": a.config,
        "limit": a.limit,
        "candidates": candidates,
        "ranking": order,
        "cells": {name: [vars(c) for c in cells] for name, cells in results.items()},
    }
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "summary.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(run_main(main))
