"""TradingEnv fill timing: rewards of each fill mode on a hand-built frame, auto, causality, errors,
and the backtest's per-bar frame of each mode."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from riskppo.config import ConfigError
from riskppo.envs import TradingEnv, load_dataset, make_trading_env
from riskppo.envs.execution.fills import FILLS, fill_returns, resolve_fill
from riskppo.evaluation.baselines import run_policy

OPEN = [100.0, 102.0, 99.0, 104.0, 100.0]
CLOSE = [101.0, 98.0, 103.0, 101.0, 106.0]
FEE, BORROW = 0.001, 0.001  # fee per unit |Δexposure|; borrow cost per bar per unit short
POSITIONS = (-1.0, 0.0, 0.5, 1.0)
ACTIONS = [3, 2, 0, 1]  # decided at bars 0..3: exposures 1, 0.5, -1, 0
L = math.log


def cash_and_shares(fill: str, exposures: list[float]) -> tuple[list[float], float]:
    """An independent account: cash and a number of shares, marked at every price it meets.

    At each fill (price ``P``, equity ``E = cash + n P``) the step's costs are paid from
    equity (``E ← E e^{−cost}``: the fee on the share traded ``|p − n P / E|`` and the borrow
    cost on the short exposure held over the session), then the holding is reset to ``n = p E
    / P``. Returns each step's log change of the equity marked at the closes, and the total
    share traded. Nothing of the env's accounting code runs here."""
    cash, n, traded, out = 1.0, 0.0, 0.0, []
    prev = 0.0
    for t, p in enumerate(exposures):
        start_eq = cash + n * CLOSE[t]
        fill_price = {"close": CLOSE[t], "next_open": OPEN[t + 1], "next_close": CLOSE[t + 1]}
        price = fill_price[fill]
        eq = cash + n * price
        share = n * price / eq
        held = prev if fill == "next_close" else p
        cost = FEE * abs(p - share) + BORROW * max(-held, 0.0)
        traded += abs(p - share)
        eq *= math.exp(-cost)
        n = p * eq / price
        cash = eq - n * price
        out.append(math.log((cash + n * CLOSE[t + 1]) / start_eq))
        prev = p
    return out, traded


EXPOSURES = [1.0, 0.5, -1.0, 0.0]
EXPECTED = {f: cash_and_shares(f, EXPOSURES)[0] for f in ("close", "next_open", "next_close")}

# exposure held over each bar 1..4 (the backtest frame's position column)
SESSION_EXPOSURE = {
    "close": [1.0, 0.5, -1.0, 0.0],
    "next_open": [1.0, 0.5, -1.0, 0.0],
    "next_close": [0.0, 1.0, 0.5, -1.0],
}


def five_bars() -> pd.DataFrame:
    o = np.asarray(OPEN)
    c = np.asarray(CLOSE)
    return pd.DataFrame(
        {
            "open": o,
            "high": np.maximum(o, c) + 1.0,
            "low": np.minimum(o, c) - 1.0,
            "close": c,
            "volume": np.full(5, 1000.0),
        },
        index=pd.date_range("2021-01-04", periods=5, freq="B", name="timestamp"),
    )


def make_env(fill: str) -> TradingEnv:
    return TradingEnv(
        five_bars(),
        features=("hl_range",),  # no warm-up: decisions at bars 0..3
        positions=POSITIONS,
        fee=FEE,
        borrow_rate=BORROW * 252,
        bars_per_year=252,
        fill=fill,
        random_start=False,
        episode_length=None,
    )


def run(env: TradingEnv, actions: list[int]) -> tuple[list[float], list[dict]]:
    _, info = env.reset()
    rewards, infos = [], []
    for a in actions:
        _, r, terminated, truncated, info = env.step(a)
        rewards.append(float(r))
        infos.append(info)
        if terminated or truncated:
            break
    return rewards, infos


@pytest.mark.parametrize("fill", ["close", "next_open", "next_close"])
def test_rewards_by_hand(fill):
    env = make_env(fill)
    assert env.fill == fill and env.trading_range == (0, 4)
    rewards, infos = run(env, ACTIONS)
    assert len(rewards) == 4 and infos[-1]["bar"] == 4  # one step per bar, whatever the fill
    np.testing.assert_allclose(rewards, EXPECTED[fill], rtol=0, atol=1e-12)
    assert [i["position"] for i in infos] == [1.0, 0.5, -1.0, 0.0]  # decided (and filled)
    assert {i["fill"] for i in infos} == {fill}
    np.testing.assert_allclose([i["gross_return"] - i["costs"] for i in infos], rewards, atol=1e-15)
    assert infos[-1]["log_equity"] == pytest.approx(sum(EXPECTED[fill]), abs=1e-12)
    turnover = cash_and_shares(fill, EXPOSURES)[1]  # 1 + 0.5 + 1.5 + 1 and the drifts' resets
    assert infos[-1]["turnover"] == pytest.approx(turnover, abs=1e-12)
    assert abs(turnover - 4.0) > 1e-3 or fill == "next_close"  # a drifted share is re-traded


