"""The walk-forward verdict on a portfolio agent against the skfolio baselines: metrics of every
strategy on the stitched out-of-sample bars, the portfolio's horizon CVaR against the limit per
segment, the paired Sharpe test against the best baseline, and four charts (stitched equity, the
agent's weights over time, turnover, CVaR per segment vs the limit).

A *record* is one frame per seed: for each strategy ``s`` the columns ``s_log_return``,
``s_gross_exposure``, ``s_turnover``, ``s_w_<SYMBOL>`` (:mod:`riskppo.evaluation.
portfolio_backtest`), and ``segment``; segments are stitched oldest first.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from riskppo import stats
from riskppo.evaluation.limit_backtest import risk_line
from riskppo.evaluation.metrics import DEFAULT_CVAR_HORIZON, horizon_cvar, strategy_metrics
from riskppo.evaluation.plots import figure_png, new_figure
from riskppo.evaluation.portfolio.backtest import OVERLAY_SUFFIX
from riskppo.evaluation.trials import trials_html
from riskppo.jsonable import jsonable
from riskppo.safefs import write_bytes_atomic, write_text_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "analyse_portfolio",
    "best_baseline",
    "cell_frame",
    "mean_frame",
    "plot_cvar",
    "plot_equity",
    "plot_turnover",
    "plot_weights",
    "strategies",
    "write_portfolio_report",
]

_SUFFIX = "_log_return"


def cell_frame(frames: Mapping[str, pd.DataFrame], segment: int) -> pd.DataFrame:
    """One segment's record: each strategy's frame with its name as column prefix."""
    parts = [f.add_prefix(f"{name}_") for name, f in frames.items()]
    first = next(iter(frames.values()))
    return pd.concat([*parts, pd.Series(segment, index=first.index, name="segment")], axis=1)


def strategies(frame: pd.DataFrame) -> list[str]:
    """The strategies of a record, in column order (``agent`` first where it is)."""
    return [c[: -len(_SUFFIX)] for c in frame.columns if c.endswith(_SUFFIX)]


def mean_frame(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The seeds' average record: capital split equally over the seeds' agents (the baselines
    are deterministic, so theirs are unchanged)."""
    first = frames[0]
    for f in frames[1:]:
        if not f.index.equals(first.index):
            raise ValueError("the seeds' records cover different bars")
    out = sum((f.drop(columns="segment") for f in frames[1:]), first.drop(columns="segment"))
    return pd.concat([out / len(frames), first["segment"]], axis=1)  # one block per part


def _metrics(frame: pd.DataFrame, name: str, bpy: float, risk: Mapping[str, Any]) -> dict[str, Any]:
    m = strategy_metrics(
        frame[f"{name}_log_return"],
        frame[f"{name}_gross_exposure"],
        bars_per_year=bpy,
        cvar_alpha=risk["alpha"],
        cvar_horizon=risk["horizon"],
        cvar_limit=risk["limit"],
    ).to_dict()
    m["turnover"] = float(frame[f"{name}_turnover"].mean() * bpy)  # Σ|Δweight| per year
    return m


def _segment_cvar(frame: pd.DataFrame, names: Sequence[str], risk: Mapping[str, Any]) -> list[Any]:
    rows = []
    for seg, part in frame.groupby("segment", sort=True):
        row: dict[str, Any] = {"segment": int(seg), "start": str(part.index[0])}
        for n in names:
            row[n] = horizon_cvar(
                part[f"{n}_log_return"].to_numpy(), risk["alpha"], risk["horizon"]
            )
        cv = row.get("agent")
        row["limit_met"] = None if risk["limit"] is None or cv is None else cv >= risk["limit"]
        rows.append(row)
    return rows


