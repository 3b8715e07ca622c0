"""Trading PBT vs the same budget without PBT (issue: population-based training).

Both arms run ``configs/pbt_trading.yaml`` with the same seed, the same population, the same
initial hyperparameter draws and the same steps per member; the only difference is that the
baseline never exploits (``pbt.quantile=0``: independent runs, i.e. random search). Each arm
picks its best member on the validation period (R-PBT-4); that member is then backtested on
the validation and the held-out test period (never used for any choice).

    python benchmarks/pbt_trading.py --seeds 0 --out runs/pbt_trading
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from _common import BenchParser, machine, non_negative_int, run_main, table

from riskppo.cli.main import preset_path
from riskppo.config import Config, apply_overrides
from riskppo.evaluation.backtest import backtest_run
from riskppo.pbt.local import run_pbt_local, summary_lines

KEYS = ["sharpe", "cvar_95", "max_drawdown", "annual_return", "turnover"]


def arm(cfg: Config, run_dir: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    summary = run_pbt_local(cfg, run_dir, progress_bar=False, on_message=print)
    for line in summary_lines(summary, run_dir):
        print(line)
    best = Path(summary["best_dir"])
    out: dict[str, Any] = {"summary": summary, "minutes": (time.perf_counter() - t0) / 60}
    for split in ("val", "test"):
        out[split] = backtest_run(best, split=split).result.metrics_dict()
    return out


def fmt(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def main() -> None:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0])
    p.add_argument("--out", default="runs/pbt_trading")
    p.add_argument("--set", action="append", default=[], help="overrides for both arms")
    a = p.parse_args()
    base = Config.from_yaml(preset_path("pbt_trading.yaml"))
    results: dict[str, Any] = {}
    rows = []
    for seed in a.seeds:
        for name, extra in (("pbt", []), ("no_pbt", ["pbt.quantile=0"])):
            cfg = apply_overrides(base, [f"seed={seed}", *a.set, *extra])
            res = arm(cfg, Path(a.out) / f"s{seed}-{name}")
            results[f"s{seed}-{name}"] = res
            for split in ("val", "test"):
                agent = res[split]["agent"]
                rows.append(
                    [f"s{seed}", name, split, *(fmt(agent[k]) for k in KEYS),
                     str(res["summary"]["n_exploits"]), f"{res['minutes']:.1f}"]
                )  # fmt: skip
        test = results[f"s{seed}-pbt"]["test"]
        for strategy in ("buy_and_hold", "sma_crossover"):
            rows.append(
                [f"s{seed}", strategy, "test", *(fmt(test[strategy][k]) for k in KEYS), "", ""]
            )
    print(f"machine: {machine()}")
    print(
        table(rows, ["seed", "arm", "split", *KEYS, "exploits", "minutes"]),
    )
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "results.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(run_main(main))
