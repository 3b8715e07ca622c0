"""How many configurations were tried on the data of a judged record: the trial ledger
(:mod:`riskppo.runs.ledger`) read and written where a trading record is judged — a training
run's backtest, a walk-forward, each universe cell, a PBT's best member.

The verdict's N is the ledger's count of configurations judged on the same data over an
overlapping span (or the user's ``--trials`` where that is larger); the deflated Sharpe ratio
(Bailey & López de Prado 2014) uses the variance of their Sharpe ratios, and the probability
of backtest overfitting (Bailey, Borwein, López de Prado & Zhu 2017) and the test of superior
predictive ability (Hansen 2005, with Romano & Wolf's 2005 StepM) their records on the same
bars (docs/risk.md, "How many trials").
"""

from __future__ import annotations

import dataclasses
import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from riskppo.config import Config
from riskppo.envs.registration import data_label
from riskppo.runs.ledger import (
    Judged,
    Trials,
    bar_times,
    config_hash,
    data_fingerprint,
    portfolio_assets,
    record_trial,
)
from riskppo.stats import superior_ability
from riskppo.stats.core import format_p

__all__ = ["TrialSpec", "judge_trials", "spa_entry", "trial_lines", "trials_block", "trials_html"]

MAX_LISTED = 10  # configurations listed on a terminal
SPA_RESAMPLES = 1000  # bootstrap resamples of the test of superior predictive ability


@dataclass(frozen=True)
class TrialSpec:
    """Where a judgement is recorded and what it judges: ``ledger`` (None: no ledger),
    ``config`` (the configuration as the user chose it; None: the judged run's own),
    ``kind`` (``"train"``, ``"walkforward"``, ``"pbt"``), ``protocol`` (what else defines the
    trial, e.g. a walk-forward's schedule), ``n_trials``, the user's ``--trials`` (a floor
    for N) and ``config_id``, the configuration hash where it is not ``config``'s (a
    walk-forward's selection among configurations: the procedure's,
    :func:`riskppo.walkforward.select.procedure_hash`)."""

    ledger: Path | None
    config: Config | None = None
    kind: str = "train"
    protocol: Mapping[str, Any] = field(default_factory=dict)
    n_trials: int = 1
    config_id: str | None = None


def judge_trials(
    spec: TrialSpec | None,
    returns: pd.Series,
    bars_per_year: float,
    run_dir: Path,
    run_config: Config,
) -> Trials | None:
    """Record the agent's judged per-bar log ``returns`` (indexed by bar time) of the run in
    ``run_dir`` (its config: ``run_config``) in the ledger — as the account's simple returns
    ``e^r − 1``, the returns every Sharpe ratio of a record is computed from — and count the
    trials on its data; None without a ledger."""
    if spec is None or spec.ledger is None:
        return None
    cfg = spec.config or run_config
    judged = Judged(
        data=data_fingerprint(cfg),
        data_label=_data_label(cfg),
        config=spec.config_id or config_hash(cfg, spec.kind, spec.protocol),
        kind=spec.kind,
        returns=np.expm1(returns.astype(np.float64)),
        periods_per_year=bars_per_year,
        run_dir=str(run_dir),
    )
    trials = record_trial(spec.ledger, judged)
    prior = cfg.prior_trials.get(judged.data_label, 0)
    return dataclasses.replace(trials, prior=prior) if prior else trials


def _data_label(cfg: Config) -> str:
    """The ledger's name of the data (``prior_trials`` keys): :func:`data_label`, or a
    portfolio's (:class:`~riskppo.runs.ledger.PortfolioAssets`)."""
    assets = portfolio_assets(cfg)
    d = cfg.data
    return data_label(d.dataset, d.path, d.symbol) if assets is None else assets.label


def trials_block(trials: Trials | None, n_trials: int) -> dict[str, Any] | None:
    """The ``trials`` entry of a statistics block: the ledger's figures (JSON-ready), the N the
    verdict used and the user's ``--trials``."""
    if trials is None:
        return None
    used = max(n_trials, trials.n_configs + trials.prior)
    return {"n_trials": used, "user_trials": n_trials, **trials.to_dict()}


