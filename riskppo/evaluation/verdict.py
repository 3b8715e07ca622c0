"""The statistics block of a trading record: does the agent beat vol-targeted buy-and-hold?

Read by the backtest report (one split) and the walk-forward report (the stitched record).
Inputs are backtest strategy frames (:func:`riskppo.evaluation.baselines.strategy_frame`: per
bar ``position``, ``signal``, ``log_return``, ``gross_return``); the statistics themselves are
the pure functions of :mod:`riskppo.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from riskppo import stats
from riskppo.evaluation.trials import spa_entry, trial_lines, trials_block
from riskppo.runs.ledger import Trials
from riskppo.stats.core import format_p

BENCHMARK = "vol_target_buy_and_hold"
BENCHMARK_NAME = "vol-targeted buy-and-hold"


def statistics_block(
    frames: Mapping[str, pd.DataFrame],
    bars_per_year: float,
    *,
    fee: float,
    n_trials: int = 1,
    seed: int = 0,
    trials: Trials | None = None,
) -> dict[str, Any]:
    """Agent vs :data:`BENCHMARK` (unscaled and scaled to the agent's mean |exposure|): the
    statistics summary, its table rows, the random-timing null and the verdict line.

    ``n_trials``: the user's count of configurations tried; ``trials``: the trial ledger's
    (:func:`riskppo.evaluation.trials.judge_trials`) — the verdict adjusts for the larger N, and
    the deflated Sharpe ratio uses the variance of the ledger's Sharpe ratios."""
    extra = trials_block(trials, n_trials)
    n_trials = extra["n_trials"] if extra else n_trials
    agent, bench = frames["agent"], frames[BENCHMARK]
    agent_r, bench_r = agent["log_return"].to_numpy(), bench["log_return"].to_numpy()
    agent_x = float(np.abs(agent["position"]).mean())
    bench_x = float(np.abs(bench["position"]).mean())
    summary = stats.summarize(
        agent_r,
        bench_r,
        periods_per_year=bars_per_year,
        agent_exposure=agent_x,
        benchmark_exposure=bench_x,
        n_trials=n_trials,
        trials_sharpe_var=trials.sharpe_var if trials is not None else None,
        benchmark_name=BENCHMARK_NAME,
        seed=seed,
    )
    verdict = stats.verdict(
        stats.paired_sharpe_test(agent_r, bench_r, bars_per_year), n_trials, BENCHMARK_NAME
    )
    if extra is not None:  # the ledger's configurations on these bars: Hansen's SPA, StepM
        extra["spa"] = spa_entry(
            trials,
            bench["log_return"],
            bars_per_year,
            p_sidak=verdict.p_adjusted,
            benchmark_name=summary.benchmark_name,
            seed=seed,
        )
    sharpes = (summary.agent.sharpe.estimate, summary.benchmark.sharpe.estimate)
    return {
        "exposure_scale": agent_x / bench_x if bench_x > 0 else 0.0,
        "stats": summary.to_dict(),
        "stats_rows": [format_row(row) for row in summary.rows()],
        "random_timing": random_timing(frames, bars_per_year, fee=fee, seed=seed),
        "supervised": supervised_comparison(frames, bars_per_year),
        "verdict": {
            "claim": verdict.claim,
            "p_adjusted": verdict.p_adjusted,
            "text": honest_text(verdict.text, verdict.claim, *sharpes),
        },
        "trials": extra,
    }


def honest_text(text: str, claim: bool, agent_sharpe: float, bench_sharpe: float) -> str:
    """The verdict line, with its claim worded for what it is: an agent whose Sharpe ratio is
    higher than the benchmark's while both are negative "loses less than" it, not "beats" it."""
    if not (claim and agent_sharpe < 0 and bench_sharpe < 0):
        return text
    both = f"both lose money: Sharpe {agent_sharpe:.2f} against {bench_sharpe:.2f}; "
    head = f"loses less than {BENCHMARK_NAME} ({both}"
    return text.replace(f"beats {BENCHMARK_NAME} (", head, 1)


def supervised_comparison(
    frames: Mapping[str, pd.DataFrame], bars_per_year: float
) -> dict[str, float | None] | None:
    """The supervised baseline's Sharpe ratio (log returns, as the verdict's) and the agent's
    paired test against it (the verdict's test, unadjusted); None where the record has no
    supervised baseline (walk-forward runs written before it existed)."""
    if "supervised" not in frames:
        return None
    agent_r = frames["agent"]["log_return"].to_numpy()
    sup_r = frames["supervised"]["log_return"].to_numpy()
    test = stats.paired_sharpe_test(agent_r, sup_r, bars_per_year)
    figures = (stats.sharpe(sup_r, bars_per_year), test.diff, test.p_one_sided)
    return {
        key: float(v) if math.isfinite(v) else None
        for key, v in zip(("sharpe", "diff", "p_one_sided"), figures, strict=True)
    }


def random_timing_text(timing: Mapping[str, Any]) -> str:
    """The random-timing null in words (its percentile is already in percent)."""
    if timing.get("percentile") is None:
        return "not applicable (the agent's signal never moved)"
    return (
        f"the agent's Sharpe beats {timing['percentile']:.0f}% of {timing['n']} smooth random "
        f"signals in its band (p = {timing['p_value']:.2g})"
    )


def verdict_lines(block: Mapping[str, Any], where: str = "") -> list[str]:
    """What a terminal shows of a statistics block (``where``, e.g. ``" on the test split (350
    bars)"``, says which record): the verdict line, the Sharpe ratios it compares (log returns: the
    test's own; the supervised baseline beside them where there is one) and the random-timing
    null. The HTML reports show the same block in full."""
    s = block["stats"]
    sharpes = f"agent {_fmt(s['agent']['sharpe']['estimate'])}, VT B&H "
    sharpes += _fmt(s["benchmark"]["sharpe"]["estimate"])
    sup = block.get("supervised")
    if sup is not None:
        sharpes += (
            f", supervised {_fmt(sup['sharpe'])} (agent − supervised {_fmt(sup['diff'], '+.2f')}, "
            f"one-sided p = {format_p(_nan(sup['p_one_sided']))})"
        )
    lines = [
        f"verdict{where}: {block['verdict']['text']}",
        f"  Sharpe ratio (annual, log returns): {sharpes}",
        f"  random timing: {random_timing_text(block['random_timing'])}",
    ]
    if block.get("trials"):
        dsr = _fmt(s.get("deflated_sharpe"), ".3f")
        lines += [*trial_lines(block["trials"]), f"  deflated Sharpe ratio: {dsr}"]
    return lines


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    """A figure of a (JSON) statistics block: None and nan are undefined."""
    return "–" if value is None or math.isnan(value) else format(value, spec)


def random_timing(
    frames: Mapping[str, pd.DataFrame], bars_per_year: float, *, fee: float, seed: int
) -> dict[str, Any]:
    """The agent's Sharpe against smooth random signals in its own band (the range of its
    signals) that move as much per bar as its signal does (:func:`stats.matched_smoothness`),
    sized like it (the vol-targeted baseline's exposure is the sizing multiplier) and scored on
    the asset's per-bar return (buy-and-hold's gross return) with the same fee."""
    signal = frames["agent"]["signal"].to_numpy()
    band = (float(signal.min()), float(signal.max()))
    if band[1] - band[0] < 1e-9:
        return {"band": list(band), "percentile": None, "p_value": None, "n": 0}
    agent_sharpe = stats.sharpe(frames["agent"]["log_return"].to_numpy(), bars_per_year)
    span = stats.matched_smoothness(signal, band, seed=seed)  # the agent's own turnover
    null = stats.random_timing_null(
        agent_sharpe,
        frames["buy_and_hold"]["gross_return"].to_numpy(),
        frames[BENCHMARK]["position"].to_numpy(),
        band,
        fee=fee,
        periods_per_year=bars_per_year,
        smoothness=span,
        seed=seed,
    )
    return {
        "band": list(band),
        "smoothness": span,
        "agent_sharpe": null.agent_sharpe,
        "null_median_sharpe": float(np.median(null.null_sharpes)),
        "percentile": null.percentile,
        "p_value": null.p_value,
        "n": null.n,
    }


_PERCENT_WORDS = ("volatility", "drawdown", "CVaR", "alpha (annual)", "tracking error")


def format_stat(label: str, value: float | None) -> str:
    """A statistics-table value for display: p-values to two significant digits, probabilities
    to three decimals, risk figures in percent, track records in bars, the rest to two
    decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return "∞"
    if label.startswith("p "):
        return f"{value:.2g}"
    if label.startswith(("PSR", "deflated")):  # probabilities near 1 must not round to "1"
        return f"{value:.3f}"
    if any(w in label for w in _PERCENT_WORDS):
        return f"{value:.2%}" if "per bar" in label else f"{value:.1%}"
    if "bars" in label:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def format_row(row: tuple[Any, ...]) -> list[str]:
    """One ``StatsSummary.rows()`` row as strings: label, three values, note."""
    label, *values, note = row
    return [label, *(format_stat(label, v) for v in values), note or ""]
