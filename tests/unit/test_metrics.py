"""Backtest metrics against hand-computed values (R-TRADE-3)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from riskppo.evaluation.metrics import (
    METRIC_KEYS,
    SPEC_METRIC_KEYS,
    aggregate_metrics,
    dumps_metrics,
    strategy_metrics,
)
from riskppo.evaluation.report import format_value

BPY = 252.0


def _strict_json(text: str) -> dict:
    def reject(token: str) -> float:
        raise AssertionError(f"non-standard JSON constant {token} in metrics")

    return json.loads(text, parse_constant=reject)


def _series(values, start="2020-01-01") -> pd.Series:
    idx = pd.date_range(start, periods=len(values), freq="D", name="timestamp")
    return pd.Series(np.asarray(values, dtype=np.float64), index=idx)


@pytest.fixture
def tiny():
    """A small series: simple returns r, the log returns fed in and positions."""
    r = np.array([-0.02, 0.01, 0.03, -0.01, -0.04, 0.02, 0.0, 0.015, -0.005, 0.025])
    pos = np.array([1.0, 1.0, 0.0, -1.0, -1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    return r, pos, _series(np.log1p(r)), _series(pos)


def test_sharpe_sortino_annual_return_by_hand(tiny):
    r, _, lr, pos = tiny
    m = strategy_metrics(lr, pos, bars_per_year=BPY)
    n = len(r)
    assert m.sharpe == pytest.approx(r.mean() / r.std(ddof=1) * math.sqrt(BPY), rel=1e-10)
    downside = math.sqrt(np.mean(np.minimum(r, 0.0) ** 2)) * math.sqrt(BPY)
    assert m.sortino == pytest.approx(r.mean() * BPY / downside, rel=1e-10)
    final = float(np.prod(1 + r))
    assert m.final_equity == pytest.approx(final, rel=1e-12)
    assert m.total_return == pytest.approx(final - 1, rel=1e-10)
    assert m.annual_return == pytest.approx(final ** (BPY / n) - 1, rel=1e-10)
    assert m.annual_volatility == pytest.approx(r.std(ddof=1) * math.sqrt(BPY), rel=1e-10)
    assert m.n_bars == n


def test_max_drawdown_and_calmar_by_hand(tiny):
    r, _, lr, pos = tiny
    m = strategy_metrics(lr, pos, bars_per_year=BPY)
    # equity from 1; the start counts as a peak, so a loss on the first bar is a drawdown
    equity, peak, worst = 1.0, 1.0, 0.0
    for x in r:
        equity *= 1 + x
        peak = max(peak, equity)
        worst = min(worst, equity / peak - 1)
    assert worst < 0
    assert m.max_drawdown == pytest.approx(worst, rel=1e-10)
    assert m.calmar == pytest.approx(m.annual_return / abs(worst), rel=1e-10)


def test_first_bar_loss_is_a_drawdown():
    m = strategy_metrics(_series(np.log1p([-0.1, 0.05])), _series([1, 1]), bars_per_year=BPY)
    assert m.max_drawdown == pytest.approx(-0.1, rel=1e-12)


def test_cvar_95_is_the_mean_of_the_sorted_worst_tail():
    rng = np.random.default_rng(7)
    r = rng.normal(0.0005, 0.02, size=101)
    m = strategy_metrics(_series(np.log1p(r)), _series(np.ones(101)), bars_per_year=BPY)
    k = int((len(r) - 1) * 0.05) + 1  # 6 worst of 101 (empyrical's historical cutoff)
    assert m.cvar_95 == pytest.approx(np.sort(r)[:k].mean(), rel=1e-10)
    assert m.cvar_95 <= m.var_95 <= np.median(r)


def test_turnover_and_hit_rate_by_hand(tiny):
    _, p, lr, pos = tiny
    m = strategy_metrics(lr, pos, bars_per_year=BPY)
    # |Δp| with p_{-1} = 0: 1,0,1,1,0,2,1,1,0,0 = 7 over 10 bars, annualised
    assert m.turnover == pytest.approx(7 / 10 * BPY, rel=1e-12)
    in_market = p != 0
    assert in_market.sum() == 8
    # positive returns among the 8 bars in the market: 0.01, 0.02, 0.015, 0.025
    assert m.hit_rate == pytest.approx(4 / 8)


def test_zero_volatility_is_null_not_nan():
    flat = strategy_metrics(_series(np.zeros(30)), _series(np.zeros(30)), bars_per_year=BPY)
    assert flat.sharpe is None and flat.sortino is None and flat.calmar is None
    assert flat.hit_rate is None  # never in the market
    assert flat.max_drawdown == 0.0 and flat.turnover == 0.0 and flat.final_equity == 1.0
    steady = strategy_metrics(
        _series(np.full(30, math.log1p(0.001))), _series(np.ones(30)), bars_per_year=BPY
    )
    assert steady.sharpe is None  # empyrical: +inf (zero volatility, positive mean)
    assert steady.sortino is None and steady.calmar is None  # no downside, no drawdown
    data = _strict_json(dumps_metrics({"flat": flat, "steady": steady}))
    assert data["flat"]["sharpe"] is None and data["steady"]["sharpe"] is None
    assert '"sharpe": null' in dumps_metrics({"flat": flat})
    for entry in data.values():
        for value in entry.values():
            assert value is None or math.isfinite(value)


def test_to_dict_has_spec_keys_first_and_only_json_values(tiny):
    _, _, lr, pos = tiny
    d = strategy_metrics(lr, pos, bars_per_year=BPY).to_dict()
    assert tuple(d)[: len(SPEC_METRIC_KEYS)] == SPEC_METRIC_KEYS
    assert tuple(d) == METRIC_KEYS
    assert isinstance(d["n_bars"], int)
    assert all(isinstance(v, float) for k, v in d.items() if k != "n_bars")


def test_bars_per_year_scales_annualised_values(tiny):
    _, _, lr, pos = tiny
    daily = strategy_metrics(lr, pos, bars_per_year=252)
    hourly = strategy_metrics(lr, pos, bars_per_year=6240)
    assert hourly.sharpe == pytest.approx(daily.sharpe * math.sqrt(6240 / 252), rel=1e-10)
    assert hourly.turnover == pytest.approx(daily.turnover * 6240 / 252, rel=1e-12)
    assert hourly.cvar_95 == daily.cvar_95  # per bar, not annualised


def test_invalid_inputs_raise(tiny):
    _, _, lr, pos = tiny
    with pytest.raises(ValueError, match="differ in length"):
        strategy_metrics(lr, pos.iloc[:-1], bars_per_year=BPY)
    with pytest.raises(ValueError, match="same index"):
        strategy_metrics(lr, _series(pos.to_numpy(), start="2021-01-01"), bars_per_year=BPY)
    bad = lr.copy()
    bad.iloc[3] = np.nan
    with pytest.raises(ValueError, match="log_returns has a non-finite value"):
        strategy_metrics(bad, pos, bars_per_year=BPY)
    with pytest.raises(ValueError, match="bars_per_year"):
        strategy_metrics(lr, pos, bars_per_year=0)


def test_empty_series_gives_nulls():
    m = strategy_metrics(_series([]), _series([]), bars_per_year=BPY)
    assert m.n_bars == 0 and m.sharpe is None and m.cvar_95 is None and m.turnover is None
    _strict_json(dumps_metrics({"x": m}))


def test_aggregate_metrics_over_seeds():
    runs = [
        {"agent": {"sharpe": 1.0, "calmar": None}},
        {"agent": {"sharpe": 2.0, "calmar": 0.5}},
        {"agent": {"sharpe": 3.0, "calmar": None}},
    ]
    agg = aggregate_metrics(runs)
    assert agg["agent"]["sharpe"] == {"mean": 2.0, "std": 1.0, "n": 3}
    assert agg["agent"]["calmar"] == {"mean": 0.5, "std": None, "n": 1}


def test_format_value():
    assert format_value(None, "ratio") == "—"
    assert format_value(float("nan"), "pct") == "—"
    assert format_value(-0.1534, "pct") == "-15.3%"
    assert format_value(1.4774, "ratio") == "1.48"
    assert format_value(350, "int") == "350"
