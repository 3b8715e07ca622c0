"""Does the agent find an edge that is there? Planted markets, references and the agent.

Each market is a seeded synthetic daily file with an edge planted by construction
(``riskppo.envs.market.planted``: AR(1) momentum at several strengths, short-term reversal, slow
bull/bear regimes, a random walk; GARCH-t noise; opens that make the edge tradable at the next
open), written as a user's CSV and traded through the shipped GOOGL configuration (``--set``
changes it). On the same bars, sizing, overlay, fills and fees:

* ``vt_bh`` — vol-targeted buy-and-hold (the full signal);
* ``rule`` — the best simple rule: momentum or reversal over 1, 5, 20 or 60 bars (top of the band
  when the sign says up, its floor else), chosen by Sharpe on the training rows;
* ``oracle`` — the best forecast of the next return from the prices under the generating model
  (the true conditional mean where nothing is hidden; on regime files the Bayes filter's, since
  no learner that sees prices can know the hidden regime), in units of its volatility, mapped
  into the band (``riskppo.evaluation.supervised.forecast_signals``);
* ``supervised`` — the agent's features → a ridge forecast fitted on the training rows → the band;
* ``agent`` — the trained agent, deterministic.

Printed per market: the test rows' annualised Sharpe ratio of each, the agent's capture of the
best reference's advantage over ``vt_bh`` (``(agent − vt_bh) / (best − vt_bh)``, where the best
reference beats ``vt_bh``) and the correlation of the agent's signal with the planted
information on the training and the test rows. One split (70/15/15) per market and seed: the
test rows of a 6,000-bar file are 900 bars, where one Sharpe ratio has a sampling error of
about 0.5 — a diagnostic, not a verdict (``riskppo walkforward`` gives that). ``--out`` keeps
the CSVs, a JSON of every figure and a plot.

Because the planted conditional mean is known, each strategy also gets an **expected Sharpe
ratio** that the noise of the test rows does not blur: the mean of ``position_t · E[r_t | past] −
costs_t`` over its standard deviation of realised returns, annualised — what the same positions
would earn on average over every path of the market. ``e_capture`` is the agent's share of the
best reference's expected advantage over ``vt_bh``; on a random walk every timing strategy's
expected advantage is its cost and lost drift (≤ 0).

    python benchmarks/learnability.py --steps 150000 --set ppo.pathwise_coef=1
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BenchParser, machine, non_negative_int, positive_int, run_main, run_worker
from _planted_refs import best_rule, make_market, run_signals, scores

MARKETS = ("ar0.05", "ar0.1", "ar0.15", "ar0.2", "ar-0.1", "regime60", "regime250", "ar0")
REFERENCES = ("vt_bh", "rule", "oracle", "supervised")
MIN_GAIN = 0.02  # annual Sharpe ratio: the least advantage a capture is reported against


def references(cfg: Any, planted: Any, expected_return: Any, part: str) -> dict[str, Any]:
    """Realised and expected (``e_``) Sharpe ratios of the references on the rows of ``part``
    (and the rule's name)."""
    from riskppo.evaluation.backtest import _agent_env
    from riskppo.evaluation.supervised import forecast_signals, supervised_signals

    _, train_env = _agent_env(cfg, "train")
    _, test_env = _agent_env(cfg, part)
    rule, rule_sig = best_rule(train_env)
    z = planted.forecast / planted.sigma  # the oracle: the best forecast from the prices
    lo, hi = train_env.trading_range
    oracle = forecast_signals(z, float(np.std(z[lo:hi])), test_env.signal_range)
    supervised, _ = supervised_signals(train_env, test_env)
    full = np.full(len(test_env.df), test_env.signal_range[1])
    out: dict[str, Any] = {"rule_name": rule}
    for name, signals in (("vt_bh", full), ("rule", rule_sig), ("oracle", oracle),
                          ("supervised", supervised)):  # fmt: skip
        out[name], out[f"e_{name}"] = scores(run_signals(test_env, signals), expected_return)
    return out


def worker(args: argparse.Namespace, out: Path) -> None:
    import pandas as pd
    import torch

    from riskppo import DistributionalPPO
    from riskppo.config import Config, apply_overrides
    from riskppo.config.bundled import resolve_config_path
    from riskppo.evaluation.backtest import backtest

    market, bars, seed, steps, part = args.market, args.bars, args.seeds[0], args.steps, args.part
    torch.set_num_threads(1)
    df, planted = make_market(market, bars, seed)
    path = out / f"{market}_s{seed}.csv"
    df.to_csv(path)
    cfg = apply_overrides(
        Config.from_yaml(resolve_config_path("trading_googl")),
        [f"data.path={path}", "data.dataset=null", f"total_timesteps={max(steps, 1)}",
         f"seed={seed}", *args.sets],
    )  # fmt: skip
    expected = pd.Series(planted.cond_mean, index=df.index).shift(1)  # E[r_t | past], bar t
    row: dict[str, Any] = {"market": market, "seed": seed}
    row.update(references(cfg, planted, expected, part))
    if steps > 0:
        model = DistributionalPPO(config=cfg)
        model.learn(steps)
        info = pd.Series(planted.info, index=df.index).shift(1)
        for rows in ("train", part):
            frame = backtest(model, rows).frames["agent"]
            row[f"corr_{rows}"] = float(frame["signal"].corr(info.reindex(frame.index)))
            if rows == part:
                row["agent"], row["e_agent"] = scores(frame, expected)
                row["signal_sd"] = float(frame["signal"].std())
    print(json.dumps(row))


def capture(row: dict[str, Any], prefix: str = "") -> float | None:
    """The agent's share of the best reference's advantage over ``vt_bh`` (``prefix="e_"``: of
    the expected Sharpe ratios); None without an agent or where no reference beats ``vt_bh`` by
    :data:`MIN_GAIN` (a share of nothing is noise: on a random walk the oracle's expected edge
    is its rounding)."""
    best = max(row[prefix + k] for k in ("rule", "oracle", "supervised"))
    gain = best - row[prefix + "vt_bh"]
    agent = row.get(prefix + "agent")
    if agent is None or gain < MIN_GAIN:
        return None
    return (agent - row[prefix + "vt_bh"]) / gain


def table(rows: list[dict[str, Any]], prefix: str = "") -> str:
    """A markdown table of realised (``prefix=""``) or expected (``"e_"``) Sharpe ratios."""
    judged = "val" if rows and "corr_val" in rows[0] else "test"  # the rows of --part
    cols = ["market", "seed", *REFERENCES, "agent", "capture", "corr train", f"corr {judged}"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cap = capture(r, prefix)
        cells = [r["market"], str(r["seed"]), *(f"{r[prefix + k]:.2f}" for k in REFERENCES)]
        cells[3] += f" ({r['rule_name']})"
        agent, corr = ["–", "–"], ["–", "–"]
        if "agent" in r:
            agent = [f"{r[prefix + 'agent']:.2f}", "–" if cap is None else f"{cap:.0%}"]
            corr = [f"{r[k]:.2f}" for k in ("corr_train", f"corr_{judged}")]
        lines.append("| " + " | ".join([*cells, *agent, *corr]) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, ylabel: str = "Sharpe, test rows") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [*REFERENCES, *(["fitted"] if rows and "fitted" in rows[0] else []), "agent"]
    labels = [f"{r['market']} s{r['seed']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), 3.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [r.get(name, np.nan) for r in rows]
        ax.bar(np.arange(len(rows)) + i * width, values, width, label=name)
    ax.set_xticks(np.arange(len(rows)) + 0.4 - width / 2, labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.margins(y=0.25)  # room for the legend above the bars
    ax.axhline(0, color="k", lw=0.5)
    ax.legend(fontsize=7, ncol=len(names))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def market_name(text: str) -> str:
    """An argparse type: a planted market's name, ``arPHI`` (|PHI| < 1), ``regimeBARS``,
    ``sigIC`` or ``sigshufIC`` (|IC| < 1)."""
    kinds = ("regime", "sigshuf", "sig", "ar")
    kind = next((k for k in kinds if text.startswith(k)), "")
    try:
        value = float(text[len(kind) :]) if kind else None
    except ValueError:
        value = None
    if value is None or not (value > 0 if kind == "regime" else abs(value) < 1):
        raise argparse.ArgumentTypeError(
            f"expected arPHI (an AR(1) coefficient, -1 < PHI < 1; ar0: a random walk), "
            f"regimeBARS (mean regime length > 0), sigIC (a forecast column `signal` with "
            f"information coefficient -1 < IC < 1; train with --set data.signals=[signal]) or "
            f"sigshufIC (the same column shuffled in time), got {text!r}"
        )
    return text


def parser() -> BenchParser:
    ap = BenchParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--markets",
        nargs="+",
        type=market_name,
        default=list(MARKETS),
        help="arPHI (ar0: a random walk), regimeBARS, sigIC, sigshufIC",
    )
    ap.add_argument(
        "--bars",
        type=positive_int,
        default=6000,
        help="bars per file (default 6000, about 24 years of days: a 250-bar regime's "
        "references are significant on every file tried; tables before 2026-11-30 used 3000)",
    )
    ap.add_argument("--seeds", type=non_negative_int, nargs="+", default=[1])
    ap.add_argument(
        "--steps", type=non_negative_int, default=150_000, help="agent steps; 0: references only"
    )
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    ap.add_argument("--workers", type=positive_int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--walkforward", action="store_true",
        help="judge each file by `riskppo walkforward` (out-of-sample record, verdict) instead "
        "of one split",
    )  # fmt: skip
    ap.add_argument(
        "--initial", type=positive_int, default=756, help="walk-forward: rows before the first test"
    )
    ap.add_argument(
        "--step", type=positive_int, default=374, help="walk-forward: rows per test segment"
    )
    ap.add_argument(
        "--agent-seeds",
        type=non_negative_int,
        nargs="+",
        default=[0, 1, 2],
        help="walk-forward seeds",
    )
    ap.add_argument(
        "--part", choices=("test", "val"), default="test",
        help="the rows judged (one split): choose settings on validation, report on test",
    )  # fmt: skip
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--market", help=argparse.SUPPRESS)
    return ap


def main() -> None:
    args = parser().parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="learnability-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        worker(args, out)
        return
    if args.walkforward:
        walkforward_main(args, out)
        return
    jobs = [(m, s) for m in args.markets for s in args.seeds]

    def run(job: tuple[str, int]) -> dict[str, Any]:
        m, s = job
        extra = [f"--set={x}" for x in args.sets]
        argv = ["--market", m, "--bars", str(args.bars), "--seeds", str(s)]
        argv += ["--steps", str(args.steps), "--part", args.part, "--out", str(out)]
        return run_worker(__file__, [*argv, *extra])

    with cf.ThreadPoolExecutor(args.workers) as pool:
        rows = list(pool.map(run, jobs))
    print(f"# learnability: {args.bars} bars, {args.steps} agent steps, {machine()}")
    print(f"# agent settings: {args.sets or 'the shipped GOOGL config'}")
    print(f"# realised Sharpe ratio, {args.part} rows")
    print(table(rows))
    print(
        f"# expected Sharpe ratio, {args.part} rows (the planted conditional mean; no realised "
        "noise)"
    )
    print(table(rows, "e_"))
    (out / "learnability.json").write_text(json.dumps(rows, indent=1))
    plot(rows, out / "learnability.png", f"Sharpe, {args.part} rows")
    print(f"# figures and plot: {out}")


def walkforward_main(args: argparse.Namespace, out: Path) -> None:
    """The suite judged by ``riskppo walkforward``: one run per file (continued if ``--out``
    holds an unfinished one), its table, JSON and plot."""
    from _learnability_walkforward import floor_check, walkforward_row, walkforward_table

    keys = ("steps", "initial", "step", "agent_seeds", "workers", "bars")
    options = {k: getattr(args, k) for k in keys}
    rows = [
        walkforward_row(m, s, out, args.sets, options) for m in args.markets for s in args.seeds
    ]
    print(f"# learnability, walk-forward: {args.bars} bars, first test row {args.initial}, "
          f"retrained every {args.step}, agent seeds {args.agent_seeds} (their mean record), "
          f"{args.steps} steps per cell; {machine()}")  # fmt: skip
    print(f"# agent settings: {args.sets or 'the shipped GOOGL config'}")
    print(walkforward_table(rows, capture))
    if no_edge := [r for r in rows if r["market"] == "ar0"]:
        print(floor_check(out, no_edge))
    (out / "learnability_walkforward.json").write_text(json.dumps(rows, indent=1))
    plot(rows, out / "learnability_walkforward.png", "Sharpe, out-of-sample bars")
    print(f"# runs, figures and plot: {out}")


if __name__ == "__main__":
    sys.exit(run_main(main))
