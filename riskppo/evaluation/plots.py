"""Backtest plots (matplotlib, PNG): equity with drawdown, exposure, return distribution, critic.

Figures are built as :class:`matplotlib.figure.Figure` objects rendered by the Agg canvas —
``pyplot`` is never imported, so no global matplotlib state (backend, rcParams, open figures)
changes or leaks.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from riskppo.safefs import ensure_real_dir, write_bytes_atomic

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from riskppo.evaluation.backtest_result import BacktestResult

__all__ = [
    "COLORS",
    "PLOTS",
    "figure_png",
    "new_figure",
    "plot_critic_quantiles",
    "plot_equity",
    "plot_positions",
    "plot_return_distribution",
    "save_plots",
]

COLORS: dict[str, str] = {
    "agent": "#1f5fbf",
    "buy_and_hold": "#7a7a7a",
    "vol_target_buy_and_hold": "#7b4fa0",
    "sma_crossover": "#e07b00",
    "supervised": "#2a9d8f",
    "vt_bh_overlay": "#c27bd6",
    "floor_overlay": "#a08a5c",
}
_RED, _GREEN = "#c0392b", "#2e8b57"
REALISED_COLOR = "#111111"  # critic chart: the realised discounted return-to-go
ZERO_LINE_COLOR = "#9a9a9a"
_DPI = 110


def _label(result: BacktestResult, name: str) -> str:
    if name == "sma_crossover":
        return f"SMA crossover ({result.sma.get('fast', 20)}/{result.sma.get('slow', 50)})"
    if name == "vol_target_buy_and_hold":
        vt = result.env_settings.get("vol_target")
        return f"Vol-targeted B&H ({vt:.0%}/yr)" if vt is not None else "Vol-targeted B&H"
    names = {
        "agent": "Agent",
        "buy_and_hold": "Buy & hold",
        "supervised": "Supervised (ridge)",
        "vt_bh_overlay": "Vol-targeted B&H + overlay (agent's env)",
        "floor_overlay": "Floor signal + overlay (agent's env)",
    }
    return names.get(name, name)


def new_figure(width: float, height: float, dpi: float | None = _DPI) -> Figure:
    """A constrained-layout figure on the Agg canvas, ``width`` × ``height`` inches (``dpi``
    None: matplotlib's default). matplotlib is imported here, on the first figure, not with
    this module: every start of the command line would pay for it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style(ax: Axes) -> None:
    ax.grid(True, color="#e3e3e3", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _date_axis(ax: Axes) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=4, maxticks=9)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def _subtitle(result: BacktestResult) -> str:
    return (
        f"{result.dataset} · {result.part} split · "
        f"{result.start:%Y-%m-%d} → {result.end:%Y-%m-%d} · after costs"
    )


def _with_start(result: BacktestResult, s: pd.Series, first: float) -> pd.Series:
    """Prepend the value at the period start (before the first return)."""
    head = pd.Series([first], index=pd.DatetimeIndex([result.start]))
    return pd.concat([head, s])


def plot_equity(result: BacktestResult) -> Figure:
    """Equity curves of all strategies (start = 1) with a drawdown panel below."""
    from matplotlib.ticker import PercentFormatter

    fig = new_figure(10, 6.2)
    ax, ax_dd = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.3])
    for name, frame in result.frames.items():
        eq = _with_start(result, frame["equity"], 1.0)
        dd = _with_start(result, -frame["drawdown"], 0.0)
        lw = 2.0 if name == "agent" else 1.4
        color = COLORS.get(name, "#333333")
        ax.plot(eq.index, eq.to_numpy(), color=color, lw=lw, label=_label(result, name))
        ax_dd.plot(dd.index, dd.to_numpy(), color=color, lw=1.1)
        if name == "agent":
            ax_dd.fill_between(dd.index, dd.to_numpy(), 0.0, color=COLORS[name], alpha=0.15)
    ax.axhline(1.0, color="#444444", lw=0.8, ls=":")
    ax.set_ylabel("Equity (start = 1)")
    ax.set_title(f"Equity curves\n{_subtitle(result)}", fontsize=11, loc="left")
    ax.legend(loc="best", frameon=False)
    ax_dd.set_ylabel("Drawdown")
    ax_dd.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax_dd.set_xlabel("Date")
    for a in (ax, ax_dd):
        _style(a)
    _date_axis(ax_dd)
    return fig


