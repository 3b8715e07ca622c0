"""What a walk-forward run writes and says: stitched records, ``metrics.json``, the
per-segment table, two charts and one self-contained HTML report with the verdict on top; the
summary ``riskppo walkforward`` prints (:func:`summary_text`)."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from riskppo.config import Config
from riskppo.envs.registration import data_label
from riskppo.evaluation.limit_backtest import limit_html, limit_line, risk_line
from riskppo.evaluation.plots import COLORS, figure_png, new_figure
from riskppo.evaluation.references import FLOOR_OVERLAY, VT_BH_OVERLAY
from riskppo.evaluation.report import (
    REPORT_CSS,
    STRATEGY_LABELS,
    format_value,
    statistics_section,
)
from riskppo.evaluation.trials import trials_html
from riskppo.evaluation.verdict import benchmark_of, verdict_lines
from riskppo.jsonable import jsonable
from riskppo.safefs import ensure_real_dir, write_bytes_atomic, write_text_atomic
from riskppo.walkforward.analysis import BENCHMARK, CVAR_MATCHED, SCALED
from riskppo.walkforward.plan import MEAN_LABEL, Record, mean_record
from riskppo.walkforward.seeds import seed_line
from riskppo.walkforward.select import selection_html, selection_lines

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LABELS = {
    **STRATEGY_LABELS,
    SCALED: "Benchmark, scaled to the agent's exposure",  # the verdict's benchmark
    CVAR_MATCHED: "Benchmark, scaled to the agent's CVaR",
}
TABLE_ROWS = (
    ("sharpe", "Sharpe ratio", "ratio"),
    ("annual_return", "Annual return", "pct"),
    ("annual_volatility", "Annual volatility", "pct"),
    ("max_drawdown", "Max drawdown", "pct"),
    ("cvar_horizon", "CVaR of horizon returns", "pct2"),
    ("market_share", "Bars in the market", "pct"),
    ("active_share", "Bars its signal chose a position", "pct"),
    ("mean_abs_exposure", "Mean |exposure|", "num3"),
    ("turnover", "Turnover (per year)", "num1"),
)
STRATEGY_ORDER = (
    "agent", VT_BH_OVERLAY, BENCHMARK, SCALED, CVAR_MATCHED, FLOOR_OVERLAY, "buy_and_hold",
    "sma_crossover",
)  # fmt: skip


def write_outputs(
    run_dir: Path, cfg: Config, records: Sequence[Record], metrics: dict[str, Any]
) -> Path:
    """Write records, ``metrics.json``, ``segments.csv``, the charts and ``report.html``;
    return the report's path."""
    out = ensure_real_dir(run_dir / "records")
    for r in records:
        write_text_atomic(out / f"s{r.label.split()[-1]}.csv", _csv(r.frame))
    mean = mean_record(records) if len(records) > 1 else records[0]
    if len(records) > 1:
        write_text_atomic(out / "mean.csv", _csv(mean.frame))
    write_text_atomic(run_dir / "metrics.json", json.dumps(jsonable(metrics), indent=2) + "\n")
    write_text_atomic(run_dir / "segments.csv", pd.DataFrame(metrics["cells"]).to_csv(index=False))
    images = {
        "equity": figure_png(plot_equity(records, mean, metrics)),
        "cells": figure_png(plot_cells(metrics)),
    }
    if any(c.get("lambda") is not None for c in metrics["cells"]):
        images["risk"] = figure_png(plot_risk(metrics))
    for name, png in images.items():
        write_bytes_atomic(run_dir / f"{name}.png", png)
    report = run_dir / "report.html"
    write_text_atomic(report, render(cfg, metrics, images))
    return report


def _csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(float_format="%.10g")


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """The block the verdict is read on: the seeds' mean record (or the only seed's)."""
    recs = metrics["records"]
    return recs.get(MEAN_LABEL) or next(iter(recs.values()))


