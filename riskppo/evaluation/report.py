"""The backtest report: one self-contained HTML file (inline CSS, PNGs as base64 data URIs).

No external assets, fonts or JavaScript: the file can be mailed, archived or opened offline.

A strategy that was flat or near-flat (in the market on fewer than the backtest's
``flat_threshold`` of the bars) is called out in a plain-text warning box at the top, and no row
of the metrics table ever marks it "best": holding nothing has no drawdown and no tail, which is
not risk control (R-TRADE-3).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from riskppo.evaluation.baselines import STRATEGIES
from riskppo.evaluation.references import FLAT_BY_DESIGN, REFERENCE_LABELS
from riskppo.evaluation.verdict import benchmark_of, random_timing_text
from riskppo.safefs import write_text_atomic

if TYPE_CHECKING:
    from riskppo.evaluation.backtest_result import BacktestResult

__all__ = [
    "FILL_TEXT",
    "METRIC_ROWS",
    "STRATEGY_LABELS",
    "MetricRow",
    "best_of_row",
    "format_value",
    "metric_rows",
    "render_report",
    "write_report",
]

Fmt = Literal["pct", "pct2", "ratio", "num1", "num3", "int", "limit"]


class MetricRow(NamedTuple):
    """One row of the metrics table."""

    key: str
    label: str
    fmt: Fmt
    better: Literal["higher", "lower"] | None  # None: no "best" (e.g. turnover is a cost driver)
    help: str


METRIC_ROWS: tuple[MetricRow, ...] = (
    MetricRow("annual_return", "Annual return (CAGR)", "pct", "higher", "compound annual growth"),
    MetricRow("total_return", "Total return", "pct", "higher", "final equity − 1"),
    MetricRow("annual_volatility", "Annual volatility", "pct", "lower", "std of bar returns, ann."),
    MetricRow("sharpe", "Sharpe ratio", "ratio", "higher", "mean / std of bar returns, ann."),
    MetricRow("sortino", "Sortino ratio", "ratio", "higher", "mean / downside deviation, ann."),
    MetricRow("max_drawdown", "Max drawdown", "pct", "higher", "worst peak-to-trough fall"),
    MetricRow("calmar", "Calmar ratio", "ratio", "higher", "annual return / |max drawdown|"),
    MetricRow("cvar_95", "CVaR 95% (per bar)", "pct2", "higher", "mean of the worst 5% of bars"),
    MetricRow("var_95", "VaR 95% (per bar)", "pct2", "higher", "5% quantile of bar returns"),
    MetricRow("hit_rate", "Hit rate", "pct", "higher", "positive bars / bars in the market"),
    MetricRow("market_share", "In the market", "pct", None, "share of bars with a position"),
    MetricRow(
        "active_share",
        "Signal active",
        "pct",
        None,
        "bars its own signal chose >= 0.05 beyond the least it must hold",
    ),
    MetricRow(
        "mean_abs_exposure", "Mean |exposure|", "num3", None, "mean |position| over all bars"
    ),
    MetricRow(
        "cvar_horizon",
        "Horizon CVaR (log)",
        "pct2",
        "higher",
        "mean of the worst α of overlapping multi-bar log returns",
    ),
    MetricRow("cvar_limit_met", "CVaR limit", "limit", None, "horizon CVaR ≥ risk.cvar_limit"),
    MetricRow("turnover", "Turnover (per year)", "num1", None, "Σ|Δexposure| per year"),
    MetricRow("n_bars", "Bars", "int", None, "bars in the period"),
)

STRATEGY_LABELS: dict[str, str] = {
    "agent": "Agent",
    "buy_and_hold": "Buy & hold",
    "vol_target_buy_and_hold": "Vol-targeted B&H",
    "sma_crossover": "SMA crossover",
    "supervised": "Supervised",
    **REFERENCE_LABELS,
}


def _versus(strategies: Sequence[str]) -> str:
    """The subtitle's "agent vs ..." from the strategies the report holds."""
    others = [STRATEGY_LABELS.get(n, n) for n in strategies if n != "agent"]
    if len(others) < 2:
        return "agent vs " + "".join(others)
    return f"agent vs {', '.join(others[:-1])} and {others[-1]}"