def plot_positions(result: BacktestResult) -> Figure:
    """The price with the agent's long/short periods shaded, and its exposure over time (the
    position actually held, after any volatility sizing), with the vol-targeted buy-and-hold
    exposure for reference; the title gives the agent's market share."""
    agent = result.frames["agent"]
    close = _with_start(result, agent["close"], float(result.env_settings["start_close"]))
    pos = agent["position"].to_numpy()
    fig = new_figure(10, 5.6)
    ax, ax_pos = fig.subplots(2, 1, sharex=True, height_ratios=[2.2, 1])
    _price_panel(ax, result, close, pos)
    _exposure_panel(ax_pos, result, close.index, pos)
    for a in (ax, ax_pos):
        _style(a)
    _date_axis(ax_pos)
    return fig


def _price_panel(ax: Axes, result: BacktestResult, close: pd.Series, pos: np.ndarray) -> None:
    """The close (with its start bar) and the agent's long/short bars shaded; ``pos`` is the
    agent's ``[n]`` exposure per bar of ``result.frames["agent"]``."""
    m = result.metrics["agent"]
    ax.plot(close.index, close.to_numpy(), color="#222222", lw=1.2, label="Close")
    # position p is held over (previous bar, this bar]: shade with steps "pre"
    x = result.frames["agent"].index
    for sign, color, text in ((1, _GREEN, "Agent long"), (-1, _RED, "Agent short")):
        mask = np.sign(pos) == sign
        if mask.any():
            ax.fill_between(
                x,
                0,
                1,
                where=mask,
                step="pre",
                color=color,
                alpha=0.13,
                lw=0,
                transform=ax.get_xaxis_transform(),
                label=text,
            )
    ax.set_ylabel("Price")
    share = m.market_share if m.market_share is not None else 0.0
    flat = " — FLAT/NEAR-FLAT" if m.flat else ""
    ax.set_title(
        f"Agent exposure over time · in the market on {share:.0%} of bars, "
        f"mean |exposure| {m.mean_abs_exposure or 0.0:.2f}{flat}\n{_subtitle(result)}",
        fontsize=11,
        loc="left",
    )
    ax.legend(loc="best", frameon=False)


def _exposure_panel(ax_pos: Axes, result: BacktestResult, xs: pd.Index, pos: np.ndarray) -> None:
    """The agent's ``[n]`` exposure ``pos`` as steps over ``xs`` (``[n + 1]``: the start bar
    first, exposure 0 there), the vol-targeted buy-and-hold exposure dashed for reference."""
    ps = np.concatenate(([0.0], pos))
    ax_pos.step(xs, ps, where="pre", color=COLORS["agent"], lw=1.4, label="Agent exposure")
    ax_pos.fill_between(xs, ps, 0.0, step="pre", color=COLORS["agent"], alpha=0.15, lw=0)
    ref = result.frames.get("vol_target_buy_and_hold")
    if ref is not None:
        rs = np.concatenate(([0.0], ref["position"].to_numpy()))
        ax_pos.step(
            xs,
            rs,
            where="pre",
            color=COLORS["vol_target_buy_and_hold"],
            lw=1.0,
            ls="--",
            label=_label(result, "vol_target_buy_and_hold"),
        )
        ps = np.concatenate([ps, rs])
    ax_pos.legend(loc="best", frameon=False, fontsize=8)
    allowed = result.env_settings.get("positions")
    sized = result.env_settings.get("agent_sizing", "none") != "none"
    if isinstance(allowed, list) and allowed and not sized:
        names = {-1.0: "short", 0.0: "flat", 1.0: "long"}
        ax_pos.set_yticks(allowed)
        ax_pos.set_yticklabels([f"{names[p]} ({p:g})" if p in names else f"{p:g}" for p in allowed])
    # the axis spans the agent's signal range (a long-only agent: from flat), and every exposure
    signal_lo = min(0.0, float(result.env_settings.get("signal_range", [-1.0])[0]))
    lo, hi = min(signal_lo, float(ps.min())), max(1.0, float(ps.max()))
    ax_pos.set_ylim(lo - 0.15, hi + 0.15)
    ax_pos.set_ylabel("Exposure")
    ax_pos.set_xlabel("Date")