def summary_text(metrics: dict[str, Any]) -> str:
    """The printed summary: the verdict line, the statistics, the limit count, the ES backtest
    of the risk overlay's forecast."""
    h = headline(metrics)
    lines = [
        f"walk-forward: {metrics['oos_bars']} out-of-sample bars {metrics['start'][:10]} → "
        f"{metrics['end'][:10]}, {len(metrics['settings']['seeds'])} seed(s)",
        *verdict_lines(h),
        *seed_line(metrics.get("seeds")),
        *selection_lines(metrics.get("selection")),
    ]
    # the columns of the HTML report's statistics table
    bench = benchmark_of(h).label
    lines.append(f"  {'':<34} {'agent':>10}  {bench:>10}  {'VT scaled':>10}")
    for label, agent, bench, scaled, note in h["stats_rows"]:
        lines.append(f"  {label:<34} {agent:>10}  {bench:>10}  {scaled:>10}  {note}")
    if metrics["cells_with_limit"]:
        lines.append(
            f"CVaR limit {metrics['cvar_limit']:g} met in {metrics['cells_limit_met']}/"
            f"{metrics['cells_with_limit']} (segment, seed) cells"
        )
    line = risk_line(metrics.get("risk") or {})
    if line:
        lines.append(line)
    es = limit_line(metrics.get("limit_backtest"))
    if es:
        lines.append(es)
    return "\n".join(lines)


def plot_risk(metrics: dict[str, Any]) -> Figure:
    """Per segment: the CVaR multiplier λ at the end of each seed's training, and the share of
    bars on which the risk overlay capped the exposure, over training and out of sample."""
    from matplotlib.ticker import MaxNLocator

    cells = pd.DataFrame(metrics["cells"])
    fig = new_figure(10, 3.6, dpi=110)
    left, right = fig.subplots(1, 2)
    x = cells["segment"] + 0.08 * (cells["seed"] - cells["seed"].mean())
    left.scatter(x, cells["lambda"].astype(float), color=COLORS["agent"], s=18)
    left.plot(cells.groupby("segment")["lambda"].mean(), color=COLORS["agent"], lw=1)
    left.set_title("λ at the end of training (dots: seeds)", loc="left", fontsize=11)
    for key, label, style in (
        ("overlay_binding_train", "bars capped, over training", "--"),
        ("overlay_binding", "bars capped, out of sample", "-"),
        ("overlay_cut", "exposure kept where capped, out of sample", ":"),
    ):
        if cells[key].notna().any():
            share = cells.groupby("segment")[key].mean()
            right.plot(share, color=COLORS[BENCHMARK], ls=style, marker="o", ms=3, label=label)
    right.set_ylim(-0.03, 1.03)
    right.set_title("the risk overlay (shares)", loc="left", fontsize=11)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=8, frameon=False)
    else:
        right.text(0.5, 0.5, "no risk overlay in this run", ha="center", transform=right.transAxes)
    for a in (left, right):
        a.set_xlabel("segment")
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.grid(True, color="#e3e3e3", lw=0.8)
    return fig


def _equity(r: pd.Series) -> pd.Series:
    return np.exp(r.cumsum())