def analyse_portfolio(
    records: Mapping[str, pd.DataFrame],
    *,
    bars_per_year: float,
    cvar_alpha: float,
    cvar_horizon: int | None,
    cvar_limit: float | None,
    n_trials: int = 1,
) -> dict[str, Any]:
    """``metrics.json`` of a portfolio walk-forward (module docstring); ``records``: label ->
    stitched record of each seed. The verdict is read on the seeds' mean record."""
    horizon = DEFAULT_CVAR_HORIZON if cvar_horizon is None else int(cvar_horizon)
    risk = {"alpha": cvar_alpha, "horizon": horizon, "limit": cvar_limit}
    frames = list(records.values())
    mean = mean_frame(frames) if len(frames) > 1 else frames[0]
    names = strategies(mean)
    baselines = [n for n in names if n != "agent"]
    metrics = {n: _metrics(mean, n, bars_per_year, risk) for n in names}
    best, rule = best_baseline(metrics, baselines)
    # the accounts' simple returns, as the metrics' Sharpe ratios
    agent_r, best_r = np.expm1(mean["agent_log_return"]), np.expm1(mean[f"{best}_log_return"])
    test = stats.paired_sharpe_test(agent_r, best_r, bars_per_year)
    verdict = stats.verdict(test, n_trials, best.replace("_", " "))
    seeds = {label: _segment_cvar(f, ["agent"], risk) for label, f in records.items()}
    met = [r["limit_met"] for rows in seeds.values() for r in rows if r["limit_met"] is not None]
    weights = mean[[c for c in mean.columns if c.startswith("agent_w_")]]
    contrib = {n: _contributions(mean, n) for n in names}
    return {
        "bars_per_year": bars_per_year,
        "oos_bars": len(mean),
        "start": str(mean.index[0]),
        "end": str(mean.index[-1]),
        "n_trials": n_trials,
        "cvar_limit": cvar_limit,
        "cvar_alpha": cvar_alpha,
        "cvar_horizon": horizon,
        "metrics": metrics,
        "sharpe_ci": {n: _ci(np.expm1(mean[f"{n}_log_return"]), bars_per_year) for n in names},
        "best_baseline": best,
        "best_baseline_rule": rule,
        "paired_test": {"diff": test.diff, "p_one_sided": test.p_one_sided, "method": test.method},
        "verdict": {"claim": verdict.claim, "p_adjusted": verdict.p_adjusted, "text": verdict.text},
        "segments": _segment_cvar(mean, names, risk),
        "cells_limit_met": sum(bool(m) for m in met),
        "cells_with_limit": len(met),
        "mean_weights": {c[len("agent_w_") :]: float(weights[c].mean()) for c in weights.columns},
        "contributions": contrib,
    }


def best_baseline(
    metrics: Mapping[str, Mapping[str, Any]], names: Sequence[str]
) -> tuple[str, str]:
    """The baseline the agent is tested against, and why: the highest Sharpe among those that
    keep the CVaR limit over the record (a constrained baseline, e.g. one held under the agent's
    overlay), else — none keeps it, or there is no limit — the highest Sharpe of all."""
    kept = [n for n in names if metrics[n].get("cvar_limit_met")]
    best = max(kept or names, key=lambda n: metrics[n]["sharpe"] or -np.inf)
    if kept:
        return best, "the best Sharpe of the baselines that keep the limit"
    return best, "the best Sharpe of all baselines (none keeps the limit)"


def _contributions(frame: pd.DataFrame, name: str) -> dict[str, float]:
    """Strategy ``name``'s per-asset contributions summed over the record (simple-return units:
    each bar's part of that bar's return, added up, not compounded)."""
    prefix = f"{name}_c_"
    return {c[len(prefix) :]: float(frame[c].sum()) for c in frame.columns if c.startswith(prefix)}


def _ci(r: pd.Series, bpy: float) -> list[float] | None:
    """95% stationary-bootstrap interval of the annualised Sharpe ratio (None if undefined)."""
    try:
        ci = stats.sharpe_ci(r.to_numpy(), bpy, n_resamples=1000, seed=0)
    except ValueError:
        return None
    return [float(ci.low), float(ci.high)] if np.isfinite([ci.low, ci.high]).all() else None


