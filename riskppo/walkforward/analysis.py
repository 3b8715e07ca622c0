"""The verdict on a walk-forward record: metrics of every strategy on the stitched
out-of-sample bars, the statistics of :mod:`riskppo.stats` for the agent against
vol-targeted buy-and-hold (unscaled and scaled to the agent's mean exposure; under the agent's
risk overlay where it trades under one, :func:`riskppo.evaluation.references.choose_benchmark`),
the random-timing null in the agent's env, and the CVaR limit cell by cell.

The verdict is read on the seeds' mean record (capital split equally over the seeds' agents):
one test, adjusted for the ``n_trials`` configurations tried on the same data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from riskppo.config import Config
from riskppo.evaluation.limit_backtest import walkforward_limit
from riskppo.evaluation.metrics import signal_floor, strategy_metrics
from riskppo.evaluation.references import FLOOR_OVERLAY, VT_BH_OVERLAY, choose_benchmark
from riskppo.evaluation.timing_null import tables_from_record
from riskppo.evaluation.verdict import BENCHMARK, statistics_block
from riskppo.runs.ledger import Trials
from riskppo.walkforward.plan import (
    Record,
    WalkForwardSettings,
    mean_record,
)
from riskppo.walkforward.seeds import seeds_entry

SCALED = "vol_target_scaled"
CVAR_MATCHED = "vol_target_cvar_matched"
_REFERENCE_COLUMNS = (BENCHMARK, VT_BH_OVERLAY, FLOOR_OVERLAY)  # their Sharpe in segments.csv


def analyse(
    cfg: Config,
    settings: WalkForwardSettings,
    records: Sequence[Record],
    cells: Sequence[dict[str, Any]],
    *,
    n_trials: int = 1,
    seed: int = 0,
    trials: Trials | None = None,
) -> dict[str, Any]:
    """``metrics.json`` of a walk-forward: per record (each seed, and their mean) the metrics
    of every strategy and the statistics block; the per-cell table; the limit counts; the
    verdict line. ``trials``: the trial ledger's count for the mean record (N, the Sharpe
    variance of the deflated Sharpe ratio, PBO), applied to every record. ``limit_backtest``:
    the ES backtest of the risk overlay's forecast on the mean record (None without an
    overlay; :mod:`riskppo.evaluation.limit_backtest`)."""
    bpy = float(cells[0]["bars_per_year"])
    mean = mean_record(records) if len(records) > 1 else records[0]
    fee = float(cells[0]["fee"])
    per_record = {
        r.label: record_block(
            cfg, r, bpy, fee=fee, n_trials=n_trials, seed=seed, trials=trials, cell=cells[0]
        )
        for r in [*records, *([mean] if len(records) > 1 else [])]
    }
    headline = per_record[mean.label]
    overlay = cells[0].get("overlay_test") is not None
    rows = [cell_row(c, overlay) for c in cells]
    risk = risk_summary(rows)
    limit = cfg.risk.cvar_limit
    met = [r["limit_met"] for r in rows if r["limit_met"] is not None]
    return {
        "data": cells[0].get("data"),
        "settings": settings.to_dict(),
        "n_trials": headline["trials"]["n_trials"] if headline.get("trials") else n_trials,
        "trials": headline.get("trials"),
        "bars_per_year": bpy,
        "oos_bars": len(mean.frame),
        "start": str(mean.frame.index[0]),
        "end": str(mean.frame.index[-1]),
        "cvar_limit": limit,
        "cells_limit_met": sum(met),
        "cells_with_limit": len(met),
        "cells": rows,
        "risk": risk,
        "limit_backtest": walkforward_limit(cfg, mean.frame, seed=seed),
        "records": per_record,
        "seeds": seeds_entry(per_record, mean.label),
        "verdict": headline["verdict"],
    }


def record_block(
    cfg: Config,
    record: Record,
    bpy: float,
    *,
    fee: float,
    n_trials: int,
    seed: int,
    trials: Trials | None = None,
    cell: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Metrics of each strategy on ``record`` (the scaled benchmark included) and the
    statistics of the agent against the benchmark. ``cell``: a cell summary of the run (its
    ``overlay_test`` says whether the agent traded under a risk overlay; with ``fill``,
    ``borrow_rate`` and the record's env columns, the random-timing null is held in the agent's
    env)."""
    cell = cell or {}
    overlay = cell.get("overlay_test")
    bench = choose_benchmark(record.strategies, overlay is not None).key

    def figures(returns: pd.Series, positions: pd.Series, signals: pd.Series) -> dict[str, Any]:
        return strategy_metrics(
            returns,
            positions,
            bars_per_year=bpy,
            cvar_alpha=cfg.risk.cvar_alpha,
            cvar_horizon=cfg.risk.cvar_horizon,
            cvar_limit=cfg.risk.cvar_limit,
            signals=signals,
            signal_floor=signal_floor(cfg.env.kwargs),
        ).to_dict()

    metrics = {
        n: figures(record.returns(n), record.positions(n), record.signals(n))
        for n in record.strategies
    }
    bench_x = float(np.abs(record.positions(bench)).mean())
    k = float(np.abs(record.positions("agent")).mean()) / bench_x if bench_x > 0 else 0.0
    bench_signals = record.signals(bench)
    metrics[SCALED] = figures(record.returns(bench) * k, record.positions(bench) * k, bench_signals)
    # the benchmark at the agent's tail risk: CVaR of scaled log returns scales exactly with k
    a_cvar, b_cvar = metrics["agent"]["cvar_horizon"], metrics[bench]["cvar_horizon"]
    if a_cvar is not None and b_cvar is not None and b_cvar < 0:
        kc = float(a_cvar) / float(b_cvar)
        matched = record.returns(bench) * kc, record.positions(bench) * kc
        metrics[CVAR_MATCHED] = figures(*matched, bench_signals)
    env = {**cell, "fee": fee, "bars_per_year": bpy}
    block = statistics_block(
        record.strategy_frames(),
        bpy,
        fee=fee,
        n_trials=n_trials,
        seed=seed,
        trials=trials,
        overlay=overlay is not None,
        tables=tables_from_record(record.frame, env, overlay),
    )
    return {"metrics": metrics, **block}


