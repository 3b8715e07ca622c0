"""The overlay's forecast on a record (riskppo.evaluation.limit_backtest): which bar decided each
row's position (both fill timings, against the env's own step), the non-overlapping windows and
their outcome by hand from the closes, the FHS null, and the printed line."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from riskppo.envs.execution.overlay import RiskOverlay, unit_forecast
from riskppo.envs.trading.env import TradingEnv
from riskppo.evaluation.baselines import strategy_frame
from riskppo.evaluation.limit_backtest import (
    decision_bars,
    limit_html,
    limit_line,
    record_limit,
    record_windows,
)

OVERLAY = {"limit": -0.03, "min_history": 150, "horizon": 10}


def _frame(n: int, seed: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.standard_t(4, n) * 0.012))
    opens = close * np.exp(rng.normal(0, 0.002, n))
    idx = pd.date_range("2001-01-01", periods=n, freq="B", name="date")
    return pd.DataFrame({"open": opens, "close": close}, index=idx)


def _episode(env: TradingEnv, seed: int) -> tuple[pd.DataFrame, dict[int, float]]:
    """A random-signal episode: its strategy frame and the exposure decided at each bar."""
    rng = np.random.default_rng(seed)
    env.reset()
    infos, decided = [], {}
    for _ in range(env.max_episode_steps):
        info = env.step(rng.uniform(-1, 1, 1).astype(np.float32))[4]
        infos.append(info)
        decided[int(info["bar"]) - 1] = float(info["position"])  # decided at the bar before
    return strategy_frame(infos, env.df["close"]), decided


@pytest.mark.parametrize("fill", ["next_open", "next_close", "close"])
def test_each_window_holds_the_position_decided_at_its_bar(fill: str) -> None:
    env = TradingEnv(
        _frame(900),
        continuous=True,
        sizing="vol_target",
        vol_target=0.3,
        random_start=False,
        fill=fill,
        overlay=OVERLAY,
    )
    frame, decided = _episode(env, 1)
    result = record_limit(env, frame.index, frame["position"].to_numpy(), n_sims=50)
    assert result is not None
    block, windows = result
    delay = int(fill == "next_close")
    close = env.df["close"].to_numpy()
    h = env.overlay.horizon  # type: ignore[union-attr]
    assert len(windows.bars) > 20 and (np.diff(windows.bars) >= h).all()  # never overlapping
    assert ((windows.bars - windows.bars[0]) % h == 0).all()
    for t, p, x in zip(windows.bars, windows.exposure, windows.record.realised, strict=True):
        assert p == decided[int(t)]  # the env's own decision at that bar
        # the hypothetical P&L: the position held over the h bars the forecast covers
        want = p * (math.log(close[t + delay + h]) - math.log(close[t + delay]))
        assert x == pytest.approx(want, rel=1e-9, abs=1e-15)
    f = unit_forecast(close, env.overlay, delay=delay)  # type: ignore[arg-type]
    unit = np.abs(windows.exposure) * f.sigma[windows.bars] * math.sqrt(h)
    np.testing.assert_allclose(windows.record.es, -unit * f.multiplier[windows.bars])
    np.testing.assert_allclose(windows.record.var, -unit * f.quantile[windows.bars])
    assert block.windows == len(windows.bars) and block.phases == h
    assert block.exceedances == int(np.sum(windows.record.realised < windows.record.var))


def test_decision_bars_by_fill() -> None:
    data = pd.date_range("2020-01-01", periods=10, freq="D")
    np.testing.assert_array_equal(decision_bars(data, data[3:6], 0), [2, 3, 4])
    np.testing.assert_array_equal(decision_bars(data, data[3:6], 1), [1, 2, 3])
    with pytest.raises(ValueError, match="2021-01-01 00:00:00 is not in the data"):
        decision_bars(data, pd.DatetimeIndex(["2021-01-01"]), 0)


def _toy_forecast(n: int = 400, horizon: int = 5) -> tuple[np.ndarray, RiskOverlay]:
    close = _frame(n, seed=9)["close"].to_numpy()
    return close, RiskOverlay(limit=-0.03, horizon=horizon, min_history=100, slow_span=20)


def test_phases_flat_windows_and_the_end_of_the_data() -> None:
    close, ov = _toy_forecast()
    f = unit_forecast(close, ov, delay=0)
    bars = np.arange(50, 400)
    exposure = np.where(bars % 7 == 0, 0.0, np.where(bars % 3 == 0, -0.5, 0.8))
    w = record_windows(f, 5, 100, bars, exposure, phase=2)
    every = np.arange(52, 400, 5)
    held = every[(every % 7 != 0) & (every + 5 <= 399)]  # not flat, outcome in the data
    np.testing.assert_array_equal(w.bars, held)
    assert w.flat == int(np.sum(every % 7 == 0))
    short = w.exposure < 0
    assert short.any() and (w.record.es < 0).all()  # a short's forecast is a loss too
    z = f.z[w.bars]
    np.testing.assert_allclose(w.record.realised / (w.exposure * f.sigma[w.bars]), z * 5**0.5)


def test_the_null_is_the_overlays_model() -> None:
    """Each window's null draws the sums known at its bar, or a standard normal before
    min_history of them: the forecast's own distribution."""
    close, ov = _toy_forecast(600)
    f = unit_forecast(close, ov, delay=0)
    bars = np.arange(30, 600)
    w = record_windows(f, 5, ov.min_history, bars, np.ones(len(bars)))
    null = w.record.null
    n_known = f.n_known[w.bars]
    early = n_known < ov.min_history
    assert early.any() and (~early).any()
    known = f.z[~np.isnan(f.z)]
    np.testing.assert_array_equal(null.pool[: len(known)], known)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(null.hi[~early], n_known[~early])  # type: ignore[attr-defined]
    draws = null.draw(np.random.default_rng(0), 4000)
    unit = f.sigma[w.bars] * math.sqrt(5)
    z = draws / unit
    late = int(np.flatnonzero(~early)[0])
    assert set(np.round(z[:, late], 12)) <= set(np.round(known[: n_known[late]], 12))
    first = int(np.flatnonzero(early)[0])
    assert abs(z[:, first].mean()) < 0.1 and abs(z[:, first].std() - 1) < 0.05  # N(0, 1)