_PLOT_CAPTIONS: dict[str, tuple[str, str]] = {
    "equity": (
        "Equity and drawdown",
        "Equity of each strategy, starting at 1 on the first decision bar, after fees and "
        "borrow costs; below, the drawdown from the running peak.",
    ),
    "position": (
        "Agent exposure",
        "Close price with the bars the agent held long (green) or short (red), and its "
        "exposure (the position actually held, after any volatility sizing) over time, with the "
        "vol-targeted buy-and-hold exposure for reference. Each bar shows the exposure held over "
        "that bar's session (decided at an earlier close; the fill is in the notes).",
    ),
    "returns": (
        "Distribution of per-bar returns",
        "Net simple returns per bar of the agent (filled) and buy-and-hold (outline). The "
        "dashed and solid red lines are the agent's historical VaR and CVaR at 95%.",
    ),
    "critic": (
        "What the critic expected",
        "Quantiles of the critic's predicted discounted return-to-go at each decision bar "
        "(the distribution it learned, not a per-bar forecast), its CVaR at the run's α, and "
        "the realised discounted return-to-go (bootstrapped with the critic's mean at the "
        "period end). A realised line often outside the bands means a miscalibrated critic.",
    ),
}


FILL_TEXT: dict[str, str] = {
    "next_open": "at the open of bar t+1 (the position held before earns the overnight gap)",
    "next_close": "at the close of bar t+1 (one bar of delay)",
    "close": "at that same close (an optimistic fill, no delay)",
}
"""How each fill mode of the env (``env_settings["fill"]``) is described in the report."""


def format_value(value: float | int | None, fmt: Fmt) -> str:
    """Human-readable metric value; ``—`` for undefined (``None``/non-finite); ``limit``:
    ``met`` / ``violated`` (``—``: no limit)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if fmt == "limit":
        return "met" if value else "violated"
    if fmt == "pct":
        return f"{value:.1%}"
    if fmt == "pct2":
        return f"{value:.2%}"
    if fmt == "ratio":
        return f"{value:.2f}"
    if fmt == "num1":
        return f"{value:.1f}"
    if fmt == "num3":
        return f"{value:.3f}"
    return f"{int(value):d}"


def metric_rows(result: BacktestResult) -> tuple[MetricRow, ...]:
    """:data:`METRIC_ROWS` with the horizon-CVaR rows labelled with the run's α, horizon, limit."""
    m = result.metrics["agent"]
    limit = m.cvar_limit
    limit_text = "no limit" if limit is None else f"limit {limit:.2%}"
    out = []
    for row in METRIC_ROWS:
        if row.key == "cvar_horizon":
            row = row._replace(
                label=f"CVaR {m.cvar_alpha:.0%} of {m.cvar_horizon_bars}-bar returns",
                help=f"mean of the worst {m.cvar_alpha:.0%} of overlapping "
                f"{m.cvar_horizon_bars}-bar log returns ({limit_text})",
            )
        elif row.key == "cvar_limit_met":
            row = row._replace(
                label=f"CVaR limit ({limit_text})",
                help=f"{m.cvar_horizon_bars}-bar CVaR ≥ limit: met / violated",
            )
        out.append(row)
    return tuple(out)


def best_of_row(
    values: list[float | int | None], better: str | None, eligible: list[bool] | None = None
) -> set[int]:
    """Indexes of the best value(s) of a row among the ``eligible`` strategies (default: all);
    none if fewer than two eligible are defined or they all tie. The backtest report passes
    ``eligible = not flat``: a strategy that held no position is never "best"."""
    ok = eligible if eligible is not None else [True] * len(values)
    defined = [
        (i, float(v)) for i, v in enumerate(values) if ok[i] and v is not None and math.isfinite(v)
    ]
    if better is None or len(defined) < 2:
        return set()
    pick = max if better == "higher" else min
    best = pick(v for _, v in defined)
    winners = {i for i, v in defined if math.isclose(v, best, rel_tol=1e-9, abs_tol=1e-12)}
    return set() if len(winners) == len(defined) else winners


def _cell_class(best: bool, fmt: Fmt, value: Any) -> str:
    if best:
        return " best"
    if fmt == "limit" and value is not None:
        return " met" if value else " violated"
    return ""


