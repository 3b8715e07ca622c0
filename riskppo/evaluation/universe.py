"""The verdict table of a universe run: one trained agent per (stock, seed), each backtested on
its test period (``riskppo universe``; the runs themselves are made by :mod:`riskppo.cli.universe`).

For each cell it reads the run's ``backtest_test/metrics.json`` (the agent's and the
vol-targeted buy-and-hold's Sharpe, the constraint's own CVaR figure against its limit, the share
of bars in the market and the mean |exposure|) and ``backtest_test/equity.csv`` (per-bar equity of
both, from which the per-bar net simple returns follow), and counts how many cells meet the CVaR
limit and how many match or beat vol-targeted buy-and-hold on Sharpe. The benchmark is the
verdict's (:func:`riskppo.evaluation.references.choose_benchmark`): under the agent's risk overlay
where it traded under one (``vt_bh_overlay``), else — and for a cell backtested before that
reference existed — ``vol_target_buy_and_hold``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from riskppo.evaluation.limit_backtest import LIMIT_SIMS, cell_limit, pooled_limit
from riskppo.evaluation.references import VT_BH, VT_BH_OVERLAY, choose_benchmark
from riskppo.stats import ForecastRecord, adjust_p, paired_sharpe_test

__all__ = [
    "CellResult",
    "UniverseCounts",
    "UniverseLimits",
    "cell_result",
    "count_cells",
    "format_table",
    "limit_section",
]

BENCHMARK = VT_BH  # without the overlay; a cell's own benchmark is CellResult.benchmark


@dataclass(frozen=True)
class CellResult:
    """The test-period verdict of one (stock, seed) run; ``None`` where undefined or failed.

    Attributes:
        symbol, seed: the cell.
        run_dir: its run directory.
        error: why the cell has no result (its training or backtest failed), else ``None``.
        agent_sharpe, benchmark_sharpe: annualised Sharpe of the agent and of vol-targeted
            buy-and-hold over the same bars, net of costs.
        cvar: the constraint's own figure for the agent, CVaR at ``risk.cvar_alpha`` of
            ``cvar_horizon``-bar net log returns (a negative number); ``cvar_limit`` its limit.
        cvar_horizon: the horizon in bars (20 in the default config: "CVaR20").
        market_share: share of bars the agent was in the market (|exposure| >= 0.05).
        mean_abs_exposure: mean |exposure| of the agent.
        active_share: share of bars its own signal chose a position at least 0.05 beyond the
            least it must hold (:func:`riskppo.evaluation.metrics.active_share`).
        p_value: one-sided p-value of "agent Sharpe > vol-targeted buy-and-hold Sharpe" from
            the paired test (:func:`paired_p_value`); ``None`` when undefined.
        benchmark: the benchmark's strategy name (``vt_bh_overlay`` under a risk overlay).
    """

    symbol: str
    seed: int
    run_dir: str
    error: str | None = None
    agent_sharpe: float | None = None
    benchmark_sharpe: float | None = None
    cvar: float | None = None
    cvar_limit: float | None = None
    cvar_horizon: int | None = None
    market_share: float | None = None
    mean_abs_exposure: float | None = None
    active_share: float | None = None
    p_value: float | None = None
    benchmark_cvar: float | None = None
    benchmark: str = BENCHMARK

    @property
    def limit_met(self) -> bool | None:
        if self.cvar is None or self.cvar_limit is None:
            return None
        return self.cvar >= self.cvar_limit

    @property
    def benchmark_limit_met(self) -> bool | None:
        """Whether vol-targeted buy-and-hold itself meets the agent's limit on these bars."""
        if self.benchmark_cvar is None or self.cvar_limit is None:
            return None
        return self.benchmark_cvar >= self.cvar_limit

    @property
    def beats_benchmark(self) -> bool | None:
        if self.agent_sharpe is None or self.benchmark_sharpe is None:
            return None
        return self.agent_sharpe >= self.benchmark_sharpe

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "limit_met": self.limit_met,
            "benchmark_limit_met": self.benchmark_limit_met,
            "beats_benchmark": self.beats_benchmark,
        }