def test_no_overlay_no_block() -> None:
    env = TradingEnv(_frame(400), continuous=True, random_start=False)
    frame, _ = _episode(env, 0)
    assert record_limit(env, frame.index, frame["position"].to_numpy()) is None
    assert limit_line(None) is None and limit_html(None) == ""


def test_the_line_says_what_was_found() -> None:
    block = {
        "horizon": 20,
        "alpha": 0.05,
        "windows": 100,
        "exceedances": 11,
        "expected": 5.0,
        "kupiec_p": 0.012,
        "z2": -0.8,
        "z2_p": 0.01,
        "kupiec_reject": True,
        "z2_reject": True,
        "phases": 20,
        "kupiec_reject_phases": 14,
        "z2_reject_phases": 17,
        "mean_forecast_cvar": -0.03,
        "mean_tail_return": -0.05,
    }
    line = limit_line(block)
    assert line is not None
    assert "on 100 non-overlapping windows: 11 exceedances of VaR, 5.0 expected" in line
    assert "Kupiec p = 0.012" in line and "Z2 = -0.80 (p = 0.010)" in line
    assert "under-states the risk" in line and "too many exceedances" in line
    assert "of all 20 phases Kupiec rejects in 14, Z2 in 17" in line
    page = limit_html(block)
    assert "Is the limit&#x27;s forecast right?" in page and "11 / 5.0" in page
    calm = {**block, "exceedances": 1, "kupiec_reject": False, "z2_reject": False, "z2": 0.4}
    assert "1 exceedance of VaR" in (limit_line(calm) or "")
    assert "neither test rejects at 5%" in (limit_line(calm) or "")
    assert limit_line({"error": "gone"}) == "risk-limit forecast: ES backtest not computed (gone)"