def spa_entry(
    trials: Trials | None,
    benchmark: pd.Series,
    bars_per_year: float,
    *,
    p_sidak: float,
    benchmark_name: str,
    seed: int = 0,
) -> dict[str, Any] | None:
    """The ``spa`` entry of a ``trials`` block: Hansen's (2005) SPA p-value and Romano & Wolf's
    (2005) StepM set (:func:`riskppo.stats.superior_ability`) over the configurations with
    records on exactly the judged record's bars (the set PBO uses) against ``benchmark``, the
    judged run's per-bar simple returns of its benchmark on those bars (indexed by bar time).
    ``p_sidak``: the verdict's Šidák-adjusted p, shown beside it. None with fewer than two such
    configurations or where ``benchmark``'s bars are not theirs."""
    same = trials.same_bars if trials is not None else None
    if same is None or len(same.configs) < 2 or len(benchmark) != len(same.times):
        return None
    if not np.array_equal(bar_times(benchmark.index), same.times):
        return None
    r = benchmark.to_numpy(dtype=np.float64)
    if not np.isfinite(r).all() or np.ptp(r) == 0.0:
        return None
    out = superior_ability(r, same.returns, bars_per_year, n_resamples=SPA_RESAMPLES, seed=seed)
    return {
        "p": out.p_consistent,
        "p_lower": out.p_lower,
        "p_upper": out.p_upper,
        "p_sidak": p_sidak,
        "size": out.size,
        "superior": [same.configs[k] for k in out.superior],
        "sharpe_diff": dict(zip(same.configs, map(float, out.sharpe_diff), strict=True)),
        "benchmark": benchmark_name,
        "n_configs": out.n_candidates,
        "n_bars": out.n_bars,
        "block": out.block,
        "n_resamples": out.n_resamples,
    }


def spa_lines(spa: Mapping[str, Any]) -> list[str]:
    """The SPA p-value beside the Šidák-adjusted p, and StepM's configurations, in words."""
    n, size = spa["n_configs"], spa["size"]
    head = (
        f"  SPA (Hansen 2005) over {n} configurations: p = {format_p(spa['p'])} (Šidák: "
        f"{format_p(_nan(spa['p_sidak']))}), H0: none has a higher Sharpe ratio than "
        f"{spa['benchmark']} on these {spa['n_bars']:,} bars"
    )
    beat = spa["superior"]
    if beat:
        ids = ", ".join(c[:10] for c in beat[:MAX_LISTED]) + (
            " …" if len(beat) > MAX_LISTED else ""
        )
        which = f"{len(beat)} beat{'s' if len(beat) == 1 else ''} it: {ids}"
    else:
        which = "none beats it"
    return [head, f"  StepM (Romano & Wolf 2005, familywise {size:.0%}): {which}"]


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _f(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None or not math.isfinite(value) else format(value, spec)


def trial_lines(block: Mapping[str, Any]) -> list[str]:
    """The terminal lines of a ``trials`` entry: N and where it comes from, the configurations,
    PBO, the SPA p-value and StepM's set (where there is a ``spa`` entry)."""
    n, ledger, counted = block["n_trials"], block["ledger"], block["n_configs"]
    prior = block.get("prior_trials", 0)  # absent from blocks written before it existed
    on = f"judged on this data (ledger: {ledger})"
    if n > counted + prior:
        head = f"N = {n} (--trials); the ledger has {counted} configuration(s) {on}"
    else:
        head = f"N = {n} configuration{'s' if n != 1 else ''} {on}"
    if prior and n == counted + prior:
        head = f"N = {n}: {counted} configuration(s) {on} + {prior} before it (prior_trials)"
    lines = [f"  trials: {head}"]
    for c in block["configs"][:MAX_LISTED]:
        runs = f"{c['rows']} run{'s' if c['rows'] != 1 else ''}"
        lines.append(
            f"    {c['config'][:10]}  {c['kind']:<11}  Sharpe {_f(c['sharpe']):>6}  "
            f"{runs:<7}  {c['run_dir']}"
        )
    if len(block["configs"]) > MAX_LISTED:
        lines.append(f"    … {len(block['configs']) - MAX_LISTED} more in the ledger")
    p = block.get("pbo")
    if p is not None:
        lines.append(
            f"  PBO: {p['pbo']:.2f} over {p['n_configs']} configurations on the same "
            f"{p['n_bars']:,} bars (CSCV, {p['n_blocks']} blocks; about 0.5 or more: the best "
            f"in sample is no better than the median out of sample)"
        )
    if block.get("spa"):
        lines += spa_lines(block["spa"])
    return lines


def trials_html(block: Mapping[str, Any] | None) -> str:
    """An HTML section of a ``trials`` entry: N, its ledger, the configurations, PBO, SPA and
    StepM (empty without a ledger)."""
    if not block:
        return ""
    lines = trial_lines(block)
    head = html.escape(lines[0].strip())
    rows = "".join(
        f"<tr><td>{html.escape(c['config'][:10])}</td><td>{html.escape(c['kind'])}</td>"
        f'<td class="num">{_f(c["sharpe"])}</td><td class="num">{c["rows"]}</td>'
        f"<td>{html.escape(c['run_dir'])}</td></tr>"
        for c in block["configs"]
    )
    table = (
        '<table class="metrics"><thead><tr><th>configuration</th><th>kind</th>'
        '<th class="num">Sharpe</th><th class="num">runs</th><th>latest run</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )
    pbo = next((line.strip() for line in lines if line.strip().startswith("PBO")), None)
    pbo = pbo or "PBO: needs two configurations with records on the same bars."
    note = f"<p>{html.escape(pbo)}</p>"
    spa = spa_lines(block["spa"]) if block.get("spa") else []
    note += "".join(f"<p>{html.escape(line.strip())}</p>" for line in spa)
    return f"<section><h2>Trials</h2><p>{head}</p>{table}{note}</section>"