def plot_return_distribution(result: BacktestResult) -> Figure:
    """Histogram of per-bar net returns with the agent's historical VaR and CVaR 95 % marked."""
    from matplotlib.ticker import PercentFormatter

    fig = new_figure(10, 4.8)
    ax = fig.subplots()
    agent = np.expm1(result.frames["agent"]["log_return"].to_numpy())
    bh = np.expm1(result.frames["buy_and_hold"]["log_return"].to_numpy())
    both = np.concatenate([agent, bh])
    lo, hi = float(both.min()), float(both.max())
    if hi - lo < 1e-12:
        lo, hi = lo - 1e-3, hi + 1e-3
    bins = np.linspace(lo, hi, 61).tolist()
    ax.hist(
        bh,
        bins=bins,
        histtype="step",
        color=COLORS["buy_and_hold"],
        lw=1.4,
        label=_label(result, "buy_and_hold"),
    )
    ax.hist(agent, bins=bins, color=COLORS["agent"], alpha=0.55, label="Agent")
    m = result.metrics["agent"]
    if m.var_95 is not None:
        ax.axvline(m.var_95, color=_RED, ls="--", lw=1.5, label=f"Agent VaR 95%: {m.var_95:.2%}")
    if m.cvar_95 is not None:
        ax.axvline(m.cvar_95, color=_RED, lw=2.0, label=f"Agent CVaR 95%: {m.cvar_95:.2%}")
    flat = 1.0 - (m.market_share if m.market_share is not None else 0.0)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=1))
    ax.set_xlabel("Net return per bar (after costs)")
    ax.set_ylabel("Number of bars")
    note = f" · agent flat on {flat:.0%} of bars" if flat > 0 else ""
    ax.set_title(
        f"Distribution of per-bar returns{note}\n{_subtitle(result)}", fontsize=11, loc="left"
    )
    ax.legend(loc="upper right", frameon=False)
    _style(ax)
    return fig


def plot_critic_quantiles(result: BacktestResult) -> Figure:
    """Fan chart of the critic's predicted discounted return-to-go, with the realised one."""
    from matplotlib.ticker import FuncFormatter

    c = result.critic
    x = c.index
    fig = new_figure(10, 5.0)
    ax = fig.subplots()
    color = COLORS["agent"]
    ax.fill_between(x, c["q05"], c["q95"], color=color, alpha=0.15, lw=0, label="5–95% band")
    ax.fill_between(x, c["q25"], c["q75"], color=color, alpha=0.32, lw=0, label="25–75% band")
    ax.plot(x, c["q50"], color=color, lw=1.6, label="Median")
    ax.plot(
        x,
        c["cvar"],
        color=_RED,
        lw=1.2,
        ls="--",
        label=f"Predicted CVaR (α = {result.cvar_alpha:g})",
    )
    # the zero line under everything, the realised line over everything: a flat agent's
    # realised return-to-go is (about) 0 and must not disappear under the reference line
    ax.axhline(0.0, color=ZERO_LINE_COLOR, lw=0.8, ls=":", zorder=0.5)
    ax.plot(x, c["realised"], color=REALISED_COLOR, lw=2.0, zorder=5, label="Realised")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v * 100:.0f}%"))
    ax.set_ylabel("Discounted return-to-go (log)")
    ax.set_xlabel("Date (decision bar)")
    ax.set_title(
        f"Critic-predicted return quantiles (γ = {result.gamma:g}, "
        f"horizon ≈ {1 / max(1e-9, 1 - result.gamma):.0f} bars)\n{_subtitle(result)}",
        fontsize=11,
        loc="left",
    )
    fig.legend(loc="outside lower center", frameon=False, ncols=5, fontsize=9)
    _style(ax)
    _date_axis(ax)
    return fig


PLOTS: dict[str, Callable[[Any], Figure]] = {
    "equity": plot_equity,
    "position": plot_positions,
    "returns": plot_return_distribution,
    "critic": plot_critic_quantiles,
}
"""Plot name (``<name>.png``) → figure function, in report order."""


def figure_png(fig: Figure) -> bytes:
    """Render ``fig`` to PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, facecolor="white")
    return buf.getvalue()


def save_plots(result: BacktestResult, out_dir: str | Path) -> dict[str, Path]:
    """Write every plot of :data:`PLOTS` as ``out_dir/<name>.png``; name → path."""
    out = ensure_real_dir(Path(out_dir))
    paths: dict[str, Path] = {}
    for name, make in PLOTS.items():
        path = write_bytes_atomic(out / f"{name}.png", figure_png(make(result)))
        paths[name] = path
    return paths