def account_returns(equity_csv: Path, strategy: str) -> np.ndarray:
    """Per-bar net simple returns ``[n_bars]`` of ``strategy``'s account from a backtest's
    ``equity.csv`` (its ``<strategy>_equity`` column starts at 1 on the first decision bar):
    the returns its Sharpe ratio in ``metrics.json`` is computed from."""
    equity = pd.read_csv(equity_csv, usecols=[f"{strategy}_equity"]).iloc[:, 0].to_numpy()
    equity = equity.astype(np.float64)
    return equity[1:] / equity[:-1] - 1.0


def _returns(
    equity_csv: Path, n_bars: int | None, benchmark: str = BENCHMARK
) -> tuple[np.ndarray, np.ndarray]:
    """The agent's and the ``benchmark``'s per-bar simple returns from ``equity_csv``;
    ``ValueError`` unless each holds finite returns, ``n_bars`` of them where ``metrics.json``
    counts them."""
    agent, bench = account_returns(equity_csv, "agent"), account_returns(equity_csv, benchmark)
    for r in (agent, bench):
        if n_bars is not None and len(r) != n_bars:
            raise ValueError(f"{len(r)} bars where metrics.json counts {n_bars}")
        if not np.isfinite(r).all():
            raise ValueError("missing or non-finite equity values")
    return agent, bench


def paired_p_value(agent: np.ndarray, benchmark: np.ndarray, bars_per_year: float) -> float | None:
    """One-sided p-value that the agent's Sharpe exceeds the benchmark's, from their per-bar
    returns ``[n_bars]`` over the same bars (the paired test of
    :func:`riskppo.stats.paired_sharpe_test`); ``None`` when undefined (a constant
    record, or fewer than 3 bars)."""
    if len(agent) < 3:
        return None
    p = paired_sharpe_test(agent, benchmark, bars_per_year).p_one_sided
    return float(p) if math.isfinite(p) else None


def cell_result(symbol: str, seed: int, run_dir: Path, error: str | None = None) -> CellResult:
    """The verdict of one finished cell, read from ``run_dir/backtest_test``; a cell whose
    files are missing (it failed) gets ``error`` (or a default reason) and no numbers, one
    whose files do not read back (a truncated write, a damaged copy) the error
    ``"backtest_test/<file> does not read back (…)"``."""
    out = run_dir / "backtest_test"
    if error is not None or not (out / "metrics.json").is_file():
        return CellResult(symbol, seed, str(run_dir), error or "no backtest_test/metrics.json")
    name = "metrics.json"
    try:
        metrics = json.loads((out / name).read_text())
        name = "run_info.json"
        info = json.loads((out / name).read_text())
        bars_per_year = info["bars_per_year"]
        overlay = (info.get("env") or {}).get("overlay") is not None
        key = choose_benchmark(metrics, overlay).key
        agent, bench = metrics["agent"], metrics[key]
        name = "equity.csv"
        returns = _returns(out / name, agent.get("n_bars"), key)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        return CellResult(
            symbol, seed, str(run_dir), f"{out.name}/{name} does not read back ({exc})"
        )
    p = paired_p_value(*returns, bars_per_year)
    return CellResult(
        symbol,
        seed,
        str(run_dir),
        agent_sharpe=agent["sharpe"],
        benchmark_sharpe=bench["sharpe"],
        cvar=agent["cvar_horizon"],
        cvar_limit=agent["cvar_limit"],
        cvar_horizon=agent["cvar_horizon_bars"],
        market_share=agent["market_share"],
        mean_abs_exposure=agent["mean_abs_exposure"],
        active_share=agent.get("active_share"),
        p_value=p,
        benchmark_cvar=bench["cvar_horizon"],
        benchmark=key,
    )


@dataclass(frozen=True)
class UniverseCounts:
    """How many of ``n`` cells (``failed`` of them without a result) meet the CVaR limit and
    have a Sharpe at least that of vol-targeted buy-and-hold."""

    n: int
    failed: int
    limit_met: int
    benchmark_limit_met: int
    beats_benchmark: int
    significant: int  # one-sided p < 0.05, each stock on its own
    significant_adjusted: int  # still below 0.05 after a Šidák adjustment for the n cells
    in_market: int  # in the market (|exposure| >= 0.05) on at least half of the bars
    active: int  # its own signal chose a position on at least half of the bars


