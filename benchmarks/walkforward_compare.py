"""Finished walk-forward runs side by side: the CVaR limit cell by cell and on each seed's
stitched record, the verdict, exposure and how much of it is the core position, λ and the risk
overlay's binding share.

Reads the run directories ``riskppo walkforward`` wrote (``metrics.json``, ``records/``); trains
nothing. Prints one Markdown table (rows: runs), for docs and closing notes::

    python benchmarks/walkforward_compare.py "before=runs/wf_googl" "after=runs/ov_wf_googl"

Columns: cells meeting the limit; seeds whose whole stitched record meets it; the seeds' mean
record's horizon CVaR, Sharpe ratio, vol-targeted buy-and-hold's Sharpe and one-sided p (HAC,
adjusted for the run's trials); the annual return of the agent and of the benchmark scaled to
the agent's CVaR (what the passive position earns at the same tail risk); mean |exposure|; the
share of bars in the market (|exposure| >= 0.05) and the share at the core position (signal
within 0.01 of the env's lowest, for ``long_only`` agents); λ at the end of training (mean, and
the share of cells with λ > 0); the overlay's binding share out of sample; and, for a run with a
risk overlay, the passive full signal held through the same env (sizing, costs, fill, overlay;
one episode over the record's bars) and the agent's Sharpe difference against it with its
one-sided HAC p (not adjusted) — how much of the record is the agent's timing rather than the
overlay's. Sharpe ratios are those
of the verdict (net log returns).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from _common import BenchError, BenchParser, run_main

from riskppo.config import Config
from riskppo.envs.market.datasets import DATASETS
from riskppo.envs.registration import data_kwargs, resolve_overlay
from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.trading.factory import trading_range
from riskppo.stats.core import sharpe, sharpe_difference_hac

CORE_TOL = 0.01


def core_share(run: Path) -> float | None:
    """Share of the seeds' out-of-sample bars whose agent signal sits at its lowest value."""
    frames = [pd.read_csv(p) for p in sorted((run / "records").glob("s*.csv"))]
    if not frames:
        return None
    signals = pd.concat(f["agent_signal"] for f in frames)
    low = signals.min()
    return float((signals <= low + CORE_TOL).mean()) if low > 0 else None


def passive_overlay(run: Path, index: pd.DatetimeIndex) -> pd.Series | None:
    """Net log returns of the full signal held through the run's agent env (sizing, costs, fill
    and risk overlay as configured; no agent) over the out-of-sample bars ``index`` — one
    episode, not restarted per segment. None for a run without an overlay."""
    cfg = Config.from_yaml(run / "config.yaml")
    kwargs = resolve_overlay(cfg.env.kwargs, cfg.risk)
    if "overlay" not in kwargs:
        return None
    data = {**data_kwargs(cfg.data), "bars": None}
    df, _, _ = trading_range(part="train", **data)
    if cfg.data.dataset is not None and cfg.data.path is None:
        kwargs.setdefault("bars_per_year", DATASETS[cfg.data.dataset].bars_per_year)
    first = int(df.index.searchsorted(index[0])) - 1  # the decision bar before the first
    env = TradingEnv(df, **{**kwargs, "random_start": False, "start": first})
    env.reset()
    out, t = {}, None
    action = env.action_for_signal(np.ones(1))[0]
    while t is None or t < index[-1]:
        info = env.step(action)[4]
        t = pd.Timestamp(info["timestamp"])
        out[t] = info["gross_return"] - info["costs"]
    return pd.Series(out).reindex(index).fillna(0.0)


def row(label: str, run: Path) -> dict[str, Any]:
    m = json.loads((run / "metrics.json").read_text())
    recs = m["records"]
    seeds = {k: v for k, v in recs.items() if k.startswith("seed")}
    mean = recs.get("mean of seeds") or next(iter(recs.values()))
    agent = mean["metrics"]["agent"]
    matched = mean["metrics"].get("vol_target_cvar_matched") or {}
    cells = pd.DataFrame(m["cells"])
    risk = m.get("risk") or {}
    verdict = mean["verdict"]
    stats = mean["stats"]  # the verdict's figures: Sharpe of net log returns
    seeds_met = sum(bool(s["metrics"]["agent"]["cvar_limit_met"]) for s in seeds.values())
    return {
        "run": label,
        "limit": f"{m['cvar_limit']:g}",
        "cells met": f"{m['cells_limit_met']}/{m['cells_with_limit']}",
        "seeds met (stitched)": f"{seeds_met}/{len(seeds)}",
        "CVaR20": f"{agent['cvar_horizon']:.2%}",
        "Sharpe [95%]": _interval(stats["agent"]["sharpe"]),
        "VT B&H Sharpe [95%]": _interval(stats["benchmark"]["sharpe"]),
        "p (adj.)": f"{verdict.get('p_adjusted', float('nan')):.2g}",
        "return/yr": f"{agent['annual_return']:.1%}",
        "VT B&H at agent's CVaR, return/yr": f"{matched['annual_return']:.1%}" if matched else "–",
        "|exposure|": f"{agent['mean_abs_exposure']:.3f}",
        "in market": f"{cells['market_share'].mean():.0%}",
        "at core": _pct(core_share(run)),
        "λ mean (>0)": f"{risk['lambda_mean']:.2f} ({risk['lambda_positive_share']:.0%})"
        if risk.get("lambda_mean") is not None
        else "–",
        "overlay bound": _pct(risk.get("overlay_binding_oos")),
        **_against_passive_overlay(run, m["bars_per_year"]),
    }


def _against_passive_overlay(run: Path, bpy: float) -> dict[str, str]:
    """The agent's mean record against the passive full signal under the same overlay."""
    mean = pd.read_csv(run / "records" / "mean.csv", index_col=0, parse_dates=True)
    passive = passive_overlay(run, pd.DatetimeIndex(mean.index))
    if passive is None:
        return {"passive overlay Sharpe": "–", "agent − passive, p": "–"}
    agent = np.expm1(mean["agent_log_return"].to_numpy())  # the accounts' simple returns
    other = np.expm1(passive.to_numpy())
    test = sharpe_difference_hac(agent, other, bpy)
    return {
        "passive overlay Sharpe": f"{sharpe(other, bpy):.2f}",
        "agent − passive, p": f"{test.diff:+.2f}, {test.p_one_sided:.2g}",
    }


def _interval(s: dict[str, float]) -> str:
    """A Sharpe estimate with its block-bootstrap interval."""
    return f"{s['estimate']:.2f} [{s['low']:.2f}, {s['high']:.2f}]"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def main() -> None:
    ap = BenchParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    args = ap.parse_args()
    rows = []
    for spec in args.runs:
        label, _, path = spec.partition("=")
        if not (label and path):
            raise BenchError(f"{spec!r}: expected LABEL=RUN_DIR (a walk-forward run directory)")
        rows.append(row(label, Path(path)))
    table = pd.DataFrame(rows)
    print("| " + " | ".join(table.columns) + " |")
    print("|" + "---|" * len(table.columns))
    for r in table.itertuples(index=False):
        print("| " + " | ".join(map(str, r)) + " |")


if __name__ == "__main__":
    sys.exit(run_main(main))
