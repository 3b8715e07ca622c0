"""``riskppo backtest RUN_DIR --split test``: the backtest report of a run, and what the command
line prints of a backtest — the metrics table, the flat/near-flat warning, the verdict and the
report's path. The backtest itself is :mod:`riskppo.evaluation.backtest` (a portfolio run's:
:mod:`riskppo.evaluation.portfolio.run`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from riskppo.config import Config
from riskppo.envs.registration import env_kind
from riskppo.evaluation.backtest import backtest_run, flat_warning
from riskppo.evaluation.backtest_result import BacktestResult
from riskppo.evaluation.baselines import STRATEGIES
from riskppo.evaluation.references import FLOOR_OVERLAY, VT_BH_OVERLAY
from riskppo.evaluation.report import STRATEGY_LABELS, format_value, metric_rows
from riskppo.evaluation.trials import TrialSpec
from riskppo.persist.checkpoint import CheckpointError
from riskppo.runs.ledger import ledger_path

__all__ = ["cmd_backtest", "print_flat_warning", "print_metrics_table"]


def cmd_backtest(args: argparse.Namespace) -> int:
    """``riskppo backtest RUN_DIR --split test``: write the report, print a metrics table.

    Reads ``args.run_dir`` and ``args.split`` (``train`` | ``val`` | ``test``, default test).
    Returns the exit status (2 on a missing/bad run directory or checkpoint).
    """
    split = getattr(args, "split", None) or "test"
    try:
        no_ledger = bool(getattr(args, "no_ledger", False))
        ledger = ledger_path(getattr(args, "ledger", None), enabled=not no_ledger)
        if _is_portfolio_run(Path(args.run_dir)):
            return _portfolio_backtest(args.run_dir, split, TrialSpec(ledger))
        art = backtest_run(args.run_dir, split, trial=TrialSpec(ledger))
    except (CheckpointError, FileNotFoundError, ValueError) as exc:
        print(f"riskppo backtest: {exc}", file=sys.stderr)
        return 2
    print_metrics_table(art.result)
    warning = flat_warning(art.result)
    if warning:
        print(f"riskppo backtest: {warning}")
    print(art.verdict())
    print(f"report: {art.report}")
    return 0


def _is_portfolio_run(run_dir: Path) -> bool:
    """Whether the run's own config (if it has one) trains the portfolio env."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return False
    kind = env_kind(Config.from_yaml(path).env.id)
    return kind is not None and not kind.single_asset


def _portfolio_backtest(run_dir: str | Path, split: str, trial: TrialSpec) -> int:
    """``riskppo backtest`` of a portfolio run (:mod:`riskppo.evaluation.portfolio.run`)."""
    from riskppo.evaluation.portfolio.run import portfolio_backtest_run

    done = portfolio_backtest_run(run_dir, split, trial=trial)
    print(done.verdict())
    print(f"report: {done.report}")
    return 0


def print_flat_warning(backtest_dir: Path, prefix: str = "riskppo") -> None:
    """Print the one-line flat/near-flat warning of a written backtest (nothing if none)."""
    path = backtest_dir / "metrics.json"
    if not path.is_file():  # not a trading or portfolio run
        return
    split = backtest_dir.name.removeprefix("backtest_")
    metrics = json.loads(path.read_text())
    if "best_baseline" in metrics:  # a portfolio report: its strategies are one level down
        metrics = metrics["metrics"]
    warning = flat_warning(metrics, split=split)
    if warning:
        print(f"{prefix}: {warning}")


# the console table's headers and width: seven strategies in 104 columns
_CONSOLE_WIDTH = 104
_CONSOLE_LABELS = {
    "vol_target_buy_and_hold": "VT B&H",
    VT_BH_OVERLAY: "VT B&H +overlay",
    FLOOR_OVERLAY: "floor +overlay",
    "sma_crossover": "SMA",
}


def print_metrics_table(result: BacktestResult) -> None:
    """A compact metrics table (rich) of all strategies on stdout."""
    r = result
    table = Table(
        title=f"{r.dataset} · {r.part} · {r.start:%Y-%m-%d} → {r.end:%Y-%m-%d} "
        f"({len(r.frames['agent'])} bars, after costs)",
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("metric", no_wrap=True)
    for name in STRATEGIES:
        flat = " (FLAT)" if r.metrics[name].flat else ""
        table.add_column(_CONSOLE_LABELS.get(name, STRATEGY_LABELS[name]) + flat, justify="right")
    metrics = r.metrics_dict()
    for row in metric_rows(r):
        table.add_row(row.label, *(format_value(metrics[s][row.key], row.fmt) for s in STRATEGIES))
    console = Console(soft_wrap=True)
    console.width = max(console.width, _CONSOLE_WIDTH)  # seven strategies: wider than 80
    console.print(table)
