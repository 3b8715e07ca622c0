"""``riskppo bench``: list the repository's benchmark scripts in a user's words and run one
in the user's working directory."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from riskppo.config import ConfigError

__all__ = ["BENCHMARKS", "bench_description", "benchmarks_dir", "cmd_bench"]


def benchmarks_dir() -> Path | None:
    """The repository's ``benchmarks/`` (present in a source checkout, not in a wheel)."""
    candidate = Path(__file__).resolve().parents[2] / "benchmarks"  # riskppo/cli/bench.py
    return candidate if (candidate / "_common.py").is_file() else None


# What each benchmark script answers, in a user's words (``riskppo bench`` lists them).
BENCHMARKS: dict[str, str] = {
    "throughput": "Training speed (steps/s) and memory: riskppo vs sb3-contrib RecurrentPPO "
    "and SB3 PPO",
    "sample_efficiency": "Steps to solve memory tasks (CartPole / Pendulum without velocities): "
    "riskppo vs RecurrentPPO",
    "trading_results": "Held-out trading results of the shipped configs over several seeds, "
    "against buy-and-hold and an SMA crossover",
    "pbt_trading": "Does population-based training beat independent runs with the same "
    "budget on the trading agent?",
    "risk_lambda": "How the CVaR constraint's multiplier moves during training: dual ascent "
    "vs PID, on a risky-choice task",
    "robustness": "How much return robust (SA-PPO) training keeps under observation attacks, "
    "vs plain training",
    "plasticity": "Does the agent keep learning when the task keeps changing? Adam vs UPGD vs "
    "gradient-variance scaling",
    "env_speed": "How many trading-env steps per second one CPU core simulates",
    "lstm_kernel": "How much faster the C LSTM kernel is than the PyTorch one, per training "
    "minibatch and per rollout pass",
    "update_phases": "Where a training iteration's time goes (rollout, estimate, update, log), "
    "eager vs compiled",
    "soak": "Long-run stability: memory and open files over a long run and repeated "
    "learn/close cycles",
    "walk_forward": "Which trading config to ship? Candidates compared on several validation "
    "windows before the test period, ranked by a rule fixed in advance",
    "stats_calibration": "Do the Sharpe-difference tests hold their 5% size and reach their "
    "power? Simulated GARCH(1,1)-t return pairs",
    "es_backtest_size": "Do the expected-shortfall backtests of the risk limit's forecast "
    "(Kupiec, Acerbi-Székely Z2) hold their 5% size and catch an understated risk?",
    "bc_warmstart": "Does warm-starting the trading agent from a strategy it clones (behaviour "
    "cloning) beat training from scratch?",
    "overlay_calibration": "How the risk overlay's defaults were chosen on validation periods of "
    "21 stocks, and what they do on the test periods",
    "walkforward_compare": "Finished walk-forward runs side by side: the limit per cell and per "
    "seed, the verdict, exposure, λ and the overlay",
    "portfolio_overlay_check": "Does the risk overlay hold the portfolio's CVaR limit on its "
    "validation rows? skfolio allocations with and without it",
    "portfolio_env_speed": "How many portfolio-env steps per second one CPU core simulates "
    "with 20 assets",
    "trading_rollout": "How much faster the C actor step makes the trading agent's rollout and "
    "training than the PyTorch step",
    "vec_env_speed": "How much faster the batched trading env steps n envs than n separate envs",
    "learnability": "Does the agent find an edge planted in synthetic markets? Against the best "
    "simple rule, an oracle and a supervised forecast on the same bars",
    "learnability_probe": "Where a trained agent's signal loses a planted edge: its action mean "
    "before the clip against the supervised forecast, per walk-forward cell",
    "trials_no_skill": "Does the trial ledger stop a fake edge? The best of 1, 5 or 20 no-skill "
    "configurations judged with and without the ledger's N",
    "bitexact": "Did a refactoring change training? Digests of the weights, metrics, training "
    "state and optimizer of short runs of eleven configurations, compared with a saved file",
    "trials_cli_sequence": "Five configurations judged one after another on one market through "
    "the command line: the ledger's N, the adjusted p and PBO as printed",
}


def bench_description(script: Path) -> str:
    """The listing line of a benchmark: :data:`BENCHMARKS`, else the first line of the
    script's docstring without requirement ids and issue references."""
    if script.stem in BENCHMARKS:
        return BENCHMARKS[script.stem]
    parts = script.read_text().split('"""')
    doc = parts[1].strip().splitlines()[0] if len(parts) > 2 and parts[1].strip() else ""
    doc = re.sub(r"\s*\((?:[^()]*\b(?:R-[A-Z]+|SPEC|design|issue)\b[^()]*)\)", "", doc)
    doc = re.sub(r",?\s*(?:(?:SPEC|design) §[\d.]+|R-[A-Z]+-\d+)\.?$", "", doc)
    return doc.replace("``", "").rstrip(".") or "(no description)"


def cmd_bench(args: argparse.Namespace) -> int:
    root = benchmarks_dir()
    if root is None:
        print(
            "riskppo bench: the benchmark scripts live in the source repository's benchmarks/ "
            "folder, which this installation does not have; clone the repository and "
            "`pip install -e .` it",
            file=sys.stderr,
        )
        return 2
    names = sorted(p.stem for p in root.glob("*.py") if not p.stem.startswith("_"))
    if args.name is None:
        print("benchmarks: riskppo bench NAME [options]  (riskppo bench NAME --help: its options)")
        for name in names:
            print(f"  {name:<18} {bench_description(root / f'{name}.py')}")
        return 0
    if args.name not in names:
        raise ConfigError(f"unknown benchmark {args.name!r}; choose from {names}")
    cmd = [sys.executable, str(root / f"{args.name}.py"), *args.rest]
    return subprocess.run(cmd, check=False).returncode  # in the user's cwd: their paths
