"""The arguments of the ``riskppo`` subcommands that start longer jobs (walk-forward, demonstration
recording, population-based training, the universe, the benchmarks), the argparse types and the
help texts they share; :mod:`riskppo.cli` binds each parser to its command."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from riskppo.config.bundled import bundled_names

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_PBT_CONFIG",
    "RUN_DIR_HELP",
    "add_command",
    "add_ledger",
    "add_set",
    "bench_parser",
    "config_help",
    "non_negative_int",
    "paper_parser",
    "pbt_parser",
    "positive_int",
    "record_parser",
    "signal_parser",
    "universe_parser",
    "walkforward_parser",
]

DEFAULT_CONFIG = "trading_googl.yaml"  # the main job: the GOOGL trading agent
DEFAULT_PBT_CONFIG = "pbt_trading.yaml"
RUN_DIR_HELP = "run directory written by `riskppo train`"


def non_negative_int(text: str) -> int:
    """An argparse type: an integer ≥ 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer ≥ 1 (argparse prints the one-line usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {value}")
    return value


def add_command(sub: Any, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand with its one-line ``summary`` (``riskppo --help``) and its ``description``
    (``riskppo NAME --help``)."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=summary, description=description)
    return parser


def add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config key, dotted as in the YAML file: ppo.learning_rate=1e-4 "
        "(repeatable; docs/config.md lists the keys)",
    )


def add_ledger(p: argparse.ArgumentParser) -> None:
    """``--ledger PATH`` and ``--no-ledger``: where the judgement is recorded in the trial ledger
    that gives the verdict its number of trials (:mod:`riskppo.runs.ledger`)."""
    p.add_argument(
        "--ledger",
        metavar="DIR",
        help="trial ledger directory: the verdict's N counts the configurations judged on this "
        "data there (default: $RISKPPO_LEDGER, else runs/ledger; docs/risk.md)",
    )
    p.add_argument(
        "--no-ledger",
        action="store_true",
        help="neither record this judgement nor read the ledger (N = --trials, default 1)",
    )


def add_backend(p: argparse.ArgumentParser, what: str) -> None:
    """``--workers``, ``--backend {local,ray}`` and ``--ray-address``: where ``what`` run and
    how many at a time (docs/cluster.md)."""
    p.add_argument(
        "--workers",
        type=positive_int,
        help=f"{what} trained at a time (default: all cores, or all CPUs of the Ray cluster)",
    )
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help=f"where the {what} run: local worker processes, or Ray tasks on a local Ray "
        "instance or the cluster of --ray-address; the results are the same (docs/cluster.md; "
        "default: %(default)s)",
    )
    add_ray_address(p)


def add_ray_address(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="with --backend ray: the Ray cluster to run on (auto: the one `ray start --head` "
        "started here; host:port; ray://host:10001); default: a local Ray instance",
    )


def config_help(default: str, what: str = "YAML config file") -> str:
    """``--config``'s help: a file, or one of the configs shipped in the package (listed from
    ``riskppo/configs``, so a new one appears here without an edit)."""
    names = ", ".join(bundled_names())
    return f"{what}, or the name of a shipped config ({names}); default: {Path(default).stem}"


