"""Held-out results of the trading configs over several seeds, against the baselines (R-TRADE-3).

For each dataset (a shipped config, or a config run on a user's CSV) and seed: train with the
config as shipped plus any ``--set`` overrides (nothing tuned on the test period), backtest on the
``--split`` period (test by default; ``riskppo train`` always writes ``backtest_test``, a val
backtest is written next to it as ``backtest_val``), then print per dataset:

* a table of agent / buy_and_hold / vol_target_buy_and_hold / sma_crossover (agent: mean ± std
  over seeds; the baselines are deterministic) with Sharpe, Sortino, max drawdown, CVaR95 per bar,
  the horizon CVaR the constraint is about (against its limit), market share, mean |exposure|,
  annual return and turnover;
* the agent per seed (Sharpe, horizon CVaR, limit met?, market share, mean |exposure|, flat?,
  final λ from ``metrics.jsonl``) and how many seeds hold a position on ≥ 50 % of the bars, meet
  the CVaR limit, match the vol-targeted buy-and-hold's Sharpe, or are flat.

Everything is also written to ``OUT/summary.json``; ``--plot-lambda PNG`` draws λ, the risk head's
calibration error and the empirical segment CVaR (against the limit) over training for every run.

    python benchmarks/trading_results.py --seeds 0 1 2 --configs trading_googl trading_eurusd
    python benchmarks/trading_results.py --split val --plot-lambda runs/trading_results/lambda.png
    python benchmarks/trading_results.py --synthetic --configs trading_googl --out runs/synth
    python benchmarks/trading_results.py --data-path my_bars.csv --configs trading_googl \\
        --set env.kwargs.bars_per_year=252 --label "my data"

``--configs`` takes names of the shipped configs (``riskppo/configs/NAME.yaml``) or YAML paths.
With ``--data-path`` every config runs on that file (``data.path``; its rows are labelled by the
file name); set ``env.kwargs.bars_per_year`` for bars that are not daily. ``--reuse`` skips the
training of runs that already finished in OUT with the same config (to redo the tables, a val
backtest or the plot).
Smoke test: ``--seeds 0 --set total_timesteps=4096``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import BenchParser, mean_std_cell, non_negative_int, read_jsonl, run_main, table

from riskppo.cli.runner import train_run
from riskppo.config import Config, apply_overrides
from riskppo.evaluation.backtest import STRATEGIES, backtest_run
from riskppo.evaluation.metrics import aggregate_metrics

# (metrics.json key, column header, format); the horizon CVaR's header names H and the limit.
COLUMNS: list[tuple[str, str, str]] = [
    ("sharpe", "Sharpe", ".2f"),
    ("sortino", "Sortino", ".2f"),
    ("max_drawdown", "max DD", ".3f"),
    ("cvar_95", "CVaR95/bar", ".4f"),
    ("cvar_horizon", "horizon CVaR", ".4f"),
    ("market_share", "mkt share", ".2f"),
    ("mean_abs_exposure", "mean |exp|", ".3f"),
    ("annual_return", "ann. return", ".3f"),
    ("turnover", "turnover/yr", ".1f"),
]
HOLDS_SHARE = 0.5  # "holds a position on ≥ 50 % of the bars"
SYNTHETIC_BARS, SYNTHETIC_SEED = 2500, 7


@dataclass(frozen=True)
class Dataset:
    """One table: a config, optionally on a user's data file."""

    label: str
    config: str
    data_path: Path | None

    @property
    def slug(self) -> str:
        stem = Path(self.config).stem
        return f"{self.data_path.stem}-{stem}" if self.data_path else stem


@dataclass
class SeedRun:
    """What one trained seed contributes: its backtest metrics and its training log."""

    seed: int
    run_dir: Path
    metrics: dict[str, dict[str, Any]]
    log: list[dict[str, Any]]

    @property
    def final_lambda(self) -> float | None:
        lams = [row["risk/lambda"] for row in self.log if "risk/lambda" in row]
        return lams[-1] if lams else None


# ---- data and runs ------------------------------------------------------------------------------


def write_synthetic(out: Path) -> Path:
    """The seeded regime-switching market with jumps, as ``OUT/synthetic_market.csv``."""
    from riskppo.envs.market.synthetic import regime_switching

    df = regime_switching(SYNTHETIC_BARS, seed=SYNTHETIC_SEED)
    df.index.name = "date"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "synthetic_market.csv"
    df.to_csv(path)
    return path