def test_the_account_is_not_exposure_times_log_return():
    """Holding half the equity in the asset earns log(1 + 0.5 R) a bar, not 0.5 log(1 + R):
    the continuous-rebalancing shortcut books (p − p²) R² / 2 too little."""
    env = make_env("close")
    rewards, _ = run(env, [2, 2, 2, 2])  # 0.5 of equity, rebalanced at every close
    r = np.diff(np.log(CLOSE))
    shortcut = 0.5 * r - np.r_[FEE * 0.5, np.zeros(3)]
    assert np.abs(np.asarray(rewards) - shortcut).max() > 1e-4
    np.testing.assert_allclose(rewards, cash_and_shares("close", [0.5] * 4)[0], atol=1e-12)


@pytest.mark.parametrize("fill", ["close", "next_open", "next_close"])
def test_backtest_frame_matches_the_env(fill):
    """run_policy/strategy_frame: per-bar log returns are the rewards, equity their exp-cumsum,
    and the position column is the exposure that held each bar."""
    env = make_env(fill)
    policy = dict(zip(range(4), (POSITIONS[a] for a in ACTIONS)))
    frame = run_policy(env, lambda bar: policy[bar])
    assert list(frame.index) == list(env.df.index[1:])  # one row per bar after the first decision
    np.testing.assert_allclose(frame["log_return"], EXPECTED[fill], atol=1e-12)
    np.testing.assert_allclose(frame["equity"], np.exp(np.cumsum(EXPECTED[fill])), rtol=1e-12)
    peak = np.maximum.accumulate(np.concatenate(([1.0], frame["equity"])))[1:]
    np.testing.assert_allclose(frame["drawdown"], 1.0 - frame["equity"] / peak, atol=1e-12)
    assert list(frame["position"]) == SESSION_EXPOSURE[fill]
    assert list(frame["signal"]) == SESSION_EXPOSURE[fill]


def test_auto_is_next_open_with_opens_else_next_close():
    assert make_env("auto").fill == "next_open"
    assert TradingEnv(load_dataset("googl")).fill == "next_open"  # the default
    rewards, _ = run(make_env("auto"), ACTIONS)
    np.testing.assert_allclose(rewards, EXPECTED["next_open"], atol=1e-12)
    # a frame without opens (no column, or missing values): filled at the next close
    assert resolve_fill("auto", None) == "next_close"
    assert resolve_fill("auto", np.array([1.0, np.nan, 2.0])) == "next_close"
    assert resolve_fill("auto", np.array([1.0, 2.0])) == "next_open"
    for opens, what in ((None, "no open column"), (np.array([np.nan, 1.0]), r"missing \(NaN\)")):
        with pytest.raises(ValueError, match=rf"fill='next_open' needs the open .*{what}"):
            resolve_fill("next_open", opens)
    assert resolve_fill("next_close", None) == "next_close"


@pytest.mark.parametrize("bad", ["bogus", "open", None, 1, "Next_Open"])
def test_invalid_fill_is_one_clear_error(bad):
    msg = f"fill={bad!r} is invalid: must be one of {FILLS}"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        make_env(bad)
    with pytest.raises(ConfigError, match=r"trading env on GOOGL \(train part.*" + re.escape(msg)):
        make_trading_env(fill=bad)


def test_fill_tables_add_up_to_the_close_to_close_return():
    df = load_dataset("googl")
    o, c = df["open"].to_numpy(), df["close"].to_numpy()
    bar = np.diff(np.log(c))
    for fill in ("close", "next_open", "next_close"):
        ret = fill_returns(fill, o, c)
        np.testing.assert_allclose(ret.old + ret.new, bar, rtol=0, atol=1e-12)
        assert ret.delayed == (fill == "next_close")
    gap = fill_returns("next_open", o, c).old
    assert np.abs(gap).max() > 0.05  # GOOGL's opens do gap (earnings); the mode is not a no-op


@pytest.mark.parametrize("sizing", ["none", "vol_target"])
def test_sizing_scale_is_fixed_at_the_decision(sizing):
    """The exposure decided at bar t is signal × scale_t whatever the fill (scale from closes
    <= t), so the same actions give the same exposures in every mode."""
    df = load_dataset("googl")
    kwargs = dict(random_start=False, continuous=True, sizing=sizing, vol_span=30)
    actions = list(np.random.default_rng(3).uniform(-1, 1, size=(200, 1)).astype(np.float32))
    positions = [
        [i["position"] for i in run(TradingEnv(df, fill=f, **kwargs), actions)[1]]
        for f in ("close", "next_open", "next_close")
    ]
    assert positions[0] == positions[1] == positions[2]