def walkforward_parser(sub: Any) -> argparse.ArgumentParser:
    p = add_command(
        sub,
        "walkforward",
        "retrain every --step bars, trade the next ones frozen, judge the stitched record",
        "Walk-forward test of a trading config: train on the rows before each test segment, "
        "trade the segment with the frozen agent, move on by --step rows. The stitched "
        "out-of-sample record is judged against the baselines: report.html, metrics.json and "
        "segments.csv in the run directory.",
    )
    p.add_argument("--config", help=config_help(DEFAULT_CONFIG))
    add_set(p)
    p.add_argument(
        "--candidates",
        nargs="+",
        metavar="CONFIG",
        help="instead of --config: configurations to choose among inside each segment's "
        "training rows (by the Sharpe ratio on their last --select-bars rows), the chosen one "
        "retrained and traded; judged as one configuration (--set applies to each; "
        "docs/risk.md)",
    )
    p.add_argument(
        "--select-bars",
        type=positive_int,
        help="with --candidates: the training rows at the end of each segment's training span "
        "the candidates are compared on (default: --step)",
    )
    p.add_argument("--run-dir", help="run directory (default: runs/<time>-wf-<env>-<data>-s<seed>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a walk-forward run")
    p.add_argument(
        "--initial",
        type=positive_int,
        default=756,
        help="rows before the first test segment (default: %(default)s, three years of daily bars)",
    )
    p.add_argument(
        "--step",
        type=positive_int,
        default=126,
        help="rows per segment and between retrainings (default: %(default)s, half a year)",
    )
    p.add_argument(
        "--window",
        choices=("expanding", "rolling"),
        default="expanding",
        help="rows each segment trains on: expanding = every row before it, rolling = the last "
        "--train-bars rows (default: %(default)s)",
    )
    p.add_argument(
        "--train-bars", type=positive_int, help="rolling window length (default: --initial)"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default: 0 1 2")
    p.add_argument(
        "--warm-start",
        action="store_true",
        help="start each segment from the previous segment's weights and train --warm-steps",
    )
    p.add_argument(
        "--warm-steps",
        type=positive_int,
        help="steps of a warm-started segment (default: a quarter of total_timesteps)",
    )
    add_backend(p, "cells")
    p.add_argument(
        "--trials",
        type=positive_int,
        default=1,
        help="configurations tried on this data, this one included: the verdict's p-value is "
        "adjusted for them; the ledger's count is used where it is larger (default: 1; with "
        "--resume a finished run is judged again)",
    )
    add_ledger(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def record_parser(sub: Any) -> argparse.ArgumentParser:
    p = add_command(
        sub,
        "record",
        "write a demonstration file (bc.source: file) from a strategy or a run",
        "Write a demonstration file for behaviour cloning (bc.source: file, bc.path): the "
        "actions of a baseline strategy (or of a trained run's latest checkpoint) in the "
        "config's trading env on its train split.",
    )
    p.add_argument(
        "out", help="demonstration file to write (.safetensors, or .parquet for a table)"
    )
    p.add_argument(
        "--strategy",
        choices=("buy_and_hold", "vol_target_buy_and_hold", "sma_crossover"),
        default="vol_target_buy_and_hold",
        help="baseline that acts in the config's trading env, train split (default: %(default)s)",
    )
    p.add_argument("--run", help="record this run's latest checkpoint instead of a strategy")
    p.add_argument("--config", help=config_help(DEFAULT_CONFIG))
    add_set(p)
    p.add_argument("--steps", type=int, default=1024, help="steps per env (default: %(default)s)")
    return p


def pbt_parser(sub: Any) -> argparse.ArgumentParser:
    p = add_command(
        sub,
        "pbt",
        "population-based training (default: the trading PBT config)",
        "Population-based training (docs/pbt.md): the members of a population train side by "
        "side; every pbt.ready_updates updates the bottom pbt.quantile copy a top member's "
        "weights and go on with perturbed hyperparameters. Writes pbt_history.jsonl and "
        "pbt_summary.json and, for a trading config, backtests the best member on the test "
        "period.",
    )
    p.add_argument(
        "--config", help=config_help(DEFAULT_PBT_CONFIG, "YAML config file with a pbt section")
    )
    add_set(p)
    p.add_argument("--run-dir", help="run directory (default: runs/<time>-pbt-<env>-s<seed>)")
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a PBT run (local backend) from its last completed round, with its config",
    )
    p.add_argument("--backend", choices=("local", "ray"), help="overrides pbt.backend")
    add_ray_address(p)
    add_ledger(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def universe_parser(sub: Any) -> argparse.ArgumentParser:
    p = add_command(
        sub,
        "universe",
        "train and backtest the agent on each of the 20 sp500 stocks; a verdict table",
        "Train and backtest the agent on each stock of the bundled sp500 dataset (and each "
        "seed), several at a time; writes and prints a per-stock verdict table (universe.md, "
        "numbers in universe.json).",
    )
    p.add_argument("--config", help=config_help(DEFAULT_CONFIG) + "; its data is replaced")
    add_set(p)
    p.add_argument("--symbols", nargs="+", metavar="SYM", help="stocks (default: all 20)")
    p.add_argument(
        "--seeds", nargs="+", type=non_negative_int, metavar="N", help="seeds (default: 0)"
    )
    add_backend(p, "cells")
    p.add_argument("--run-dir", help="parent directory (default: runs/<time>-universe)")
    p.add_argument("--resume", metavar="DIR", help="continue a stopped universe")
    add_ledger(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def bench_parser(sub: Any) -> argparse.ArgumentParser:
    p = add_command(
        sub,
        "bench",
        "run a benchmark script from benchmarks/ (no NAME: list them)",
        "Run one of the source repository's benchmark scripts (benchmarks/NAME.py) in the "
        "current directory; without NAME, list them with what each measures.",
    )
    p.add_argument("name", nargs="?", help="e.g. throughput, sample_efficiency, robustness")
    p.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        help="options passed to the script (riskppo bench NAME --help lists them)",
    )
    return p


def signal_parser(sub: Any) -> argparse.ArgumentParser:
    p = add_command(
        sub,
        "signal",
        "the target exposure for the next bar, from a trained run and a price file",
        "Load a trading (or portfolio) run's newest good checkpoint, run it over a price file "
        "with the run's features, observation normaliser, sizing and risk overlay (the "
        "backtest's own stepping), and print the position to hold from the next bar with its "
        "inputs: the last bar's time, the policy's raw signal, the volatility scale, the "
        "overlay's cap and forecast CVaR, the final exposure (docs/deploy.md).",
    )
    p.add_argument("run_dir", help=RUN_DIR_HELP)
    p.add_argument(
        "--data",
        required=True,
        metavar="FILE",
        help="price file read like the run's data.path (a portfolio run: one long or wide "
        "table of its assets); its last bar is the one decided on",
    )
    p.add_argument(
        "--start",
        metavar="TIME",
        help="the bar the agent starts at (its LSTM is reset there; default: the first bar "
        "with complete features)",
    )
    p.add_argument("--json", metavar="OUT", help="also write the record to OUT (JSON, atomically)")
    return p


def paper_parser(sub: Any) -> argparse.ArgumentParser:
    p = add_command(
        sub,
        "paper",
        "paper-trade a run over a feed that grows: step through the bars added since the last call",
        "Step a trading (or portfolio) run through the bars appended to FEED since the last "
        "call, keep its state (LSTM, position, equity, last bar) in RUN_DIR/paper/state.json, "
        "append its orders to RUN_DIR/paper/orders.csv and check the live record against a "
        "backtest of the same bars. The first call warms up on the history in FEED and places "
        "its first order at the last bar. Safe to kill at any moment; no broker is called "
        "(docs/deploy.md).",
    )
    p.add_argument("run_dir", help=RUN_DIR_HELP)
    p.add_argument(
        "--data",
        required=True,
        metavar="FEED",
        help="price file that only grows (bars appended), read like the run's data.path",
    )
    return p