def datasets(configs: list[str], data_path: Path | None) -> list[Dataset]:
    if data_path is None:
        return [Dataset(Path(c).stem.removeprefix("trading_"), c, None) for c in configs]
    name = data_path.name
    many = len(configs) > 1
    return [Dataset(f"{name} · {Path(c).stem}" if many else name, c, data_path) for c in configs]


def base_config(config: str) -> Config:
    """A config file, or a shipped config by name (``trading_googl``)."""
    return Config.from_yaml(config)


def seed_config(ds: Dataset, seed: int, sets: list[str]) -> Config:
    data = ["data.dataset=null", f"data.path={ds.data_path.resolve()}"] if ds.data_path else []
    return apply_overrides(base_config(ds.config), [f"seed={seed}", *data, *sets])


def finished_with(run_dir: Path, cfg: Config) -> bool:
    """``run_dir`` holds a finished run (a test backtest) of exactly ``cfg``."""
    if not (run_dir / "backtest_test" / "metrics.json").is_file():
        return False
    same = Config.from_yaml(run_dir / "config.yaml").to_dict() == cfg.to_dict()
    if not same:
        print(f"{run_dir}: its config differs from the requested one; retraining")
    return same


def fresh_run_dir(run_dir: Path) -> None:
    """Remove an earlier run in ``run_dir``: a new one would append to its metrics.jsonl."""
    if (run_dir / "config.yaml").is_file():
        print(f"{run_dir}: replacing the earlier run there")
        shutil.rmtree(run_dir)


def run_seed(ds: Dataset, seed: int, a: argparse.Namespace) -> SeedRun:
    """Train (unless ``--reuse`` finds the run finished), backtest ``--split``, read it back."""
    run_dir = Path(a.out) / f"{ds.slug}-s{seed}"
    backtest = run_dir / f"backtest_{a.split}" / "metrics.json"
    cfg = seed_config(ds, seed, a.set)
    if not (a.reuse and finished_with(run_dir, cfg)):
        fresh_run_dir(run_dir)
        train_run(cfg, run_dir, progress_bar=False)
    if a.split != "test" and not (a.reuse and backtest.is_file()):
        backtest_run(run_dir, split=a.split)
    log_path = run_dir / "metrics.jsonl"
    log = read_jsonl(log_path) if log_path.is_file() else []
    return SeedRun(seed, run_dir, json.loads(backtest.read_text()), log)


# ---- tables -------------------------------------------------------------------------------------


def horizon_header(runs: list[SeedRun]) -> str:
    agent = runs[0].metrics["agent"]
    return f"CVaR {agent['cvar_horizon_bars']}-bar (limit {agent['cvar_limit']})"


def strategy_row(strategy: str, agg: dict[str, Any], runs: list[SeedRun]) -> list[str]:
    is_agent = strategy == "agent"
    cells = [mean_std_cell(agg[strategy][key], fmt, with_std=is_agent) for key, _, fmt in COLUMNS]
    met = [r.metrics[strategy]["cvar_limit_met"] for r in runs]
    i = [key for key, _, _ in COLUMNS].index("cvar_horizon")
    if is_agent:
        cells[i] += f" [{sum(m is True for m in met)}/{len(met)} met]"
    elif met[0] is not None:
        cells[i] += " ✓" if met[0] else " ✗"
    flat = any(r.metrics[strategy]["flat"] for r in runs)
    name = f"agent ({len(runs)} seed{'s' if len(runs) > 1 else ''})" if is_agent else strategy
    return [name + (" FLAT" if flat and not is_agent else ""), *cells]


def strategy_table(agg: dict[str, Any], runs: list[SeedRun]) -> str:
    header = [h if key != "cvar_horizon" else horizon_header(runs) for key, h, _ in COLUMNS]
    rows = [strategy_row(s, agg, runs) for s in STRATEGIES]
    return table(rows, ["strategy", *header])


def per_seed(run: SeedRun) -> dict[str, Any]:
    agent = run.metrics["agent"]
    return {
        "seed": run.seed,
        "run_dir": str(run.run_dir),
        "sharpe": agent["sharpe"],
        "cvar_horizon": agent["cvar_horizon"],
        "cvar_limit_met": agent["cvar_limit_met"],
        "market_share": agent["market_share"],
        "mean_abs_exposure": agent["mean_abs_exposure"],
        "flat": agent["flat"],
        "final_lambda": run.final_lambda,
    }