def plot_equity(records: Sequence[Record], mean: Record, metrics: dict[str, Any]) -> Figure:
    """Stitched equity of the agent (each seed faint, their mean bold) and the baselines, with
    the retraining points; drawdown below."""
    fig = new_figure(10, 6, dpi=110)
    ax, dd = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    h = headline(metrics)
    k, bench = h["exposure_scale"], benchmark_of(h).key
    curves = {
        "agent": mean.returns("agent"),
        bench: mean.returns(bench),
        SCALED: mean.returns(bench) * k,
        "buy_and_hold": mean.returns("buy_and_hold"),
    }
    if len(records) > 1:
        for r in records:
            ax.plot(_equity(r.returns("agent")), color=COLORS["agent"], alpha=0.25, lw=0.8)
    for name, r in curves.items():
        style = {"ls": "--"} if name == SCALED else {}
        color = COLORS.get(name, COLORS[BENCHMARK])
        eq = _equity(r)
        ax.plot(eq, color=color, lw=2 if name == "agent" else 1.2, label=LABELS[name], **style)
        dd.plot(eq / eq.cummax() - 1, color=color, lw=1, **style)
    for t in mean.frame.index[mean.frame["segment"].diff().fillna(0) != 0]:
        ax.axvline(t, color="#b8b8b8", lw=0.7, ls=":")
    ax.set_ylabel("equity (start = 1)")
    ax.set_title("Walk-forward out-of-sample equity (dotted lines: retraining)", loc="left")
    ax.legend(loc="upper left", fontsize=9, frameon=False)
    dd.set_ylabel("drawdown")
    for a in (ax, dd):
        a.grid(True, color="#e3e3e3", lw=0.8)
    return fig


def plot_cells(metrics: dict[str, Any]) -> Figure:
    """Per (segment, seed) cell: the agent's horizon CVaR against the limit, and its Sharpe
    against the benchmark's."""
    from matplotlib.ticker import MaxNLocator

    cells = pd.DataFrame(metrics["cells"])
    fig = new_figure(10, 4.5, dpi=110)
    left, right = fig.subplots(1, 2)
    x = cells["segment"] + 0.08 * (cells["seed"] - cells["seed"].mean())
    met = cells["limit_met"].fillna(True).astype(bool)
    left.scatter(x[met], cells["cvar_horizon"][met], color="#2e8b57", s=18, label="limit met")
    left.scatter(x[~met], cells["cvar_horizon"][~met], color="#c0392b", s=22, label="missed")
    if metrics["cvar_limit"] is not None:
        left.axhline(metrics["cvar_limit"], color="#111", lw=1, ls="--", label="limit")
    left.set_title("CVaR of horizon returns, per segment", loc="left", fontsize=11)
    left.set_xlabel("segment")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.legend(fontsize=8, frameon=False)
    right.scatter(cells["benchmark_sharpe"], cells["sharpe"], color=COLORS["agent"], s=18)
    lo = float(np.nanmin(cells[["sharpe", "benchmark_sharpe"]].to_numpy(dtype=float)))
    hi = float(np.nanmax(cells[["sharpe", "benchmark_sharpe"]].to_numpy(dtype=float)))
    right.plot([lo, hi], [lo, hi], color="#888", lw=1, ls="--")
    right.set_xlabel(f"{benchmark_of(headline(metrics)).name} Sharpe")
    right.set_ylabel("agent Sharpe")
    right.set_title("Sharpe per segment (above the line: agent ahead)", loc="left", fontsize=11)
    for a in (left, right):
        a.grid(True, color="#e3e3e3", lw=0.8)
    return fig


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f'<th class="num">{html.escape(h)}</th>' for h in head)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{html.escape(c)}</td>' for c in row) + "</tr>"
        for row in rows
    )
    return f'<table class="metrics"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _metrics_rows(block: dict[str, Any]) -> list[list[str]]:
    m = block["metrics"]
    return [
        [label] + [format_value(m.get(s, {}).get(key), fmt) for s in STRATEGY_ORDER]  # type: ignore[arg-type]
        for key, label, fmt in TABLE_ROWS
    ]


