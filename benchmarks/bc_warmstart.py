"""Warm start from a strategy (R-ALG-12): the default GOOGL agent trained from scratch
vs warm-started by behaviour cloning of vol-targeted buy-and-hold, several seeds each, measured
on the validation split (the test split is only reported, never used to choose).

The warm start is the teacher source: the agent's own observations labelled with the
vol-targeted buy-and-hold's action (``bc.source=teacher``, ``bc.teacher=vol_target_buy_and_hold``),
``bc.bc_coef`` decaying linearly to 0 over ``--decay-steps`` so PPO takes over under the CVaR
constraint. Per seed and variant: share of bars in the market, the horizon CVaR against the
limit, Sharpe (``benchmarks/trading_results.py`` metrics), and the vol-targeted buy-and-hold's.

    python benchmarks/bc_warmstart.py --seeds 0 1 2 --steps 200000 --bc-coef 5
    python benchmarks/bc_warmstart.py --seeds 0 --steps 4096        # smoke test
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from _common import BenchParser, non_negative_int, positive_int, run_main, table

from riskppo.cli.main import load_config
from riskppo.cli.runner import train_run
from riskppo.config import apply_overrides
from riskppo.evaluation.backtest import backtest_run

KEYS = ("market_share", "cvar_horizon", "cvar_limit_met", "sharpe", "mean_abs_exposure")


def variants(a: argparse.Namespace) -> dict[str, list[str]]:
    warm = [
        "bc.source=teacher",
        "bc.teacher=vol_target_buy_and_hold",
        f"bc.bc_coef={a.bc_coef}",
        f"bc.decay_steps={a.decay_steps}",
    ]
    return {"scratch": [], "warm_vt_bh": warm}


def run_one(name: str, sets: list[str], seed: int, a: argparse.Namespace) -> dict[str, Any]:
    run_dir = Path(a.out) / f"{name}-s{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cfg = apply_overrides(
        load_config(None, []), [f"seed={seed}", f"total_timesteps={a.steps}", *sets]
    )
    train_run(cfg, run_dir, progress_bar=False)
    out = backtest_run(run_dir, split=a.split).out_dir
    metrics = json.loads((out / "metrics.json").read_text())
    row = {k: metrics["agent"][k] for k in KEYS}
    row["vt_bh"] = {k: metrics["vol_target_buy_and_hold"][k] for k in KEYS}
    row["cvar_limit"] = metrics["agent"]["cvar_limit"]
    return row


def main() -> None:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=positive_int, default=200_000, help="total_timesteps per run")
    p.add_argument("--bc-coef", type=float, default=1.0)
    p.add_argument(
        "--decay-steps", type=positive_int, default=None, help="default: half of --steps"
    )
    p.add_argument("--split", choices=("val", "test"), default="val")
    p.add_argument("--out", default="runs/bc_warmstart")
    a = p.parse_args()
    a.decay_steps = a.decay_steps or a.steps // 2
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for name, sets in variants(a).items():
        results[name] = {s: run_one(name, sets, s, a) for s in a.seeds}
    rows = [
        [name, str(s), *(_fmt(r[k]) for k in KEYS)]
        for name, per in results.items()
        for s, r in per.items()
    ]
    first = next(iter(results["scratch"].values()))
    rows.append(["vol_target_buy_and_hold", "—", *(_fmt(first["vt_bh"][k]) for k in KEYS)])
    print(f"\n{a.split} split, {a.steps:,} steps per run, CVaR limit {first['cvar_limit']}")
    print(table(rows, ["variant", "seed", *KEYS]))
    Path(a.out).mkdir(parents=True, exist_ok=True)
    summary = {"args": vars(a), "results": results}
    (Path(a.out) / "summary.json").write_text(json.dumps(summary, indent=2, default=str))


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    return f"{v:.3f}"


if __name__ == "__main__":
    sys.exit(run_main(main))
