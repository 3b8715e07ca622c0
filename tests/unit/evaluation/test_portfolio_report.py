"""The portfolio walk-forward report: records stitched per segment, metrics of every strategy,
the horizon CVaR per segment against the limit, the paired test against the best baseline, and
the written charts."""

from __future__ import annotations

import html
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.config import Config
from riskppo.evaluation.metrics import horizon_cvar
from riskppo.evaluation.portfolio.backtest import strategy_frame
from riskppo.evaluation.portfolio.report import (
    analyse_portfolio,
    best_baseline,
    cell_frame,
    mean_frame,
    strategies,
    write_portfolio_report,
)
from riskppo.walkforward.plan import Record, stitch
from riskppo.walkforward.portfolio import portfolio_outputs, portfolio_summary

SYMS = ("A", "B", "C")
SP20 = Path(__file__).resolve().parents[3] / "riskppo" / "configs" / "portfolio_sp20.yaml"
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


def test_the_best_baseline_is_the_best_that_keeps_the_limit() -> None:
    m = {
        "free": {"sharpe": 1.0, "cvar_limit_met": False},
        "capped": {"sharpe": 0.7, "cvar_limit_met": True},
        "timid": {"sharpe": 0.5, "cvar_limit_met": True},
    }
    assert best_baseline(m, list(m)) == (
        "capped",
        "the best Sharpe of the baselines that keep the limit",
    )
    m["capped"]["cvar_limit_met"] = m["timid"]["cvar_limit_met"] = False
    assert best_baseline(m, list(m))[0] == "free"
    for v in m.values():  # no limit: nothing is "kept"
        v["cvar_limit_met"] = None
    assert best_baseline(m, list(m)) == (
        "free",
        "the best Sharpe of all baselines (none keeps the limit)",
    )


def test_analysis_records_which_baseline_it_tests_against_and_why() -> None:
    m = analyse_portfolio({"seed 0": _record(0)}, **RISK)
    assert m["metrics"][m["best_baseline"]]["cvar_limit_met"] is True
    assert m["best_baseline_rule"] == "the best Sharpe of the baselines that keep the limit"


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


def test_wide_records_are_averaged_without_fragmenting(tmp_path: Path) -> None:
    """20 assets and 6 strategies, read back from the cells' CSV files as the walk-forward
    does: averaging the seeds and writing the report raise no pandas PerformanceWarning."""
    syms = tuple(f"S{i:02d}" for i in range(20))
    idx = pd.bdate_range("2020-01-01", periods=60, name="timestamp")
    recs = {}
    for seed in range(2):
        rng = np.random.default_rng(seed)
        frames = {}
        for name in ("agent", "b1", "b2", "b3", "b4", "b5"):
            w, r = rng.uniform(0, 0.05, (60, 20)), rng.normal(0, 0.01, 60)
            one = np.full(60, 0.01)
            frames[name] = strategy_frame(idx, syms, w, r, one, one * 1e-3, w * r[:, None])
        path = tmp_path / f"record{seed}.csv"
        path.write_text(cell_frame(frames, 0).to_csv(float_format="%.17g"))
        recs[f"seed {seed}"] = pd.read_csv(path, index_col=0, parse_dates=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        mean = mean_frame(list(recs.values()))
        write_portfolio_report(tmp_path, recs, analyse_portfolio(recs, **RISK))
    assert list(mean.columns) == list(recs["seed 0"].columns)


def test_outputs_report_lambda_and_the_overlay(tmp_path: Path) -> None:
    records = [Record(f"seed {s}", _record(s)) for s in range(2)]
    agent = {"sharpe": 1.0, "cvar_horizon": -0.03, "cvar_limit_met": True}
    cells = [
        {
            "segment": k,
            "seed": s,
            "bars": 60,
            "bars_per_year": 252.0,
            "lambda": 0.5 * s,
            "metrics": {"agent": agent},
            "overlay_test": {"binding_share": 0.7 + 0.1 * s, "mean_cut": 0.5},
            "overlay_train": {"binding_share": 0.6, "mean_cut": 0.4},
        }
        for k in range(2)
        for s in range(2)
    ]
    metrics = portfolio_outputs(tmp_path, Config.from_yaml(SP20), records, cells, n_trials=1)
    assert metrics["cells"][1]["overlay_binding"] == pytest.approx(0.8)
    assert metrics["cells"][1]["overlay_binding_train"] == 0.6
    assert metrics["risk"]["overlay_binding_oos"] == pytest.approx(0.75)
    line = (
        "λ at the end of training: mean 0.25, max 0.50, > 0 in 50% of cells; risk overlay bound "
        "on 75% of out-of-sample bars (60% over training), keeping 50% of the sized exposure there"
    )
    assert line in portfolio_summary(metrics).splitlines()
    assert html.escape(line) in (tmp_path / "report.html").read_text()