def cell_row(cell: dict[str, Any], overlay: bool = False) -> dict[str, Any]:
    """One (segment, seed) line of the per-segment table; ``benchmark`` names the verdict's
    benchmark (``overlay``: the agent traded under a risk overlay; a cell written before
    ``vt_bh_overlay`` existed falls back to ``vol_target_buy_and_hold``)."""
    m = cell["metrics"]
    agent, bench = m["agent"], choose_benchmark(m, overlay).key
    return {
        "segment": cell["segment"],
        "seed": cell["seed"],
        "start": cell["start"],
        "end": cell["end"],
        "bars": cell["bars"],
        "steps": cell["steps"],
        "sharpe": agent.get("sharpe"),
        "benchmark": bench,
        "benchmark_sharpe": m[bench].get("sharpe"),
        **{f"{n}_sharpe": m.get(n, {}).get("sharpe") for n in _REFERENCE_COLUMNS},
        "cvar_horizon": agent.get("cvar_horizon"),
        "limit_met": agent.get("cvar_limit_met"),
        "market_share": agent.get("market_share"),
        "mean_abs_exposure": agent.get("mean_abs_exposure"),
        "active_share": agent.get("active_share"),
        "lambda": cell.get("lambda"),
        "overlay_binding": (cell.get("overlay_test") or {}).get("binding_share"),
        "overlay_binding_train": (cell.get("overlay_train") or {}).get("binding_share"),
        "overlay_cut": (cell.get("overlay_test") or {}).get("mean_cut"),
        **({"candidate": cell["candidate"]} if "candidate" in cell else {}),  # --candidates
    }


def risk_summary(rows: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Over all cells: the CVaR multiplier λ at the end of training (mean, max, share of cells
    with λ > 0), the risk overlay's binding share out of sample and over training, and the
    exposure it left where it bound (cap / uncapped scale) out of sample (means; None where no
    cell recorded it)."""

    def values(key: str) -> list[float]:
        return [float(r[key]) for r in rows if r.get(key) is not None]

    lam, oos, train = values("lambda"), values("overlay_binding"), values("overlay_binding_train")
    cut = values("overlay_cut")
    return {
        "lambda_mean": float(np.mean(lam)) if lam else None,
        "lambda_max": max(lam) if lam else None,
        "lambda_positive_share": float(np.mean([v > 0 for v in lam])) if lam else None,
        "overlay_binding_oos": float(np.mean(oos)) if oos else None,
        "overlay_binding_train": float(np.mean(train)) if train else None,
        "overlay_cut_oos": float(np.mean(cut)) if cut else None,
    }