def _cell_rows(metrics: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in metrics["cells"]:
        met = {True: "met", False: "MISSED", None: "–"}[c["limit_met"]]
        rows.append(
            [
                str(c["segment"]),
                str(c["seed"]),
                f"{c['start'][:10]} → {c['end'][:10]}",
                format_value(c["sharpe"], "ratio"),
                format_value(c["benchmark_sharpe"], "ratio"),
                format_value(c["cvar_horizon"], "pct2"),
                met,
                format_value(c["market_share"], "pct"),
                format_value(c["mean_abs_exposure"], "num3"),
                format_value(c.get("active_share"), "pct"),
            ]
        )
    return rows


def render(cfg: Config, metrics: dict[str, Any], images: dict[str, bytes]) -> str:
    """The report as one HTML string (inline CSS, PNGs as data URIs)."""
    h = headline(metrics)
    s = metrics["settings"]
    title = f"Walk-forward — {data_label(cfg.data.dataset, cfg.data.path)}"
    sub = (
        f"{metrics['start'][:10]} → {metrics['end'][:10]} · {metrics['oos_bars']} out-of-sample "
        f"bars · retrained every {s['step']} bars ({s['window']} window, first {s['initial']} "
        f"bars) · seeds {s['seeds']}{' · warm start' if s['warm_start'] else ''}"
    )
    figures = "".join(
        f'<figure><img alt="{n}" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode()}"></figure>'
        for n, png in images.items()
    )
    limit = (
        f"CVaR limit {metrics['cvar_limit']:g} met in {metrics['cells_limit_met']} of "
        f"{metrics['cells_with_limit']} (segment, seed) cells."
        if metrics["cells_with_limit"]
        else "No CVaR limit configured."
    )
    limit = " ".join(filter(None, (limit, risk_line(metrics.get("risk") or {}))))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{REPORT_CSS}</style></head><body><main>
<header><h1>{html.escape(title)}</h1><div class="sub">{html.escape(sub)}</div></header>
{statistics_section(h, "Verdict and statistics (the seeds' mean record)")}
{trials_html(h.get("trials"))}
<section><h2>CVaR limit</h2><p>{html.escape(limit)}</p></section>
{limit_html(metrics.get("limit_backtest"))}
<section><h2>Metrics on the stitched record</h2>
{_table(["", *(LABELS[n] for n in STRATEGY_ORDER)], _metrics_rows(h))}
<p>{html.escape(_BENCHMARK_NOTE)}</p></section>
<section><h2>Charts</h2>{figures}</section>
<section><h2>Segments</h2>{_table(_cell_head(h), _cell_rows(metrics))}</section>
{selection_html(metrics.get("selection"))}
<section><h2>How to read this</h2><ul class="notes">{_NOTES}</ul></section>
</main></body></html>
"""


_BENCHMARK_NOTE = (
    "Vol-targeted B&H + overlay holds the full signal, Floor + overlay the agent's least signal "
    "(its core position, or nothing), in the agent's own env: its sizing, risk overlay, fill "
    "and fees. When the agent trades under a risk overlay, the verdict and the scaled rows are "
    "read against the former; Vol-targeted B&H is the same position without the overlay."
)


def _cell_head(block: dict[str, Any]) -> tuple[str, ...]:
    """The segments table's header, the benchmark column named for the verdict's benchmark."""
    return (*_CELL_HEAD[:4], f"{benchmark_of(block).label} Sharpe", *_CELL_HEAD[5:])


_CELL_HEAD = (
    "segment",
    "seed",
    "test bars",
    "Sharpe",
    "benchmark Sharpe",
    "CVaR",
    "limit",
    "in market",
    "|exposure|",
    "signal active",
)
_NOTES = "".join(
    f"<li>{n}</li>"
    for n in (
        "Every bar here is out of sample: each segment's agent was trained only on the bars "
        "before its segment, then traded it frozen.",
        "Each segment starts flat (baselines too), so the record pays the entry cost at every "
        "retraining: a conservative accounting.",
        "The verdict is read on the seeds' mean record (capital split over the seeds' agents). "
        "An edge is claimed only when the one-sided p-value, adjusted for the number of configs "
        "tried, is below 0.05.",
        "The scaled benchmark holds the verdict's benchmark scaled to the agent's mean "
        "|exposure|: its risk figures show how much of the agent's lower risk is just a "
        "smaller position. The CVaR-scaled one is scaled to the agent's horizon CVaR: what the "
        "passive position earns at the same tail risk (its Sharpe ratio is the benchmark's).",
    )
)