def fmt(v: Any, spec: str = ".3f") -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return format(v, spec)


def seed_table(rows: list[dict[str, Any]]) -> str:
    keys = {"sharpe": ".2f", "cvar_horizon": ".4f", "cvar_limit_met": "", "market_share": ".2f"}
    keys |= {"mean_abs_exposure": ".3f", "flat": "", "final_lambda": ".3f"}
    body = [[str(r["seed"]), *(fmt(r[k], f) for k, f in keys.items())] for r in rows]
    header = ["seed", "Sharpe", "horizon CVaR", "limit met?", "mkt share", "mean |exp|"]
    return table(body, [*header, "flat?", "final λ"])


def counts(runs: list[SeedRun]) -> dict[str, int]:
    def sharpe_at_least_vt(r: SeedRun) -> bool:
        agent, vt = r.metrics["agent"]["sharpe"], r.metrics["vol_target_buy_and_hold"]["sharpe"]
        return agent is not None and vt is not None and agent >= vt

    return {
        "holds_position_half_of_bars": sum(
            (r.metrics["agent"]["market_share"] or 0.0) >= HOLDS_SHARE for r in runs
        ),
        "meets_cvar_limit": sum(r.metrics["agent"]["cvar_limit_met"] is True for r in runs),
        "sharpe_at_least_vol_target_bh": sum(sharpe_at_least_vt(r) for r in runs),
        "flat": sum(bool(r.metrics["agent"]["flat"]) for r in runs),
        "seeds": len(runs),
    }


def count_lines(c: dict[str, int]) -> str:
    n = c["seeds"]
    return "\n".join(
        [
            f"holds a position on ≥ {HOLDS_SHARE:.0%} of bars: "
            f"{c['holds_position_half_of_bars']}/{n} seeds",
            f"meets the CVaR limit: {c['meets_cvar_limit']}/{n}",
            f"Sharpe ≥ vol-targeted buy-and-hold: {c['sharpe_at_least_vol_target_bh']}/{n}",
            f"flat: {c['flat']}/{n}",
        ]
    )


def report(ds: Dataset, runs: list[SeedRun], a: argparse.Namespace) -> dict[str, Any]:
    """Print the dataset's tables; return its part of summary.json."""
    agg = aggregate_metrics([r.metrics for r in runs])
    rows = [per_seed(r) for r in runs]
    c = counts(runs)
    head = f"{a.label}: " if a.label else ""
    print(f"\n{head}{ds.label} (config {ds.config}) — {a.split} period, after costs, seeds "
          f"{a.seeds}{', --set ' + ' '.join(a.set) if a.set else ''}")  # fmt: skip
    print(strategy_table(agg, runs))
    print("\nagent per seed:")
    print(seed_table(rows))
    print(count_lines(c))
    return {
        "config": ds.config,
        "data_path": str(ds.data_path) if ds.data_path else None,
        "aggregate": agg,
        "per_seed": rows,
        "counts": c,
        "metrics": {str(r.seed): r.metrics for r in runs},
    }


# ---- λ plot -------------------------------------------------------------------------------------


