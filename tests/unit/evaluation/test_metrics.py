"""Backtest metrics against hand-computed values (R-TRADE-3)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from riskppo.evaluation.metrics import (
    FLAT_MARKET_SHARE,
    METRIC_KEYS,
    SPEC_METRIC_KEYS,
    active_share,
    aggregate_metrics,
    dumps_metrics,
    horizon_cvar,
    signal_floor,
    strategy_metrics,
)
from riskppo.evaluation.report import best_of_row, format_value

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
    assert isinstance(d["n_bars"], int) and isinstance(d["cvar_horizon_bars"], int)
    assert d["flat"] is False and d["cvar_limit"] is None and d["cvar_limit_met"] is None
    assert d["cvar_horizon"] is None  # 10 bars: fewer than one 20-bar window
    assert d["active_share"] is None  # no signals given
    other = ("n_bars", "cvar_horizon_bars", "flat", "cvar_limit", "cvar_limit_met", "cvar_horizon")
    other += ("active_share",)
    assert all(isinstance(v, float) for k, v in d.items() if k not in other)


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


def test_market_share_and_mean_abs_exposure_by_hand():
    # exposures after sizing: fractional, signed, one just below the 0.05 "in the market" cut
    # (a continuous agent's near-zero exposure is not trading) and one exactly at it
    pos = np.array([0.0, 0.5, -0.2, 0.049, 0.0, 1.5, 0.0, -0.05])
    lr = np.array([0.01, -0.02, 0.005, 0.0, 0.01, 0.03, -0.01, 0.001])
    m = strategy_metrics(_series(lr), _series(pos), bars_per_year=BPY)
    assert m.market_share == pytest.approx(4 / 8)  # 0.5, -0.2, 1.5, -0.05
    assert m.mean_abs_exposure == pytest.approx((0.5 + 0.2 + 0.049 + 1.5 + 0.05) / 8)
    assert m.hit_rate == pytest.approx(3 / 4)  # positive net return on 3 of those 4 bars
    assert m.flat is False


def test_horizon_cvar_by_hand():
    lr = np.array([0.01, -0.03, 0.02, -0.01, -0.02, 0.04, 0.0, -0.05, 0.01, 0.02])
    # overlapping 3-bar sums (8 windows): 0, -.02, -.01, .01, .02, -.01, -.04, -.02
    sums = np.array([lr[i : i + 3].sum() for i in range(8)])
    np.testing.assert_allclose(
        sorted(sums), [-0.04, -0.02, -0.02, -0.01, -0.01, 0.0, 0.01, 0.02], atol=1e-12
    )
    # α·N = 0.25·8 = 2 whole windows: (-0.04 - 0.02) / 2
    assert horizon_cvar(lr, 0.25, 3) == pytest.approx(-0.03, abs=1e-12)
    # α·N = 0.45·8 = 3.6: three whole windows and 0.6 of the fourth worst (-0.01)
    expected = (-0.04 - 0.02 - 0.02 - 0.6 * 0.01) / 3.6
    assert horizon_cvar(lr, 0.45, 3) == pytest.approx(expected, abs=1e-12)
    # α·N < 1: the worst window alone; α = 1: the mean of all windows
    assert horizon_cvar(lr, 0.05, 3) == pytest.approx(-0.04, abs=1e-12)
    assert horizon_cvar(lr, 1.0, 3) == pytest.approx(sums.mean(), abs=1e-12)
    assert horizon_cvar(lr, 0.05, 10) == pytest.approx(lr.sum(), abs=1e-12)  # one window
    assert horizon_cvar(lr, 0.05, 11) is None  # fewer bars than one window


def test_strategy_metrics_horizon_cvar_against_the_limit():
    lr = np.array([0.01, -0.03, 0.02, -0.01, -0.02, 0.04, 0.0, -0.05, 0.01, 0.02])
    pos = np.ones(10)
    kw = {"bars_per_year": BPY, "cvar_alpha": 0.25, "cvar_horizon": 3}
    met = strategy_metrics(_series(lr), _series(pos), cvar_limit=-0.031, **kw)
    assert met.cvar_horizon == pytest.approx(-0.03, abs=1e-12)
    assert met.cvar_horizon_bars == 3 and met.cvar_alpha == 0.25
    assert met.cvar_limit == -0.031 and met.cvar_limit_met is True
    violated = strategy_metrics(_series(lr), _series(pos), cvar_limit=-0.029, **kw)
    assert violated.cvar_limit_met is False
    d = _strict_json(dumps_metrics({"s": violated}))["s"]
    assert d["cvar_limit_met"] is False and d["cvar_limit"] == -0.029
    no_limit = strategy_metrics(_series(lr), _series(pos), **kw)
    assert no_limit.cvar_limit is None and no_limit.cvar_limit_met is None
    # horizon None: 20 bars; too few bars for one window -> undefined, limit status unknown
    short = strategy_metrics(
        _series(lr), _series(pos), bars_per_year=BPY, cvar_horizon=None, cvar_limit=-0.1
    )
    assert short.cvar_horizon_bars == 20 and short.cvar_horizon is None
    assert short.cvar_limit_met is None


def test_flat_flag_uses_the_market_share_threshold():
    lr = _series(np.full(100, 0.001))
    assert FLAT_MARKET_SHARE == 0.05
    four = np.zeros(100)
    four[:4] = 1.0  # in the market on 4% of bars
    five = np.zeros(100)
    five[:5] = 1.0
    assert strategy_metrics(lr, _series(four), bars_per_year=BPY).flat is True
    assert strategy_metrics(lr, _series(five), bars_per_year=BPY).flat is False
    assert strategy_metrics(lr, _series(five), bars_per_year=BPY, flat_threshold=0.1).flat is True
    never = strategy_metrics(lr, _series(np.zeros(100)), bars_per_year=BPY)
    assert never.flat is True and never.market_share == 0.0 and never.mean_abs_exposure == 0.0
    assert _strict_json(dumps_metrics({"x": never}))["x"]["flat"] is True


def test_best_of_row_skips_strategies_that_held_no_position():
    # a flat strategy's zero drawdown would be the "best" max drawdown
    values = [0.0, -0.3, -0.2, -0.25]
    assert best_of_row(values, "higher") == {0}
    assert best_of_row(values, "higher", [False, True, True, True]) == {2}
    assert best_of_row(values, "higher", [False, True, False, False]) == set()  # one left
    assert best_of_row(values, None, [True] * 4) == set()


def test_active_share_counts_only_signal_beyond_the_floor():
    """Hand-computed: a core long of 0.25 held all the time is in the market by exposure but
    never active; 0.30 (exactly 0.05 beyond it) is active; long-short signals count by |signal|."""
    core = pd.Series([0.25, 0.29, 0.30, 1.0])
    assert active_share(core, 0.25) == 0.5
    assert active_share(pd.Series([-0.5, 0.01, -0.04, 0.06]), 0.0) == 0.5
    idx = pd.RangeIndex(4)
    lr, pos = pd.Series([0.001] * 4, index=idx), pd.Series([0.25] * 4, index=idx)
    m = strategy_metrics(
        lr, pos, bars_per_year=BPY, signals=pd.Series([0.25] * 4), signal_floor=0.25
    )
    assert m.market_share == 1.0 and m.active_share == 0.0
    assert signal_floor({"min_signal": 0.25}) == 0.25 and signal_floor({}) == 0.0
    with pytest.raises(ValueError, match="finite"):
        active_share(pd.Series([0.3, float("nan")]), 0.0)