def count_cells(cells: Sequence[CellResult], alpha: float = 0.05) -> UniverseCounts:
    ps = [c.p_value for c in cells if c.p_value is not None]
    return UniverseCounts(
        n=len(cells),
        failed=sum(c.error is not None for c in cells),
        limit_met=sum(c.limit_met is True for c in cells),
        benchmark_limit_met=sum(c.benchmark_limit_met is True for c in cells),
        beats_benchmark=sum(c.beats_benchmark is True for c in cells),
        significant=sum(p < alpha for p in ps),
        significant_adjusted=sum(adjust_p(p, len(cells)) < alpha for p in ps),
        in_market=sum((c.market_share or 0.0) >= 0.5 for c in cells),
        active=sum((c.active_share or 0.0) >= 0.5 for c in cells),
    )


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _mark(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "no")


def _benchmark_words(cells: Sequence[CellResult]) -> tuple[str, str]:
    """The cells' benchmark as a column label and in words: the overlaid one where every cell
    with a result used it, the plain one where none did, and both named where they differ
    (a universe resumed across versions)."""
    used = [c.benchmark == VT_BH_OVERLAY for c in cells if c.error is None]
    plain, overlaid = choose_benchmark((), False), choose_benchmark([VT_BH_OVERLAY], True)
    if not any(used):
        return plain.label, plain.name
    if all(used):
        return overlaid.label, overlaid.name
    mixed = f"{plain.name} (under the agent's risk overlay in {sum(used)} cells)"
    return "VT B&H (+overlay)", mixed


