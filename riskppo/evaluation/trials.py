"""How many configurations were tried on the data of a judged record: the trial ledger
(:mod:`riskppo.runs.ledger`) read and written where a trading record is judged — a training
run's backtest, a walk-forward, each universe cell, a PBT's best member.

The verdict's N is the ledger's count of configurations judged on the same data over an
overlapping span (or the user's ``--trials`` where that is larger); the deflated Sharpe ratio
(Bailey & López de Prado 2014) uses the variance of their Sharpe ratios, and the probability
of backtest overfitting (Bailey, Borwein, López de Prado & Zhu 2017) their records on the same
bars (docs/risk.md, "How many trials").
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from riskppo.config import Config
from riskppo.envs.registration import data_label
from riskppo.runs.ledger import Judged, Trials, config_hash, data_fingerprint, record_trial

__all__ = ["TrialSpec", "judge_trials", "trial_lines", "trials_block", "trials_html"]

MAX_LISTED = 10  # configurations listed on a terminal


@dataclass(frozen=True)
class TrialSpec:
    """Where a judgement is recorded and what it judges: ``ledger`` (None: no ledger),
    ``config`` (the configuration as the user chose it; None: the judged run's own),
    ``kind`` (``"train"``, ``"walkforward"``, ``"pbt"``), ``protocol`` (what else defines the
    trial, e.g. a walk-forward's schedule) and ``n_trials``, the user's ``--trials`` (a floor
    for N)."""

    ledger: Path | None
    config: Config | None = None
    kind: str = "train"
    protocol: Mapping[str, Any] = field(default_factory=dict)
    n_trials: int = 1


def judge_trials(
    spec: TrialSpec | None,
    returns: pd.Series,
    bars_per_year: float,
    run_dir: Path,
    run_config: Config,
) -> Trials | None:
    """Record the agent's judged per-bar log ``returns`` (indexed by bar time) of the run in
    ``run_dir`` (its config: ``run_config``) in the ledger and count the trials on its data;
    None without a ledger."""
    if spec is None or spec.ledger is None:
        return None
    cfg = spec.config or run_config
    d = cfg.data
    judged = Judged(
        data=data_fingerprint(cfg),
        data_label=data_label(d.dataset, d.path, d.symbol),
        config=config_hash(cfg, spec.kind, spec.protocol),
        kind=spec.kind,
        returns=returns,
        periods_per_year=bars_per_year,
        run_dir=str(run_dir),
    )
    return record_trial(spec.ledger, judged)


def trials_block(trials: Trials | None, n_trials: int) -> dict[str, Any] | None:
    """The ``trials`` entry of a statistics block: the ledger's figures (JSON-ready), the N the
    verdict used and the user's ``--trials``."""
    if trials is None:
        return None
    used = max(n_trials, trials.n_configs)
    return {"n_trials": used, "user_trials": n_trials, **trials.to_dict()}


def _f(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None or not math.isfinite(value) else format(value, spec)


def trial_lines(block: Mapping[str, Any]) -> list[str]:
    """The terminal lines of a ``trials`` entry: N and where it comes from, the configurations,
    PBO."""
    n, ledger, counted = block["n_trials"], block["ledger"], block["n_configs"]
    on = f"judged on this data (ledger: {ledger})"
    if n > counted:
        head = f"N = {n} (--trials); the ledger has {counted} configuration(s) {on}"
    else:
        head = f"N = {n} configuration{'s' if n != 1 else ''} {on}"
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
    return lines


def trials_html(block: Mapping[str, Any] | None) -> str:
    """An HTML section of a ``trials`` entry: N, its ledger, the configurations, PBO (empty
    without a ledger)."""
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
    return f"<section><h2>Trials</h2><p>{head}</p>{table}{note}</section>"
