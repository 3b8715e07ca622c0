"""The statistics block of a trading record: does the agent beat vol-targeted buy-and-hold?

Read by the backtest report (one split) and the walk-forward report (the stitched record).
Inputs are backtest strategy frames (:func:`riskppo.evaluation.baselines.strategy_frame`: per
bar ``position``, ``signal``, ``log_return``, ``gross_return``); the statistics themselves are
the pure functions of :mod:`riskppo.stats`, fed the account's per-bar **simple** returns
(:func:`account_returns`), the returns the metrics table's Sharpe ratio uses too: one Sharpe
ratio per strategy everywhere. The benchmark has the agent's risk machinery: under
a risk overlay it is vol-targeted buy-and-hold held in the agent's env, overlay included
(:func:`riskppo.evaluation.references.choose_benchmark`), and the random-timing null holds its
random signals the same way (:mod:`riskppo.evaluation.timing_null`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from riskppo import stats
from riskppo.evaluation.references import Benchmark, choose_benchmark
from riskppo.evaluation.timing_null import EnvTables, timing_null
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
    overlay: bool = False,
    tables: EnvTables | None = None,
) -> dict[str, Any]:
    """Agent vs its benchmark (unscaled and scaled to the agent's mean |exposure|): the
    statistics summary, its table rows, the random-timing null and the verdict line.

    ``overlay``: the agent trades under a risk overlay (the benchmark: ``choose_benchmark``'s);
    ``tables``: the agent env's, for the null (:mod:`~riskppo.evaluation.timing_null`).
    ``n_trials``: the user's count of configurations tried; ``trials``: the trial ledger's
    (:func:`riskppo.evaluation.trials.judge_trials`) — the verdict adjusts for the larger N, and
    the deflated Sharpe ratio uses the variance of the ledger's Sharpe ratios."""
    extra = trials_block(trials, n_trials)
    n_trials = extra["n_trials"] if extra else n_trials
    chosen = choose_benchmark(frames, overlay)
    agent, bench = frames["agent"], frames[chosen.key]
    agent_r, bench_r = account_returns(agent), account_returns(bench)
    agent_x = float(np.abs(agent["position"]).mean())
    bench_x = float(np.abs(bench["position"]).mean())
    var = trials.sharpe_var if trials is not None else None
    summary = stats.summarize(
        agent_r, bench_r, periods_per_year=bars_per_year, agent_exposure=agent_x,
        benchmark_exposure=bench_x, n_trials=n_trials, trials_sharpe_var=var,
        benchmark_name=chosen.name, seed=seed, log_returns=False,
    )  # fmt: skip
    # the bootstrap below stats.SMALL_SAMPLE_BARS bars, else HAC: the summary's own verdict test
    test = stats.paired_sharpe_test(agent_r, bench_r, bars_per_year, seed=seed)
    verdict = stats.verdict(test, n_trials, chosen.name)
    if extra is not None:  # the ledger's configurations on these bars: Hansen's SPA, StepM
        extra["spa"] = spa_entry(
            trials,
            pd.Series(bench_r, index=bench.index),
            bars_per_year,
            p_sidak=verdict.p_adjusted,
            benchmark_name=summary.benchmark_name,
            seed=seed,
        )
    sharpes = (summary.agent.sharpe.estimate, summary.benchmark.sharpe.estimate)
    return {
        "benchmark": chosen._asdict(),
        "exposure_scale": agent_x / bench_x if bench_x > 0 else 0.0,
        "stats": summary.to_dict(),
        "stats_rows": [format_row(row) for row in summary.rows()],
        "random_timing": random_timing(frames, bars_per_year, fee=fee, seed=seed, tables=tables),
        "supervised": supervised_comparison(frames, bars_per_year, seed=seed),
        "verdict": {
            "claim": verdict.claim,
            "p_adjusted": verdict.p_adjusted,
            "text": honest_text(verdict.text, verdict.claim, *sharpes, name=chosen.name),
        },
        "trials": extra,
        "test_method": test.method,
    }


def account_returns(frame: pd.DataFrame) -> np.ndarray:
    """``[n]`` per-bar simple returns of a strategy frame's account, ``e^{log_return} − 1``:
    what every Sharpe ratio and test of a trading record is computed from."""
    return np.expm1(frame["log_return"].to_numpy(dtype=np.float64))


def benchmark_of(block: Mapping[str, Any]) -> Benchmark:
    """The benchmark a statistics block was read against (blocks written before the choice
    existed: vol-targeted buy-and-hold)."""
    stored = block.get("benchmark")
    return choose_benchmark((), False) if not stored else Benchmark(**stored)


def honest_text(
    text: str, claim: bool, agent_sharpe: float, bench_sharpe: float, *, name: str = BENCHMARK_NAME
) -> str:
    """The verdict line, with its claim worded for what it is: an agent whose Sharpe ratio is
    higher than the benchmark's (``name``) while both are negative "loses less than" it, not
    "beats" it."""
    if not (claim and agent_sharpe < 0 and bench_sharpe < 0):
        return text
    both = f"both lose money: Sharpe {agent_sharpe:.2f} against {bench_sharpe:.2f}; "
    head = f"loses less than {name} ({both}"
    return text.replace(f"beats {name} (", head, 1)


def supervised_comparison(
    frames: Mapping[str, pd.DataFrame], bars_per_year: float, *, seed: int = 0
) -> dict[str, float | None] | None:
    """The supervised baseline's Sharpe ratio (simple returns, as the verdict's) and the agent's
    paired test against it (the verdict's test, unadjusted); None where the record has no
    supervised baseline (walk-forward runs written before it existed)."""
    if "supervised" not in frames:
        return None
    agent_r = account_returns(frames["agent"])
    sup_r = account_returns(frames["supervised"])
    test = stats.paired_sharpe_test(agent_r, sup_r, bars_per_year, seed=seed)
    figures = (stats.sharpe(sup_r, bars_per_year), test.diff, test.p_one_sided)
    return {
        key: float(v) if math.isfinite(v) else None
        for key, v in zip(("sharpe", "diff", "p_one_sided"), figures, strict=True)
    }


def random_timing_text(timing: Mapping[str, Any]) -> str:
    """The random-timing null in words (its percentile is already in percent: 73.2 is "beats
    73% of"), with how its random signals were held."""
    if timing.get("percentile") is None:
        return "not applicable (the agent's signal never moved)"
    held = _HELD.get(str(timing.get("held")), "")
    return (
        f"the agent's Sharpe beats {timing['percentile']:.0f}% of {timing['n']} smooth random "
        f"signals in its band{held} (p = {timing['p_value']:.2g})"
    )


_HELD = {  # how the null's random signals became positions (random_timing's "held")
    "agent_env_overlay": ", held in its own env (sizing, risk overlay, fill, fees)",
    "agent_env": ", held in its own env (sizing, fill, fees)",
    "vol_target_gross": ", scored on buy-and-hold's bar returns at the vol-targeted exposure "
    "without the agent's overlay or fill (the record predates its env tables)",
}


def verdict_lines(block: Mapping[str, Any], where: str = "") -> list[str]:
    """What a terminal shows of a statistics block (``where``, e.g. ``" on the test split (350
    bars)"``, says which record): the verdict line, the Sharpe ratios it compares (the metrics
    table's; the supervised baseline beside them where there is one) and the random-timing
    null. The HTML reports show the same block in full."""
    s = block["stats"]
    bench = benchmark_of(block)
    sharpes = f"agent {_fmt(s['agent']['sharpe']['estimate'])}, {bench.label} "
    sharpes += _fmt(s["benchmark"]["sharpe"]["estimate"])
    sup = block.get("supervised")
    if sup is not None:
        sharpes += (
            f", supervised {_fmt(sup['sharpe'])} (agent − supervised {_fmt(sup['diff'], '+.2f')}, "
            f"one-sided p = {format_p(_nan(sup['p_one_sided']))})"
        )
    lines = [
        f"verdict{where}: {block['verdict']['text']}",
        f"  Sharpe ratio (annual): {sharpes}",
        f"  random timing: {random_timing_text(block['random_timing'])}",
    ]
    if bench.note:
        lines.insert(1, f"  benchmark: {bench.note}")
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
    frames: Mapping[str, pd.DataFrame],
    bars_per_year: float,
    *,
    fee: float,
    seed: int,
    tables: EnvTables | None = None,
) -> dict[str, Any]:
    """The agent's Sharpe against smooth random signals in its own band (the range of its
    signals) that move as much per bar as its signal does (:func:`stats.matched_smoothness`).

    With the agent env's ``tables`` each random signal is held as the agent's is — its sizing,
    risk overlay, fill, fee and borrow cost (:func:`~riskppo.evaluation.timing_null.timing_null`);
    without them (records written before the tables were kept) it is sized by the unoverlaid
    vol-targeted exposure and scored on buy-and-hold's gross return with the same fee. ``held``
    says which."""
    signal = frames["agent"]["signal"].to_numpy()
    if tables is not None and tables.fills.delayed:  # a delayed fill's frame starts flat: no choice
        signal = signal[~tables.starts]
    band = (float(signal.min()), float(signal.max()))
    if band[1] - band[0] < 1e-9:
        return {"band": list(band), "percentile": None, "p_value": None, "n": 0}
    span = stats.matched_smoothness(signal, band, seed=seed)  # the agent's own turnover
    if tables is not None:
        held = "agent_env" if tables.cap is None else "agent_env_overlay"
        agent_sharpe = stats.sharpe(account_returns(frames["agent"]), bars_per_year)
        null = timing_null(
            agent_sharpe, tables, band, smoothness=span, periods_per_year=bars_per_year, seed=seed
        )
    else:  # an old record: its null books exposure × log return, so log returns on both sides
        held = "vol_target_gross"
        null = stats.random_timing_null(
            stats.sharpe(frames["agent"]["log_return"].to_numpy(), bars_per_year),
            frames["buy_and_hold"]["gross_return"].to_numpy(),
            frames[BENCHMARK]["position"].to_numpy(),
            band,
            fee=fee,
            periods_per_year=bars_per_year,
            smoothness=span,
            seed=seed,
        )
    return {
        "held": held,
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
