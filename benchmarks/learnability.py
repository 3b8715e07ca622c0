"""Does the agent find an edge that is there? Planted markets, references and the agent.

Each market is a seeded synthetic daily file with an edge planted by construction
(``riskppo.envs.market.planted``: AR(1) momentum at several strengths, short-term reversal, slow
bull/bear regimes, a random walk; GARCH-t noise; opens that make the edge tradable at the next
open), written as a user's CSV and traded through the shipped GOOGL configuration (``--set``
changes it). On the same bars, sizing, overlay, fills and fees:

* ``vt_bh`` — vol-targeted buy-and-hold (the full signal);
* ``rule`` — the best simple rule: momentum or reversal over 1, 5, 20 or 60 bars (top of the band
  when the sign says up, its floor else), chosen by Sharpe on the training rows;
* ``oracle`` — the true conditional mean of the next return in units of its volatility, mapped
  into the band (``riskppo.evaluation.supervised.forecast_signals``);
* ``supervised`` — the agent's features → a ridge forecast fitted on the training rows → the band;
* ``agent`` — the trained agent, deterministic.

Printed per market: the test rows' annualised Sharpe ratio of each, the agent's capture of the
best reference's advantage over ``vt_bh`` (``(agent − vt_bh) / (best − vt_bh)``, where the best
reference beats ``vt_bh``) and the correlation of the agent's signal with the planted
information on the training and the test rows. One split (70/15/15) per market and seed: the
test rows are 450 bars, where one Sharpe ratio has a sampling error of about 0.75 — a
diagnostic, not a verdict (``riskppo walkforward`` gives that). ``--out`` keeps the CSVs, a JSON
of every figure and a plot.

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
from _common import machine, run_worker

MARKETS = ("ar0.05", "ar0.1", "ar0.15", "ar0.2", "ar-0.1", "regime60", "regime120", "ar0")
REFERENCES = ("vt_bh", "rule", "oracle", "supervised")


def make_market(name: str, bars: int, seed: int) -> tuple[Any, Any]:
    from riskppo.envs.market.planted import ar_market, regime_market

    if name.startswith("regime"):
        return regime_market(bars, duration=float(name[6:]), seed=seed)
    return ar_market(bars, phi=float(name[2:]), seed=seed)


def sharpe(r: np.ndarray) -> float:
    """Annualised Sharpe ratio of daily log returns (the verdict's own statistic)."""
    from riskppo.stats.core import sharpe as annualised

    return annualised(r, 252)


def _run_signals(env: Any, signals: np.ndarray) -> np.ndarray:
    from riskppo.evaluation.baselines import run_policy

    return run_policy(env, lambda bar: float(signals[bar]))["log_return"].to_numpy()


def _rule_signals(close: np.ndarray, k: int, sign: int, band: tuple[float, float]) -> np.ndarray:
    logc = np.log(close)
    move = np.full(len(close), np.nan)
    move[k:] = logc[k:] - logc[:-k]
    return np.where(sign * np.nan_to_num(move) > 0, band[1], band[0])


def best_rule(train_env: Any) -> tuple[str, np.ndarray]:
    """The rule with the best Sharpe on the training rows, and its signals over the frame."""
    close = train_env.df["close"].to_numpy(np.float64)
    best: tuple[float, str, np.ndarray] | None = None
    for k in (1, 5, 20, 60):
        for sign, label in ((1, "mom"), (-1, "rev")):
            sig = _rule_signals(close, k, sign, train_env.signal_range)
            s = sharpe(_run_signals(train_env, sig))
            if best is None or s > best[0]:
                best = (s, f"{label}{k}", sig)
    assert best is not None
    return best[1], best[2]


def references(cfg: Any, planted: Any) -> dict[str, Any]:
    """Test-row Sharpe ratios of the references (and the rule's name)."""
    from riskppo.evaluation.backtest import _agent_env
    from riskppo.evaluation.supervised import forecast_signals, supervised_signals

    _, train_env = _agent_env(cfg, "train")
    _, test_env = _agent_env(cfg, "test")
    rule, rule_sig = best_rule(train_env)
    z = planted.cond_mean / planted.sigma
    lo, hi = train_env.trading_range
    oracle = forecast_signals(z, float(np.std(z[lo:hi])), test_env.signal_range)
    supervised, _ = supervised_signals(train_env, test_env)
    full = np.full(len(test_env.df), test_env.signal_range[1])
    out = {
        "vt_bh": sharpe(_run_signals(test_env, full)),
        "rule": sharpe(_run_signals(test_env, rule_sig)),
        "oracle": sharpe(_run_signals(test_env, oracle)),
        "supervised": sharpe(_run_signals(test_env, supervised)),
    }
    return {**out, "rule_name": rule}


def worker(market: str, bars: int, seed: int, steps: int, sets: list[str], out: Path) -> None:
    import pandas as pd
    import torch

    from riskppo import DistributionalPPO
    from riskppo.config import Config, apply_overrides
    from riskppo.config.bundled import resolve_config_path
    from riskppo.evaluation.backtest import backtest

    torch.set_num_threads(1)
    df, planted = make_market(market, bars, seed)
    path = out / f"{market}_s{seed}.csv"
    df.to_csv(path)
    cfg = apply_overrides(
        Config.from_yaml(resolve_config_path("trading_googl")),
        [f"data.path={path}", "data.dataset=null", f"total_timesteps={max(steps, 1)}",
         f"seed={seed}", *sets],
    )  # fmt: skip
    row: dict[str, Any] = {"market": market, "seed": seed, **references(cfg, planted)}
    if steps > 0:
        model = DistributionalPPO(config=cfg)
        model.learn(steps)
        info = pd.Series(planted.info, index=df.index).shift(1)
        for part in ("train", "test"):
            frame = backtest(model, part).frames["agent"]
            row[f"corr_{part}"] = float(frame["signal"].corr(info.reindex(frame.index)))
            if part == "test":
                row["agent"] = sharpe(frame["log_return"].to_numpy())
                row["signal_sd"] = float(frame["signal"].std())
    print(json.dumps(row))


def capture(row: dict[str, Any]) -> float | None:
    best = max(row[k] for k in ("rule", "oracle", "supervised"))
    gain = best - row["vt_bh"]
    return (row["agent"] - row["vt_bh"]) / gain if "agent" in row and gain > 0 else None


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["market", "seed", *REFERENCES, "agent", "capture", "corr train", "corr test"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cap = capture(r)
        cells = [r["market"], str(r["seed"]), *(f"{r[k]:.2f}" for k in REFERENCES)]
        cells[3] += f" ({r['rule_name']})"
        agent = (
            [f"{r['agent']:.2f}", "–" if cap is None else f"{cap:.0%}"]
            if "agent" in r
            else ["–", "–"]
        )
        corr = [f"{r[k]:.2f}" for k in ("corr_train", "corr_test")] if "agent" in r else ["–", "–"]
        lines.append("| " + " | ".join([*cells, *agent, *corr]) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [*REFERENCES, "agent"]
    labels = [f"{r['market']} s{r['seed']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), 3.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [r.get(name, np.nan) for r in rows]
        ax.bar(np.arange(len(rows)) + i * width, values, width, label=name)
    ax.set_xticks(np.arange(len(rows)) + 0.4 - width / 2, labels, rotation=30, ha="right")
    ax.set_ylabel("Sharpe, test rows")
    ax.axhline(0, color="k", lw=0.5)
    ax.legend(fontsize=7, ncol=len(names))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--markets", nargs="+", default=list(MARKETS), help="arPHI (ar0: a random walk), regimeBARS"
    )
    ap.add_argument("--bars", type=int, default=3000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--steps", type=int, default=150_000, help="agent steps; 0: references only")
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--market", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="learnability-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        worker(args.market, args.bars, args.seeds[0], args.steps, args.sets, out)
        return
    jobs = [(m, s) for m in args.markets for s in args.seeds]

    def run(job: tuple[str, int]) -> dict[str, Any]:
        m, s = job
        extra = [f"--set={x}" for x in args.sets]
        argv = ["--market", m, "--bars", str(args.bars), "--seeds", str(s)]
        return run_worker(__file__, [*argv, "--steps", str(args.steps), "--out", str(out), *extra])

    with cf.ThreadPoolExecutor(args.workers) as pool:
        rows = list(pool.map(run, jobs))
    print(f"# learnability: {args.bars} bars, {args.steps} agent steps, {machine()}")
    print(f"# agent settings: {args.sets or 'the shipped GOOGL config'}; test rows' Sharpe")
    print(table(rows))
    (out / "learnability.json").write_text(json.dumps(rows, indent=1))
    plot(rows, out / "learnability.png")
    print(f"# figures and plot: {out}")


if __name__ == "__main__":
    main()