def _styles(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Line colour and style per strategy: a baseline held under the overlay is dashed, in the
    colour of the same baseline held without it."""
    base = [n.removesuffix(OVERLAY_SUFFIX) for n in names]
    order = list(dict.fromkeys(base))
    return {
        n: {"color": f"C{order.index(b) % 10}", "ls": "-" if n == b else "--"}
        for n, b in zip(names, base, strict=True)
    }


def _fig(height: float = 4.5) -> Figure:
    return new_figure(10, height, dpi=110)


def plot_equity(records: Mapping[str, pd.DataFrame], mean: pd.DataFrame) -> Figure:
    """Stitched equity of the agent (each seed faint, the mean bold) and every baseline."""
    fig = _fig(5.5)
    ax = fig.subplots()
    if len(records) > 1:
        for f in records.values():
            ax.plot(np.exp(f["agent_log_return"].cumsum()), color="C0", alpha=0.25, lw=0.8)
    names = strategies(mean)
    for n, style in _styles(names).items():
        eq = np.exp(mean[f"{n}_log_return"].cumsum())
        ax.plot(eq, **style, lw=2.2 if n == "agent" else 1.1, label=n.replace("_", " "))
    for t in mean.index[mean["segment"].diff().fillna(0) != 0]:
        ax.axvline(t, color="#b8b8b8", lw=0.7, ls=":")
    ax.set_ylabel("equity (start = 1)")
    retrained = mean["segment"].nunique() > 1
    ax.set_title(
        "Walk-forward out-of-sample equity (dotted lines: retraining)"
        if retrained
        else "Out-of-sample equity",
        loc="left",
    )
    ax.legend(loc="upper left", fontsize=9, ncol=2, frameon=False)
    ax.grid(True, color="#e3e3e3", lw=0.8)
    return fig


def plot_weights(mean: pd.DataFrame) -> Figure:
    """The agent's filled weights over time, stacked (the gap to 1 is cash)."""
    fig = _fig(5.0)
    ax = fig.subplots()
    cols = [c for c in mean.columns if c.startswith("agent_w_")]
    w = mean[cols].clip(lower=0.0)
    from matplotlib import colormaps

    colors = colormaps["tab20"](np.arange(len(cols)) % 20)
    labels = [c[len("agent_w_") :] for c in cols]
    ax.stackplot(w.index, w.to_numpy().T, labels=labels, colors=colors, lw=0)
    ax.set_ylabel("weight")
    ax.set_title("Agent weights (stacked; the rest is cash)", loc="left")
    ax.legend(loc="upper left", ncol=10, fontsize=7, frameon=False)
    return fig


def plot_turnover(mean: pd.DataFrame, window: int = 20) -> Figure:
    """Turnover (Σ|Δweight|) over rolling ``window``-bar periods, per strategy."""
    fig = _fig()
    ax = fig.subplots()
    for n, style in _styles(strategies(mean)).items():
        roll = mean[f"{n}_turnover"].rolling(window, min_periods=1).sum()
        ax.plot(roll, **style, lw=1.6 if n == "agent" else 0.9, label=n.replace("_", " "))
    ax.set_ylabel(f"turnover per {window} bars")
    ax.legend(loc="upper left", fontsize=8, ncol=2, frameon=False)
    ax.grid(True, color="#e3e3e3", lw=0.8)
    return fig


def plot_cvar(metrics: Mapping[str, Any]) -> Figure:
    """Per segment: each strategy's horizon CVaR and the limit."""
    from matplotlib.ticker import MaxNLocator

    fig = _fig()
    ax = fig.subplots()
    seg = pd.DataFrame(metrics["segments"])
    for n, style in _styles(list(metrics["metrics"])).items():
        ax.plot(
            seg["segment"],
            seg[n],
            marker="o" if n == "agent" else ".",
            **style,
            lw=1.6 if n == "agent" else 0.8,
            label=n.replace("_", " "),
        )
    if metrics["cvar_limit"] is not None:
        ax.axhline(metrics["cvar_limit"], color="black", ls="--", lw=1, label="limit")
    ax.set_xlabel("segment")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"CVaR of {metrics['cvar_horizon']}-bar log returns")
    ax.legend(loc="lower left", fontsize=8, ncol=2, frameon=False)
    ax.grid(True, color="#e3e3e3", lw=0.8)
    return fig


def _table(metrics: Mapping[str, Any]) -> str:
    keys = (
        "sharpe",
        "annual_return",
        "annual_volatility",
        "max_drawdown",
        "cvar_horizon",
        "turnover",
        "mean_abs_exposure",
    )
    head = "".join(f"<th>{k}</th>" for k in ("strategy", "sharpe 95% CI", *keys))
    rows = []
    for n, m in metrics["metrics"].items():
        ci = metrics["sharpe_ci"].get(n)
        cells = [n, "-" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"]
        cells += ["-" if m.get(k) is None else f"{m[k]:.4g}" for k in keys]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _contribution_line(metrics: Mapping[str, Any]) -> str:
    """The agent's per-asset contributions, largest first (simple-return sums)."""
    items = sorted(metrics["contributions"].get("agent", {}).items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{html.escape(s)} {v:+.2%}" for s, v in items)
    return f"<p>Agent's return by asset (sum over the bars): {text}</p>"


def write_portfolio_report(
    run_dir: Path,
    records: Mapping[str, pd.DataFrame],
    metrics: Mapping[str, Any],
    title: str = "Portfolio walk-forward",
) -> Path:
    """Write ``metrics.json``, the four charts and ``report.html`` (headed ``title``) into
    ``run_dir``."""
    frames = list(records.values())
    mean = mean_frame(frames) if len(frames) > 1 else frames[0]
    write_text_atomic(run_dir / "metrics.json", json.dumps(jsonable(metrics), indent=2) + "\n")
    images = {
        "equity": plot_equity(records, mean),
        "weights": plot_weights(mean),
        "turnover": plot_turnover(mean),
        "cvar": plot_cvar(metrics),
    }
    for name, fig in images.items():
        write_bytes_atomic(run_dir / f"{name}.png", figure_png(fig))
    met = f"{metrics['cells_limit_met']}/{metrics['cells_with_limit']}"
    risk = risk_line(metrics.get("risk") or {})  # λ and the overlay's binding, if recorded
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(metrics['verdict']['text'])} (best baseline: "
        f"{html.escape(metrics['best_baseline'])}, "
        f"{html.escape(metrics.get('best_baseline_rule', ''))})</p>",
        f"<p>CVaR limit {metrics['cvar_limit']} met in {met} (segment, seed) cells</p>",
        *([f"<p>{html.escape(risk)}</p>"] if risk else []),
        _table(metrics),
        _contribution_line(metrics),
        trials_html(metrics.get("trials")),
        *(f'<p><img src="{n}.png" alt="{n}"></p>' for n in images),
    ]
    report = run_dir / "report.html"
    write_text_atomic(report, "<!doctype html><html><body>" + "".join(body) + "</body></html>\n")
    return report