def format_table(cells: Sequence[CellResult], title: str) -> str:
    """A Markdown table (one row per cell, the seed column only with several seeds) and the
    counts below it."""
    several_seeds = len({c.seed for c in cells}) > 1
    horizon = next((c.cvar_horizon for c in cells if c.cvar_horizon is not None), None)
    cvar = f"CVaR{horizon if horizon is not None else ''}"
    vt, words = _benchmark_words(cells)
    head = ["stock", *(["seed"] * several_seeds), "agent Sharpe", f"{vt} Sharpe"]
    head += [cvar, "limit", "limit met", f"{vt} {cvar}", "in market", "mean abs exposure"]
    head += ["signal active"]
    head += [f"p (Sharpe > {vt})"]
    lines = [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cells:
        row = [c.symbol, *([str(c.seed)] * several_seeds)]
        if c.error is not None:
            row += [f"failed: {c.error}"] + [""] * (len(head) - len(row) - 1)
        else:
            row += [_num(c.agent_sharpe, ".2f"), _num(c.benchmark_sharpe, ".2f")]
            row += [_num(c.cvar, ".4f"), _num(c.cvar_limit, ".4f"), _mark(c.limit_met)]
            row += [_num(c.benchmark_cvar, ".4f")]
            row += [_num(c.market_share, ".0%"), _num(c.mean_abs_exposure, ".2f")]
            row += [_num(c.active_share, ".0%")]
            row += [_num(c.p_value, ".3f")]
        lines.append("| " + " | ".join(row) + " |")
    k = count_cells(cells)
    lines += [
        "",
        f"{cvar} limit met: {k.limit_met}/{k.n} ({words}: "
        f"{k.benchmark_limit_met}/{k.n}); agent Sharpe >= {words}: "
        f"{k.beats_benchmark}/{k.n}" + (f"; failed: {k.failed}/{k.n}" if k.failed else ""),
        f"edge over {words} with one-sided p < 0.05: {k.significant}/{k.n} "
        f"({k.significant_adjusted}/{k.n} after a Šidák adjustment for {k.n} tests)",
        f"on at least half of the bars: in the market (|exposure| >= 0.05) {k.in_market}/{k.n}; "
        f"its signal active (>= 0.05 beyond the least it must hold) {k.active}/{k.n}",
    ]
    return "\n".join(lines) + "\n"


class UniverseLimits(NamedTuple):
    """The ES backtest of the risk overlay's forecast on each cell's test period and pooled
    over the cells (:mod:`riskppo.evaluation.limit_backtest`): ``markdown`` the section under
    the table (``""`` when no cell traded under an overlay), ``cells`` one block per cell with
    ``symbol`` and ``seed`` (or its ``error``), ``pooled`` the one test over the stocks, each
    with its first seed's windows: a stock's seeds share its outcomes, so pooling them would
    count one market's tail several times (``None`` without any)."""

    markdown: str
    cells: list[dict[str, Any]]
    pooled: dict[str, Any] | None


def limit_section(
    cells: Sequence[CellResult], *, n_sims: int = LIMIT_SIMS, seed: int = 0
) -> UniverseLimits:
    """:class:`UniverseLimits` of the finished ``cells``, from each run's ``config.yaml`` and
    ``backtest_test/equity.csv`` and the data."""
    blocks: list[dict[str, Any]] = []
    records: dict[str, tuple[ForecastRecord, int]] = {}  # per stock: its first seed's
    for c in cells:
        if c.error is not None:
            continue
        try:
            got = cell_limit(Path(c.run_dir), n_sims=n_sims, seed=seed)
        except (OSError, UnicodeDecodeError, ValueError, KeyError) as exc:
            error = f"its files do not give the forecasts ({exc})"
            blocks.append({"symbol": c.symbol, "seed": c.seed, "error": error})
            continue
        if got is not None:
            blocks.append({"symbol": c.symbol, "seed": c.seed, **got[0]})
            records.setdefault(c.symbol, (got[1], int(got[0]["flat_windows"])))
    done = [b for b in blocks if "error" not in b]
    if not blocks:
        return UniverseLimits("", [], None)
    pooled = None
    if done and records:
        flat = sum(n for _, n in records.values())
        h, a = int(done[0]["horizon"]), float(done[0]["alpha"])
        recs = [r for r, _ in records.values()]
        test = pooled_limit(recs, h, a, flat_windows=flat, n_sims=n_sims, seed=seed)
        pooled = test.to_dict()
    return UniverseLimits(_limit_markdown(blocks, pooled), blocks, pooled)


def _limit_markdown(blocks: list[dict[str, Any]], pooled: dict[str, Any] | None) -> str:
    """The section: one row per cell, the pooled row, how it was computed."""
    done = [b for b in blocks if "error" not in b]
    h, a = (done[0]["horizon"], done[0]["alpha"]) if done else ("h", 0.05)
    several = len({b["seed"] for b in blocks}) > 1
    head = ["stock", *(["seed"] * several), "windows", "exceedances (obs / exp)"]
    head += ["Kupiec p", "Z2", "Z2 p"]
    lines = [f"## Is the limit's forecast right? (VaR/CVaR {a:.0%} of {h}-bar returns)", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    n = 0 if pooled is None else pooled["markets"]
    name = f"pooled ({n} stock{'' if n == 1 else 's'})"
    total = [] if pooled is None else [{**pooled, "symbol": name, "seed": ""}]
    for b in [*blocks, *total]:
        row = [b["symbol"], *([str(b["seed"])] * several)]
        if "error" in b:
            row += [f"not computed: {b['error']}"] + [""] * (len(head) - len(row) - 1)
        else:
            row += [str(b["windows"]), f"{b['exceedances']} / {b['expected']:.1f}"]
            row += [_num(b["kupiec_p"], ".3f"), _num(b["z2"], "+.2f"), _num(b["z2_p"], ".3f")]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        f"Each test period's every {h}th decision bar (non-overlapping windows), the position "
        f"decided there held over the next {h} bars against the risk overlay's VaR and CVaR "
        "forecast (without its margin). Kupiec (1995): two-sided, too many or too few "
        "exceedances; Acerbi & Székely (2014) Z2 < 0: the tail is worse than forecast, p "
        "simulated from the overlay's own model. Reject at p < 0.05. The pooled test takes "
        "each stock's first seed and treats the stocks as independent: where they fall "
        "together it rejects too often (docs/risk.md).",
    ]
    return "\n".join(lines) + "\n"