def _metrics_table(
    metrics: Mapping[str, Mapping[str, Any]],
    strategies: list[str],
    rows_spec: tuple[MetricRow, ...] = METRIC_ROWS,
) -> str:
    flat = [bool(metrics[s].get("flat")) or not metrics[s].get("market_share") for s in strategies]
    head = "".join(
        f'<th class="num">{html.escape(STRATEGY_LABELS.get(s, s))}'
        + ('<span class="flat-tag">flat</span>' if f else "")
        + "</th>"
        for s, f in zip(strategies, flat, strict=True)
    )
    rows = []
    for row in rows_spec:
        values = [metrics[s].get(row.key) for s in strategies]
        best = best_of_row(values, row.better, [not f for f in flat])
        cells = "".join(
            f'<td class="num{_cell_class(i in best, row.fmt, v)}"'
            + (' title="undefined (e.g. zero volatility or no drawdown)"' if v is None else "")
            + f">{html.escape(format_value(v, row.fmt))}</td>"
            for i, v in enumerate(values)
        )
        rows.append(
            f'<tr><th scope="row">{html.escape(row.label)}'
            f'<span class="hint">{html.escape(row.help)}</span></th>{cells}</tr>'
        )
    return (
        '<table class="metrics" id="metrics-table"><thead><tr><th>Metric</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _kv_grid(items: list[tuple[str, str]]) -> str:
    cells = "".join(
        f'<div class="kv"><span class="k">{html.escape(k)}</span>'
        f'<span class="v">{html.escape(v)}</span></div>'
        for k, v in items
    )
    return f'<div class="grid">{cells}</div>'


def _overlay_text(ov: Mapping[str, Any] | None) -> str:
    """The agent's risk overlay (riskppo.envs.execution.overlay), how it bound over the period."""
    if not ov:
        return "none"
    return (
        f"forecast CVaR of {ov['horizon']} bars within {ov['limit']:g} (margin {ov['margin']:g}, "
        f"vol max(EWM {ov['fast_span']}, EWM {ov['slow_span']})): bound on "
        f"{ov['binding_share']:.0%} of bars, exposure cut to {ov['mean_cut']:.0%} there"
    )


def _config_items(result: BacktestResult, info: Mapping[str, Any]) -> list[tuple[str, str]]:
    cfg = result.config
    env = result.env_settings
    critic = f"{cfg.critic.kind}{' ×2 (twin)' if cfg.critic.twin else ''}"
    if cfg.critic.kind == "quantile":
        critic += f", {cfg.critic.n_quantiles} quantiles"
    elif cfg.critic.kind == "categorical":
        critic += f", {cfg.critic.n_atoms} atoms"
    limit = cfg.risk.cvar_limit
    horizon = result.metrics["agent"].cvar_horizon_bars
    positions = env["positions"]
    pos_text = ", ".join(f"{p:g}" for p in positions) if isinstance(positions, list) else positions
    items = [
        ("Checkpoint", f"{info.get('checkpoint', '—')} ({result.num_timesteps:,} env steps)"),
        ("Seed", str(cfg.seed)),
        ("Critic", critic),
        (
            "CVaR α / horizon / limit",
            f"{cfg.risk.cvar_alpha:g} / {horizon} bars / "
            + ("none" if limit is None else f"{limit:g}"),
        ),
        ("Discount γ", f"{result.gamma:g}"),
        ("LSTM hidden size", str(cfg.policy.lstm_hidden_size)),
        ("Fill", f"{env['fill']}: decided at the close of bar t, filled {FILL_TEXT[env['fill']]}"),
        ("Fee", f"{env['fee'] * 1e4:g} bp × |Δposition|"),
        ("Borrow cost (shorts)", f"{env['borrow_rate']:.2%} per year"),
        ("Positions", pos_text),
        (
            "Agent sizing",
            "vol target "
            f"{env.get('vol_target', 0.1):.0%}/yr, span {env.get('vol_span')}, "
            f"max leverage {env.get('max_leverage', 1.0):g}"
            if env.get("agent_sizing") == "vol_target"
            else "none (full units)",
        ),
        (
            "Vol-targeted B&H",
            f"{env.get('vol_target', 0.1):.0%}/yr, span {env.get('vol_span')}, "
            f"max leverage {env.get('max_leverage', 1.0):g}",
        ),
        ("Risk overlay", _overlay_text(env.get("overlay"))),
        ("Bars per year", f"{result.bars_per_year:g}"),
        (
            "SMA baseline",
            f"{result.sma.get('fast')}/{result.sma.get('slow')}"
            + (" long/short" if result.sma.get("allow_short") else " long/flat"),
        ),
        ("Split (train/val/test)", " / ".join(f"{f:.0%}" for f in cfg.data.split)),
        ("Signal columns (observed)", ", ".join(cfg.data.signals) or "none"),
    ]
    return items


def _split_note(part: str) -> str:
    if part == "test":
        return (
            "This is the <b>held-out test period</b>: the agent was trained on the train part "
            "only, and nothing in this run (training, hyper-parameters, checkpoint choice) looked "
            "at these bars. Repeating backtests on it and keeping the best run would break that."
        )
    if part == "val":
        return (
            "This is the <b>validation period</b>: not trained on, but possibly used to choose "
            "hyper-parameters or checkpoints, so it is optimistic for such choices."
        )
    return (
        "This is the <b>training period</b> (in-sample): the agent was fitted on these bars, so "
        "the numbers are optimistic and say little about out-of-sample performance."
    )


REPORT_CSS = """
*{box-sizing:border-box}
body{margin:0;background:#f4f6f9;color:#1d2330;
 font:15px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1080px;margin:0 auto;padding:28px 24px 48px}
header{background:#14213d;color:#fff;padding:26px 28px;border-radius:10px;margin-bottom:22px}
header h1{margin:0 0 4px;font-size:26px;font-weight:650;letter-spacing:.2px}
header .sub{color:#c9d3e6;font-size:15px}
header .badges{margin-top:12px}
.badge{display:inline-block;background:rgba(255,255,255,.12);border-radius:999px;
 padding:2px 11px;margin:0 6px 4px 0;font-size:13px}
section{background:#fff;border:1px solid #e1e5ec;border-radius:10px;padding:20px 24px;
 margin-bottom:20px}
h2{font-size:18px;margin:0 0 14px;color:#14213d}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(230px,1fr));gap:10px 18px}
.kv{display:flex;flex-direction:column;border-left:3px solid #d5dcea;padding-left:10px}
.kv .k{font-size:13px;color:#6b7486}
.kv .v{font-weight:600}
table.metrics{width:100%;border-collapse:collapse;font-variant-numeric:tabular-nums}
table.metrics th,table.metrics td{padding:8px 12px;border-bottom:1px solid #eceff4;text-align:left}
table.metrics thead th{font-size:13px;text-transform:uppercase;letter-spacing:.5px;color:#6b7486;
 border-bottom:2px solid #d5dcea}
table.metrics td.num,table.metrics th.num{text-align:right}
table.metrics tbody th{font-weight:600}
table.metrics .hint{display:block;font-weight:400;font-size:12px;color:#8a92a3}
table.metrics td.best{background:#e5f4ea;color:#17613a;font-weight:700}
table.metrics td.violated{color:#a61b1b;font-weight:600}
table.metrics td.met{color:#17613a}
.flat-tag{display:block;font-size:11px;color:#a61b1b;text-transform:none;letter-spacing:0}
.warning{background:#fff4e5;border:2px solid #e0a030;border-radius:10px;padding:14px 20px;
 margin-bottom:20px;color:#5a3a00}
.warning b{color:#8a4b00}
table.metrics tbody tr:hover{background:#fafbfd}
.legend{font-size:13px;color:#6b7486;margin-top:10px}
.legend .swatch{display:inline-block;width:12px;height:12px;background:#e5f4ea;
 border:1px solid #b9e0c6;vertical-align:-1px;margin-right:5px}
figure{margin:0 0 26px}
figure:last-child{margin-bottom:0}
figure img{width:100%;height:auto;border:1px solid #eceff4;border-radius:6px}
figcaption{font-size:14px;color:#4a5263;margin-top:6px}
figcaption b{color:#1d2330}
.notes li{margin-bottom:6px}
.notes code{background:#f0f2f6;padding:1px 5px;border-radius:4px;font-size:13px}
footer{color:#8a92a3;font-size:12px;text-align:center;margin-top:10px}
"""


def render_report(
    result: BacktestResult,
    images: Mapping[str, bytes | Path],
    info: Mapping[str, Any] | None = None,
    statistics: Mapping[str, Any] | None = None,
) -> str:
    """The report as an HTML string; ``images`` maps plot names to PNG bytes or PNG files;
    ``statistics``: :func:`riskppo.evaluation.verdict.statistics_block` of the result."""
    info = dict(info or {})
    r = result
    metrics = r.metrics_dict()
    strategies = list(STRATEGIES)
    warning = _flat_warning_box(r, metrics, strategies)
    title = f"Backtest — {r.dataset} · {r.part} split"
    period = f"{r.start:%Y-%m-%d} → {r.end:%Y-%m-%d}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>{html.escape(title)}</title>
<style>{REPORT_CSS}</style></head>
<body><main>
<header><h1>{html.escape(title)}</h1>
<div class="sub">{html.escape(period)} · {html.escape(_versus(strategies))}</div>
<div class="badges">{_badges(r)}</div></header>
{warning}{statistics_section(statistics)}
<section><h2>Metrics</h2>{_metrics_table(metrics, strategies, metric_rows(r))}
<div class="legend"><span class="swatch"></span>best value of the row among strategies that held
a position (flat strategies never win) · per-bar figures are simple returns of one bar · all
after costs</div></section>
<section><h2>Run configuration</h2>{_kv_grid(_config_items(r, info))}</section>
<section><h2>Charts</h2>{_figures(images)}</section>
<section><h2>How to read this</h2>{_notes(r)}</section>
<footer>{_footer(info)}</footer>
</main></body></html>
"""


def statistics_section(block: Mapping[str, Any] | None, title: str = "Statistics") -> str:
    """The verdict line and the statistics table of a statistics block ("" without one)."""
    if block is None:
        return ""
    verdict = block["verdict"]
    css = "best" if verdict["claim"] else "violated"
    bench = benchmark_of(block)
    heads = ("", "Agent", bench.label, f"{bench.label} scaled", "")
    head = "".join(f'<th class="num">{html.escape(h)}</th>' for h in heads)
    rows = "".join(
        "<tr>" + "".join(f'<td class="num">{html.escape(str(c))}</td>' for c in row) + "</tr>"
        for row in block["stats_rows"]
    )
    null = f"Random-timing null: {random_timing_text(block['random_timing'])}."
    if bench.note:
        null = f"Benchmark: {bench.note}. {null}"
    return (
        f'<section><h2>{html.escape(title)}</h2><table class="metrics"><tr><td class="{css}">'
        f"{html.escape(verdict['text'])}</td></tr></table>"
        f'<table class="metrics"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        f'<div class="legend">{html.escape(null)}</div></section>'
    )


def _badges(r: BacktestResult) -> str:
    """The header's badges: bars, critic kind, CVaR α, fee, "after costs"."""
    return "".join(
        f'<span class="badge">{html.escape(b)}</span>'
        for b in (
            f"{len(r.frames['agent']):,} bars",
            f"{r.config.critic.kind} critic",
            f"CVaR α = {r.cvar_alpha:g}",
            f"fee {r.env_settings['fee'] * 1e4:g} bp",
            "after costs",
        )
    )


def _figures(images: Mapping[str, bytes | Path]) -> str:
    """One ``<figure>`` per plot, the PNG embedded as a base64 data URI, with its caption."""
    figures = []
    for name, data in images.items():
        raw = data.read_bytes() if isinstance(data, Path) else bytes(data)
        b64 = base64.b64encode(raw).decode("ascii")
        heading, caption = _PLOT_CAPTIONS.get(name, (name, ""))
        figures.append(
            f'<figure><img alt="{html.escape(heading)}" src="data:image/png;base64,{b64}">'
            f"<figcaption><b>{html.escape(heading)}.</b> {html.escape(caption)}</figcaption>"
            "</figure>"
        )
    return "".join(figures)


def _notes(r: BacktestResult) -> str:
    """The "How to read this" list: split, costs and timing, exposure, metric definitions."""
    fee_bp = r.env_settings["fee"] * 1e4
    return f"""
<ul class="notes">
<li>{_split_note(r.part)}</li>
<li><b>Same market, same costs.</b> The agent and the baselines run through the same trading
environment over the same bars: a position decided at the close of bar t is filled
{FILL_TEXT[r.env_settings["fill"]]}, pays a fee of {fee_bp:g} bp × |Δposition| and, for shorts,
a borrow cost of {r.env_settings["borrow_rate"]:.2%} a year. All numbers are <b>after costs</b>.
The agent acts deterministically (its most likely action); buy-and-hold pays the entry fee
once. Buy-and-hold and SMA crossover hold full unit positions; vol-targeted buy-and-hold holds
exposure min(target vol / EWM vol, max leverage), rebalanced (and charged fees) every bar — both
whatever sizing the agent uses. The supervised baseline holds a ridge forecast of the agent's
own features, fitted on the training rows, mapped into the agent's band and traded with the
agent's sizing and overlay. Vol-targeted B&amp;H + overlay holds the full signal, and Floor +
overlay the least signal the agent may hold (its core position, or nothing), in the agent's own
environment — its sizing, risk overlay, fill and fees; when the agent trades under a risk overlay
the verdict is read against the former, so the overlay's own effect is not credited to the
agent.</li>
<li><b>Exposure and the constraint.</b> "In the market" is the share of bars with an exposure
of at least 5% of a full position (|exposure| &ge; 0.05); a strategy below
{r.flat_threshold:.0%} is flat/near-flat and is never marked best. The horizon CVaR is the
constraint's own figure: the mean of the worst α of the log returns of all overlapping
horizon-bar windows (partial sample included), held against the run's CVaR limit.</li>
<li><b>Metrics</b> (computed with <code>empyrical</code> on simple per-bar returns, annualised with
{r.bars_per_year:g} bars a year, risk-free rate 0): Sharpe = mean/std × √bars; Sortino uses the
downside deviation below 0; max drawdown is the worst fall from a running peak (negative);
Calmar = annual return / |max drawdown|; CVaR 95% = mean of the worst 5% of per-bar returns
(historical expected shortfall), VaR 95% its threshold; turnover = mean |Δposition| per bar ×
bars per year (full position changes a year); hit rate = share of positive bars among bars with a
position. <b>—</b> marks an undefined value (e.g. a Sharpe ratio with zero volatility) and is
<code>null</code> in <code>metrics.json</code>. Green cells are the best of a row among the
strategies that held a position.</li>
<li><b>One run is one sample.</b> A single seed on one period says little; compare several seeds
(and periods) before drawing conclusions.</li>
</ul>"""


def _footer(info: Mapping[str, Any]) -> str:
    """The footer: when it was generated (UTC) and the run directory when ``info`` has one."""
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    run_dir = info.get("run_dir")
    return f"Generated by riskppo on {generated}" + (
        f" · run <code>{html.escape(str(run_dir))}</code>" if run_dir else ""
    )


def _flat_warning_box(
    result: BacktestResult, metrics: Mapping[str, Mapping[str, Any]], strategies: list[str]
) -> str:
    """The plain-text warning box naming the flat/near-flat strategies ("" if none)."""
    flat = [s for s in strategies if metrics[s].get("flat") and s not in FLAT_BY_DESIGN]
    if not flat:
        return ""
    items = []
    for s in flat:
        share = metrics[s].get("market_share") or 0.0
        exposure = metrics[s].get("mean_abs_exposure") or 0.0
        items.append(
            f"<li>{html.escape(STRATEGY_LABELS.get(s, s))}: in the market on {share:.1%} of "
            f"bars, mean |exposure| {exposure:.3f}.</li>"
        )
    agent = "agent" in flat
    lead = (
        "The agent is flat or near-flat on this period: it (almost) never held a position."
        if agent
        else "A baseline is flat or near-flat on this period."
    )
    return (
        '<div class="warning" id="flat-warning" role="alert"><p><b>Warning — flat/near-flat '
        f"strategy.</b> {html.escape(lead)} Its low volatility, small drawdown and mild CVaR "
        "describe holding (almost) nothing, not risk control, and its Sharpe or return says "
        "nothing about trading skill. No row marks it best.</p>"
        f"<ul>{''.join(items)}</ul>"
        f"<p>Flat/near-flat: in the market on fewer than {result.flat_threshold:.0%} of the "
        "bars.</p></div>\n"
    )


def write_report(
    result: BacktestResult,
    path: str | Path,
    *,
    images: Mapping[str, bytes | Path],
    info: Mapping[str, Any] | None = None,
    statistics: Mapping[str, Any] | None = None,
) -> Path:
    """Write :func:`render_report` to ``path``; returns the path."""
    return write_text_atomic(Path(path), render_report(result, images, info, statistics))
