"""A portfolio run's backtest report: what ``riskppo train`` ends with and ``riskppo backtest
RUN_DIR`` writes for a run on ``riskppo/Portfolio-v0``.

The newest good checkpoint acts on one part of the split (default ``test``) against the skfolio
baselines fitted on the training part (:func:`~riskppo.evaluation.portfolio.backtest.
portfolio_backtest`); ``RUN_DIR/backtest_<split>/`` gets ``record.csv`` (per-bar weights,
returns, turnover, contributions of every strategy), ``metrics.json`` and ``report.html`` with
the charts of the walk-forward report (:mod:`riskppo.evaluation.portfolio.report`): one segment.
Given a trial ledger, the judgement is recorded there and the verdict's N counts the
configurations judged on the same assets (:mod:`riskppo.evaluation.trials`), as a single-asset
backtest's does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from riskppo.evaluation.portfolio.backtest import portfolio_backtest
from riskppo.evaluation.portfolio.report import (
    analyse_portfolio,
    cell_frame,
    write_portfolio_report,
)
from riskppo.evaluation.trials import TrialSpec, judge_trials, trials_block
from riskppo.runs.rundir import load_for_evaluation
from riskppo.safefs import ensure_real_dir, write_text_atomic

__all__ = ["PortfolioArtifacts", "portfolio_backtest_run"]


class PortfolioArtifacts(NamedTuple):
    """What :func:`portfolio_backtest_run` wrote, and the analysis behind it."""

    out_dir: Path
    report: Path
    metrics: dict[str, Any]
    checkpoint: Path

    def verdict(self) -> str:
        """The verdict line, for a terminal."""
        return str(self.metrics["verdict"]["text"])


def portfolio_backtest_run(
    run_dir: str | Path, split: str = "test", *, trial: TrialSpec | None = None
) -> PortfolioArtifacts:
    """Backtest the newest good checkpoint of ``run_dir`` on ``split``; write the files of the
    module docstring into ``RUN_DIR/backtest_<split>/``. ``trial``: record the judgement in its
    trial ledger; the verdict counts the ledger's trials on the assets."""
    run_dir = Path(run_dir)
    ckpt, model = load_for_evaluation(run_dir)
    try:
        bt = portfolio_backtest(model, split)
    finally:
        model.close()
    risk = model.config.risk
    out = ensure_real_dir(run_dir / f"backtest_{split}")
    frame = cell_frame(bt.frames, 0)
    write_text_atomic(out / "record.csv", frame.to_csv(float_format="%.17g"))
    n_trials = trial.n_trials if trial is not None else 1
    judged = judge_trials(trial, frame["agent_log_return"], bt.bars_per_year, run_dir, model.config)
    block = trials_block(judged, n_trials)
    metrics = analyse_portfolio(
        {split: frame},
        bars_per_year=bt.bars_per_year,
        cvar_alpha=risk.cvar_alpha,
        cvar_horizon=risk.cvar_horizon,
        cvar_limit=risk.cvar_limit,
        n_trials=n_trials if block is None else int(block["n_trials"]),
    )
    if block is not None:
        metrics["trials"] = block
    metrics["overlay"] = bt.overlay
    metrics["checkpoint"] = ckpt.name
    first, last = frame.index[0], frame.index[-1]
    title = f"Portfolio backtest, {split} part ({first:%Y-%m-%d} to {last:%Y-%m-%d})"
    report = write_portfolio_report(out, {split: frame}, metrics, title=title)
    return PortfolioArtifacts(out, report, metrics, ckpt)