def series(log: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    rows = [r for r in log if r.get(key) is not None and "time/total_timesteps" in r]
    return [r["time/total_timesteps"] for r in rows], [r[key] for r in rows]


def robust_ylim(ax: Any, values: list[float], limit: float | None) -> None:
    """Keep early outliers (an untrained risk head) from flattening the rest of the panel."""
    import numpy as np

    v = np.asarray([x for x in values if np.isfinite(x)] + ([limit] if limit is not None else []))
    if len(v) < 2:
        return
    lo, hi = np.percentile(v, [2, 98])
    lo, hi = (
        min(lo, limit if limit is not None else lo),
        max(hi, limit if limit is not None else hi),
    )
    pad = 0.1 * (hi - lo) or 0.01
    ax.set_ylim(lo - pad, hi + pad)


def plot_column(axes: Any, ds: Dataset, runs: list[SeedRun]) -> None:
    """λ per seed above; below, the empirical segment CVaR against the limit (left axis) and the
    risk head's calibration error (right axis: its scale can be far larger early on)."""
    from matplotlib.lines import Line2D

    ax_lam, ax_cvar = axes
    ax_err = ax_cvar.twinx()
    limit = runs[0].metrics["agent"]["cvar_limit"]
    emps: list[float] = []
    errs: list[float] = []
    for i, run in enumerate(runs):
        colour = f"C{i % 10}"
        ax_lam.plot(*series(run.log, "risk/lambda"), color=colour, label=f"seed {run.seed}")
        x, emp = series(run.log, "risk/cvar_empirical_segment")
        ax_cvar.plot(x, emp, color=colour, lw=1.5)
        x, err = series(run.log, "risk/cvar_pred_error")
        ax_err.plot(x, err, color=colour, ls=":", lw=1.2)
        emps, errs = emps + emp, errs + err
    if limit is not None:
        ax_cvar.axhline(limit, color="k", ls="--", lw=1)
    robust_ylim(ax_cvar, emps, limit)
    robust_ylim(ax_err, errs, 0.0)
    named = Path(ds.config).stem in ds.label
    ax_lam.set_title(ds.label if named else f"{ds.label} — config {ds.config}", fontsize=10)
    ax_lam.set_ylabel("λ (CVaR multiplier)")
    ax_lam.legend(fontsize=8)
    horizon = runs[0].metrics["agent"]["cvar_horizon_bars"]
    alpha = runs[0].metrics["agent"]["cvar_alpha"]
    ax_cvar.set_ylabel(f"CVaR{alpha:g}, {horizon}-bar segments")
    ax_err.set_ylabel("risk head error (pred − emp)")
    ax_cvar.set_xlabel("environment steps")
    style = [
        Line2D([], [], color="0.3", lw=1.5, label="empirical CVaR (left)"),
        Line2D([], [], color="k", ls="--", lw=1, label=f"limit {limit} (left)"),
        Line2D([], [], color="0.3", ls=":", lw=1.2, label="risk head error (right)"),
    ]
    ax_cvar.legend(handles=style, fontsize=8)


def plot_lambda(results: dict[Dataset, list[SeedRun]], a: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig, axes = plt.subplots(2, n, figsize=(7 * n, 7), sharex="col", squeeze=False)
    for j, (ds, runs) in enumerate(results.items()):
        plot_column(axes[:, j], ds, runs)
    sets = f" | --set {' '.join(a.set)}" if a.set else ""
    label = f"{a.label}: " if a.label else ""
    fig.suptitle(f"{label}CVaR constraint during training{sets}", fontsize=11)
    fig.tight_layout()
    Path(a.plot_lambda).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.plot_lambda, dpi=110)
    plt.close(fig)
    print(f"wrote {a.plot_lambda}")


# ---- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--configs", nargs="+", default=["trading_googl", "trading_eurusd"])
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="runs/trading_results")
    p.add_argument("--split", choices=("test", "val"), default="test", help="backtest period")
    data = p.add_mutually_exclusive_group()
    data.add_argument("--data-path", type=Path, help="run every config on this OHLCV CSV")
    data.add_argument(
        "--synthetic",
        action="store_true",
        help=f"write a seeded regime-switching market ({SYNTHETIC_BARS} bars) to "
        "OUT/synthetic_market.csv and use it as --data-path",
    )
    p.add_argument("--set", action="append", default=[], help="extra overrides for every run")
    p.add_argument("--label", default="", help="name of this set of runs in the tables and plot")
    p.add_argument("--plot-lambda", metavar="PNG", help="plot λ and the CVaR over training")
    p.add_argument("--reuse", action="store_true", help="do not retrain runs already in OUT")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    for config in a.configs:  # every config and --set checked before anything is trained
        apply_overrides(base_config(config), a.set)
    out = Path(a.out)
    data_path = write_synthetic(out) if a.synthetic else a.data_path
    results = {ds: [run_seed(ds, s, a) for s in a.seeds] for ds in datasets(a.configs, data_path)}
    summary = {
        "label": a.label,
        "split": a.split,
        "seeds": a.seeds,
        "set": a.set,
        "data_path": str(data_path) if data_path else None,
        "datasets": {ds.label: report(ds, runs, a) for ds, runs in results.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nwrote {out / 'summary.json'}")
    if a.plot_lambda:
        plot_lambda(results, a)


if __name__ == "__main__":
    sys.exit(run_main(main))
