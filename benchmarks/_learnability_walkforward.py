"""The learnability suite as a walk-forward: ``riskppo walkforward`` on each planted file, and the
references over the same out-of-sample bars (``benchmarks/learnability.py --walkforward``).

The agent's record is the command's own (the seeds' mean record the verdict is read on). The
references are computed segment by segment on the same rows as the cells, with the same
sizing, overlay, fills and fees: ``vt_bh`` (the full signal in the agent's env), the best
simple rule chosen on each segment's training rows, the oracle (the best forecast from the
prices under the generating model, in the band), the same model family with its numbers
estimated on each segment's training rows (``fitted``: what the prices can teach a learner that
knows the form of the edge but not its size) and the supervised ridge baseline fitted on each
segment's training rows. Each gets the realised and the expected Sharpe ratio over the stitched
out-of-sample bars and the one-sided p-value of the paired HAC test (Ledoit & Wolf 2008)
against ``vt_bh``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from _planted_refs import best_rule, fitted_forecast, make_market, run_signals, scores


def run_walkforward(csv: Path, run_dir: Path, sets: list[str], options: dict[str, Any]) -> None:
    """``riskppo walkforward`` on ``csv`` in a fresh process (continued where ``run_dir`` holds
    an unfinished run); raises with the command's last lines when it fails."""
    if (run_dir / "metrics.json").is_file():
        return
    head = ["--resume", str(run_dir)] if (run_dir / "walkforward.json").is_file() else None
    argv = head or [
        "--run-dir", str(run_dir), "--set", f"data.path={csv}", "--set", "data.dataset=null",
        "--set", f"total_timesteps={options['steps']}",
        *(x for s in sets for x in ("--set", s)),
        "--initial", str(options["initial"]), "--step", str(options["step"]),
        "--seeds", *(str(s) for s in options["agent_seeds"]),
    ]  # fmt: skip
    cmd = [sys.executable, "-m", "riskppo.cli", "walkforward", *argv, "--no-progress"]
    cmd += ["--workers", str(options["workers"])]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


def reference_frames(
    cfg: Any, segments: list[dict[str, Any]], planted: Any, market: str
) -> dict[str, Any]:
    """Per reference, its strategy frame over every segment's test rows (stitched)."""
    from riskppo.evaluation.backtest import _agent_env
    from riskppo.evaluation.supervised import forecast_signals, supervised_signals
    from riskppo.walkforward.plan import Segment, cell_config

    parts: dict[str, list[pd.DataFrame]] = {}
    z = planted.forecast / planted.sigma  # the oracle: the best forecast from the prices
    for seg in segments:
        cell = cell_config(cfg, Segment(**seg), 0, cfg.total_timesteps)
        _, train_env = _agent_env(cell, "train")
        _, test_env = _agent_env(cell, "test")
        lo, hi = train_env.trading_range
        fitted = fitted_forecast(market, train_env.df, lo, hi)
        signals = {
            "vt_bh": np.full(len(test_env.df), test_env.signal_range[1]),
            "floor": np.full(len(test_env.df), test_env.signal_range[0]),
            "rule": best_rule(train_env)[1],
            "oracle": forecast_signals(z, float(np.std(z[lo:hi])), test_env.signal_range),
            "fitted": forecast_signals(fitted, float(np.std(fitted[lo:hi])), test_env.signal_range),
            "supervised": supervised_signals(train_env, test_env)[0],
        }
        for name, sig in signals.items():
            parts.setdefault(name, []).append(run_signals(test_env, sig))
    return {name: pd.concat(frames) for name, frames in parts.items()}


