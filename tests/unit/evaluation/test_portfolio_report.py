"""The portfolio walk-forward report: records stitched per segment, metrics of every strategy,
the horizon CVaR per segment against the limit, the paired test against the best baseline, and
the written charts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.evaluation.metrics import horizon_cvar
from riskppo.evaluation.portfolio_backtest import strategy_frame
from riskppo.evaluation.portfolio_report import (
    analyse_portfolio,
    cell_frame,
    mean_frame,
    strategies,
    write_portfolio_report,
)
from riskppo.evaluation.wf_plan import stitch

SYMS = ("A", "B", "C")
RISK = {"bars_per_year": 252.0, "cvar_alpha": 0.05, "cvar_horizon": 10, "cvar_limit": -0.04}


def _frames(index: pd.DatetimeIndex, seed: int, agent_vol: float) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    n = len(index)
    out = {}
    for name, vol, drift in (
        ("agent", agent_vol, 0.001),
        ("calm", 0.004, 0.0002),
        ("wild", 0.02, 0.0),
    ):
        w = np.abs(rng.normal(0.3, 0.05, (n, 3)))
        r = rng.normal(drift, vol, n)
        c = w * r[:, None] / w.sum(axis=1, keepdims=True)
        out[name] = strategy_frame(index, SYMS, w, r, np.full(n, 0.01), np.full(n, 1e-5), c)
    return out


def _record(seed: int, agent_vols: tuple[float, float] = (0.005, 0.005)) -> pd.DataFrame:
    idx = pd.bdate_range("2020-01-01", periods=120, name="timestamp")
    parts = [
        cell_frame(_frames(idx[k * 60 : (k + 1) * 60], 10 * seed + k, agent_vols[k]), k)
        for k in range(2)
    ]
    return stitch(f"seed {seed}", parts).frame


def test_cell_frame_columns_and_strategies() -> None:
    frame = _record(0)
    assert strategies(frame) == ["agent", "calm", "wild"]
    assert {"agent_w_A", "wild_turnover", "calm_gross_exposure", "segment"} <= set(frame.columns)
    assert frame["segment"].tolist() == [0] * 60 + [1] * 60


def test_analysis_cvar_per_segment_against_the_limit() -> None:
    rec = _record(0, agent_vols=(0.002, 0.05))  # the second segment breaks the limit
    m = analyse_portfolio({"seed 0": rec}, **RISK)
    seg = m["segments"]
    for row, (_, part) in zip(seg, rec.groupby("segment"), strict=True):
        want = horizon_cvar(part["agent_log_return"].to_numpy(), 0.05, 10)
        assert row["agent"] == pytest.approx(want)
    assert [r["limit_met"] for r in seg] == [True, False]
    assert (m["cells_limit_met"], m["cells_with_limit"]) == (1, 2)
    assert m["metrics"]["agent"]["turnover"] == pytest.approx(0.01 * 252)
    contrib = m["contributions"]["agent"]
    assert set(contrib) == set(SYMS)
    assert sum(contrib.values()) == pytest.approx(rec["agent_log_return"].sum())


def test_best_baseline_and_paired_test() -> None:
    m = analyse_portfolio({"seed 0": _record(0)}, **RISK, n_trials=3)
    sharpe = {n: m["metrics"][n]["sharpe"] for n in ("calm", "wild")}
    assert m["best_baseline"] == max(sharpe, key=sharpe.__getitem__)
    assert "N = 3 trials" in m["verdict"]["text"]
    assert m["paired_test"]["diff"] == pytest.approx(
        m["metrics"]["agent"]["sharpe"] - sharpe[m["best_baseline"]], abs=0.05
    )


def test_mean_of_seeds() -> None:
    a, b = _record(0), _record(1)
    mean = mean_frame([a, b])
    np.testing.assert_allclose(
        mean["agent_log_return"], (a["agent_log_return"] + b["agent_log_return"]) / 2
    )
    assert mean["segment"].equals(a["segment"])


def test_report_files(tmp_path: Path) -> None:
    recs = {"seed 0": _record(0), "seed 1": _record(1)}
    m = analyse_portfolio(recs, **RISK)
    report = write_portfolio_report(tmp_path, recs, m)
    for name in ("equity", "weights", "turnover", "cvar"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    text = report.read_text()
    assert "best baseline" in text and "met in" in text and "return by asset" in text
    assert (tmp_path / "metrics.json").is_file()
