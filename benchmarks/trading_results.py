"""Test-period results of the default trading configs over several seeds (SPEC §10, R-TRADE-3).

For each dataset config and seed: train with the config as shipped (nothing tuned on the test
period), backtest on the held-out test split, then print mean ± std over seeds of the agent and
both baselines (the baselines are deterministic, so their std is 0).

    python benchmarks/trading_results.py --seeds 0 1 2 --configs trading_googl trading_eurusd
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import table

from riskppo.cli import preset_path
from riskppo.config import Config, apply_overrides
from riskppo.evaluation.metrics import aggregate_metrics
from riskppo.train.runner import train_run

KEYS = ["sharpe", "sortino", "max_drawdown", "cvar_95", "annual_return", "turnover"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--configs", nargs="+", default=["trading_googl", "trading_eurusd"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="runs/trading_results")
    p.add_argument("--set", action="append", default=[], help="extra overrides for every run")
    a = p.parse_args()
    rows = []
    summary = {}
    for name in a.configs:
        runs = []
        for seed in a.seeds:
            cfg = apply_overrides(
                Config.from_yaml(preset_path(f"{name}.yaml")), [f"seed={seed}", *a.set]
            )
            run_dir = Path(a.out) / f"{name}-s{seed}"
            train_run(cfg, run_dir, progress_bar=False)
            runs.append(json.loads((run_dir / "backtest_test" / "metrics.json").read_text()))
        agg = aggregate_metrics(runs)
        summary[name] = agg
        for strategy in ("agent", "buy_and_hold", "sma_crossover"):
            cells = []
            for key in KEYS:
                s = agg[strategy][key]
                cells.append(
                    "—" if s["mean"] is None
                    else f"{s['mean']:.3f} ± {s['std']:.3f}" if s["std"] is not None
                    else f"{s['mean']:.3f}"
                )  # fmt: skip
            rows.append([name.removeprefix("trading_"), strategy, *cells])
    print(f"test period, after costs, seeds {a.seeds} (mean ± std over seeds)")
    print(table(rows, ["data", "strategy", *KEYS]))
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "summary.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