def walkforward_row(
    market: str, seed: int, out: Path, sets: list[str], options: dict[str, Any]
) -> dict[str, Any]:
    """Run (or read back) one planted file's walk-forward; its row of the suite's table."""
    from riskppo.config import Config
    from riskppo.stats import paired_sharpe_test
    from riskppo.walkforward.report import headline

    df, planted = make_market(market, options["bars"], seed)
    csv = out / f"{market}_s{seed}.csv"
    df.to_csv(csv)
    run_dir = out / f"wf_{market}_s{seed}"
    run_walkforward(csv, run_dir, sets, options)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    cfg = Config.from_yaml(run_dir / "config.yaml")
    segments = json.loads((run_dir / "walkforward.json").read_text())["segments"]
    name = "mean.csv" if len(options["agent_seeds"]) > 1 else f"s{options['agent_seeds'][0]}.csv"
    record = pd.read_csv(run_dir / "records" / name, index_col=0, parse_dates=True)
    agent = pd.DataFrame({c: record[f"agent_{c}"] for c in ("position", "signal", "log_return",
                                                          "costs")})  # fmt: skip
    frames = {**reference_frames(cfg, segments, planted, market), "agent": agent}
    expected = pd.Series(planted.cond_mean, index=df.index).shift(1)
    info = pd.Series(planted.info, index=df.index).shift(1)
    bench = np.expm1(frames["vt_bh"]["log_return"].to_numpy())  # the accounts' simple returns
    if not frames["vt_bh"].index.equals(agent.index):
        raise RuntimeError(f"{market}: the references' bars differ from the walk-forward record's")
    row: dict[str, Any] = {"market": market, "seed": seed, "bars": len(agent)}
    for key, frame in frames.items():
        row[key], row[f"e_{key}"] = scores(frame, expected)
        if key != "vt_bh":
            test = paired_sharpe_test(np.expm1(frame["log_return"].to_numpy()), bench, 252)
            row[f"p_{key}"] = test.p_one_sided
    row["corr_test"] = float(agent["signal"].corr(info.reindex(agent.index)))
    lo, hi = frames["floor"]["signal"].min(), frames["vt_bh"]["signal"].max()  # the band
    sig = agent["signal"]
    row["at_bound"] = float(((sig <= lo + 1e-6) | (sig >= hi - 1e-6)).mean())
    gross = np.expm1(agent["log_return"] + agent["costs"])  # before the agent's own costs
    floor = np.expm1(frames["floor"]["log_return"])
    pd.DataFrame({"agent_gross": gross, "floor": floor}).to_csv(run_dir / "floor_pair.csv")
    verdict = headline(metrics)["verdict"]
    row["verdict_claim"], row["verdict_p"] = verdict["claim"], verdict["p_adjusted"]
    return row


def floor_check(out: Path, rows: list[dict[str, Any]]) -> str:
    """Does the agent trail its own floor position by more than its costs? Its returns before
    its costs against the floor position's (the band's bottom held throughout), pooled over the
    rows' records (one-sided paired HAC test of H1: the floor's Sharpe ratio is higher)."""
    from riskppo.stats import sharpe_difference_hac
    from riskppo.stats.core import sharpe

    pairs = pd.concat(
        pd.read_csv(out / f"wf_{r['market']}_s{r['seed']}" / "floor_pair.csv", index_col=0)
        for r in rows
    )
    a, f = pairs["agent_gross"].to_numpy(), pairs["floor"].to_numpy()
    test = sharpe_difference_hac(f, a, 252)
    return (f"# the agent before its costs vs its floor position, {len(rows)} files pooled "
            f"({len(pairs)} bars): Sharpe {sharpe(a, 252):.3f} vs {sharpe(f, 252):.3f}, "
            f"one-sided p (floor higher) {test.p_one_sided:.3f}")  # fmt: skip


def walkforward_table(rows: list[dict[str, Any]], capture: Any) -> str:
    """A markdown table of the walk-forward rows: realised Sharpe ratios over the out-of-sample
    bars with one-sided p-values against ``vt_bh``, the verdict, the capture of the best
    reference's advantage (realised and expected), the signal's correlation and its share of
    bars at a bound of its band (all-or-floor or linear)."""
    cols = ["market", "seed", "OOS bars", "vt_bh", "rule", "oracle", "fitted", "supervised",
            "agent", "verdict (adj. p)", "capture", "e_capture", "corr", "at bound"]  # fmt: skip
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]

    def cell(r: dict[str, Any], k: str) -> str:
        return f"{r[k]:.2f} (p {r['p_' + k]:.3f})"

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{x:.0%}"

    for r in rows:
        claim = "edge" if r["verdict_claim"] else "no edge"
        cells = [r["market"], str(r["seed"]), str(r["bars"]), f"{r['vt_bh']:.2f}",
                 *(cell(r, k) for k in ("rule", "oracle", "fitted", "supervised", "agent")),
                 f"{claim} ({r['verdict_p']:.3f})", pct(capture(r)), pct(capture(r, "e_")),
                 f"{r['corr_test']:.2f}", f"{r['at_bound']:.0%}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
