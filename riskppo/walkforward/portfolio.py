"""The portfolio env in ``riskppo walkforward`` (:mod:`riskppo.walkforward.run`): each
cell backtests its frozen agent on its test rows against the skfolio baselines re-fitted on the
cell's own training rows; the stitched records get the portfolio report
(:mod:`riskppo.evaluation.portfolio.report`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from riskppo.config import Config
from riskppo.envs.execution.overlay import binding_stats
from riskppo.envs.portfolio.factory import make_portfolio_env
from riskppo.envs.registration import portfolio_data_kwargs, resolve_overlay
from riskppo.evaluation.limit_backtest import risk_line
from riskppo.evaluation.portfolio.backtest import portfolio_backtest
from riskppo.evaluation.portfolio.report import (
    analyse_portfolio,
    cell_frame,
    mean_frame,
    write_portfolio_report,
)
from riskppo.persist.files import sha256
from riskppo.safefs import ensure_real_dir, write_text_atomic
from riskppo.walkforward.analysis import risk_summary
from riskppo.walkforward.plan import Record

if TYPE_CHECKING:
    from riskppo.agent import DistributionalPPO
    from riskppo.walkforward.plan import CellJob

__all__ = [
    "portfolio_cell",
    "portfolio_outputs",
    "portfolio_rows",
    "portfolio_summary",
    "training_binding",
]


def portfolio_rows(cfg: Config) -> int:
    """Rows (bars) of the portfolio data ``cfg`` names, for the walk-forward schedule."""
    kwargs = resolve_overlay(cfg.env.kwargs, cfg.risk)
    env = make_portfolio_env(**kwargs, **portfolio_data_kwargs(cfg.data), part="train")
    return len(env.data.index)


def portfolio_cell(model: DistributionalPPO, job: CellJob, cfg: Config) -> dict[str, Any]:
    """Backtest a trained cell on its test rows; write ``record.csv`` then ``cell.json``."""
    bt = portfolio_backtest(model, "test")
    frame = cell_frame(bt.frames, job.segment.index)
    record = write_text_atomic(job.cell_dir / "record.csv", frame.to_csv(float_format="%.17g"))
    one = analyse_portfolio(
        {"cell": frame},
        bars_per_year=bt.bars_per_year,
        cvar_alpha=cfg.risk.cvar_alpha,
        cvar_horizon=cfg.risk.cvar_horizon,
        cvar_limit=cfg.risk.cvar_limit,
    )
    summary = {
        "segment": job.segment.index,
        "seed": job.seed,
        "steps": job.steps,
        "start": str(frame.index[0]),
        "end": str(frame.index[-1]),
        "bars": len(frame),
        "bars_per_year": bt.bars_per_year,
        "fee": bt.fee,
        "train_bars": list(bt.train),
        "metrics": one["metrics"],
        "lambda": float(model.state.risk.lam) if model.state.risk is not None else None,
        "overlay_test": bt.overlay,
        "overlay_train": None if model.env is None else training_binding(model.env),
        "record_sha256": sha256(record),  # what walk-forward's read_cell checks record.csv against
    }
    text = json.dumps(summary, indent=2, allow_nan=False, default=str) + "\n"
    write_text_atomic(job.cell_dir / "cell.json", text)
    return summary


def training_binding(venv: VecEnv) -> dict[str, Any] | None:
    """The risk overlay's settings and how it bound over training, pooled over the envs of
    ``venv``: each training bar's latest decision in each env counts once
    (:meth:`~riskppo.envs.portfolio.env.PortfolioEnv.overlay_binding`); ``None`` without one."""
    overlay = venv.get_attr("overlay", [0])[0]
    if overlay is None:
        return None
    ranges = venv.get_attr("trading_range")
    uncapped = venv.get_attr("uncapped_scale")
    cap = venv.get_attr("overlay_cap")
    u = np.concatenate([x[lo:hi] for x, (lo, hi) in zip(uncapped, ranges, strict=True)])
    c = np.concatenate([x[lo:hi] for x, (lo, hi) in zip(cap, ranges, strict=True)])
    return {**overlay.to_dict(), **binding_stats(u, c)}


def portfolio_outputs(
    run_dir: Path,
    cfg: Config,
    records: Sequence[Record],
    cells: Sequence[dict[str, Any]],
    n_trials: int,
    trials: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the stitched records, ``metrics.json``, the charts and ``report.html``; return
    the metrics (with the per-cell table and the CVaR multipliers; what ``riskppo
    walkforward`` prints of them: :func:`portfolio_summary`). ``trials``: the trial ledger's
    block for this record (:func:`~riskppo.evaluation.trials.trials_block`), whose N the
    verdict then uses; None: ``n_trials`` alone."""
    out = ensure_real_dir(run_dir / "records")
    frames = {r.label: r.frame for r in records}
    for r in records:
        write_text_atomic(out / f"s{r.label.split()[-1]}.csv", r.frame.to_csv(float_format="%.10g"))
    if len(records) > 1:
        write_text_atomic(out / "mean.csv", mean_frame(list(frames.values())).to_csv())
    metrics = analyse_portfolio(
        frames,
        bars_per_year=float(cells[0]["bars_per_year"]),
        cvar_alpha=cfg.risk.cvar_alpha,
        cvar_horizon=cfg.risk.cvar_horizon,
        cvar_limit=cfg.risk.cvar_limit,
        n_trials=n_trials if trials is None else int(trials["n_trials"]),
    )
    if trials is not None:
        metrics["trials"] = trials
    metrics["cells"] = [
        {k: c.get(k) for k in ("segment", "seed", "start", "end", "bars", "lambda")}
        | {
            "sharpe": c["metrics"]["agent"].get("sharpe"),
            "cvar_horizon": c["metrics"]["agent"].get("cvar_horizon"),
            "limit_met": c["metrics"]["agent"].get("cvar_limit_met"),
            "overlay_binding": (c.get("overlay_test") or {}).get("binding_share"),
            "overlay_binding_train": (c.get("overlay_train") or {}).get("binding_share"),
            "overlay_cut": (c.get("overlay_test") or {}).get("mean_cut"),
        }
        for c in cells
    ]
    metrics["risk"] = risk_summary(metrics["cells"])
    write_portfolio_report(run_dir, frames, metrics)
    return metrics


def portfolio_summary(metrics: Mapping[str, Any]) -> str:
    """The summary of :func:`portfolio_outputs`' metrics: the verdict line, and the CVaR
    multipliers' and the risk overlay's line when there is one."""
    line = risk_line(metrics["risk"])
    return "\n".join([metrics["verdict"]["text"], *([line] if line else [])])


def walkforward_outputs(
    run_dir: Path,
    cfg: Config,
    records: Sequence[Record],
    cells: Sequence[dict[str, Any]],
    n_trials: int,
    trials: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], Path, str]:
    """The walk-forward outputs of a portfolio run (the ``walkforward_outputs`` hook of its env
    kind, :mod:`riskppo.walkforward.kinds`): ``(metrics, report.html, summary)``."""
    metrics = portfolio_outputs(run_dir, cfg, records, cells, n_trials, trials)
    return metrics, run_dir / "report.html", portfolio_summary(metrics)
