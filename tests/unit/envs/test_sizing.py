"""Volatility-targeted position sizing (riskppo.envs.execution.sizing, TradingEnv(sizing=))."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from riskppo.envs import (
    TradingEnv,
    ewm_volatility,
    gbm,
    load_dataset,
    regime_switching,
    vol_target_scale,
)
from riskppo.envs.trading.strategies import nearest_actions, strategy_exposures, strategy_signals
from riskppo.evaluation.backtest import _with_sizing


@pytest.fixture(scope="module")
def googl() -> pd.DataFrame:
    return load_dataset("googl")


def reference_ewm_vol(close, span: int, bars_per_year: float) -> list[float]:
    """Plain-Python recursion: S_t = w S_{t-1} + r_t², W_t = w W_{t-1} + 1, σ = sqrt(S/W bpy)."""
    w = 1.0 - 2.0 / (span + 1)
    s = n = 0.0
    out = [math.nan]
    for t in range(1, len(close)):
        r = math.log(close[t] / close[t - 1])
        s = w * s + r * r
        n = w * n + 1.0
        out.append(math.sqrt(s / n * bars_per_year) if t >= span else math.nan)
    return out


def reference_scale(close, target: float, span: int, lev: float, bpy: float) -> list[float]:
    return [
        math.nan if math.isnan(v) else (lev if v == 0.0 else min(target / v, lev))
        for v in reference_ewm_vol(list(close), span, bpy)
    ]


def run(env: TradingEnv, actions, **reset_kwargs):
    obs, info = env.reset(**reset_kwargs)
    observations, rewards, infos = [obs], [], [info]
    for a in actions:
        obs, r, terminated, truncated, info = env.step(a)
        observations.append(obs)
        rewards.append(r)
        infos.append(info)
        if terminated or truncated:
            break
    return observations, rewards, infos


def constant_frame(n: int, price: float = 50.0) -> pd.DataFrame:
    idx = pd.date_range("2020-01-01", periods=n, freq="B", name="timestamp")
    c = np.full(n, price)
    return pd.DataFrame(
        {"open": c, "high": c * 1.01, "low": c * 0.99, "close": c, "volume": np.full(n, 10.0)},
        index=idx,
    )


# ----------------------------------------------------------------------------- the estimator


@pytest.mark.parametrize("data", ["googl", "regime"])
@pytest.mark.parametrize(("span", "bpy"), [(2, 252.0), (20, 1.0), (60, 252.0), (200, 6240.0)])
def test_ewm_volatility_matches_plain_loop(googl, data, span, bpy):
    close = googl["close"].to_numpy() if data == "googl" else regime_switching(1500, seed=2).close
    close = np.asarray(close, dtype=np.float64)
    got = ewm_volatility(close, span, bpy)
    ref = np.array(reference_ewm_vol(list(close), span, bpy))
    assert got.shape == ref.shape and got.dtype == np.float64
    assert np.isnan(got[:span]).all() and np.isfinite(got[span:]).all()
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_vol_target_scale_caps_leverage_and_takes_the_cap_at_zero_vol():
    close = regime_switching(800, seed=3)["close"].to_numpy()
    scale = vol_target_scale(close, target=0.4, span=30, max_leverage=1.5, bars_per_year=252)
    ref = np.array(reference_scale(close, 0.4, 30, 1.5, 252))
    np.testing.assert_allclose(scale, ref, rtol=1e-12, atol=0)
    s = scale[30:]
    assert (s <= 1.5).all() and (s == 1.5).any() and (s < 1.5).any() and (s > 0).all()
    flat = vol_target_scale(
        np.full(100, 7.0), target=0.1, span=10, max_leverage=2.0, bars_per_year=252
    )
    assert np.isnan(flat[:10]).all() and (flat[10:] == 2.0).all()


# ----------------------------------------------------------------------------- the env


@pytest.mark.parametrize("continuous", [False, True])
def test_exposure_is_signal_times_scale(googl, continuous):
    kwargs = dict(sizing="vol_target", vol_target=0.15, vol_span=40, max_leverage=1.2)
    env = TradingEnv(googl, continuous=continuous, random_start=False, **kwargs)
    scale = reference_scale(googl["close"].to_numpy(), 0.15, 40, 1.2, 252.0)
    rng = np.random.default_rng(0)
    n = env.max_episode_steps
    if continuous:
        actions = list(rng.uniform(-1.4, 1.4, size=(n, 1)).astype(np.float32))
        signals = [float(np.clip(a[0], -1.0, 1.0)) for a in actions]
    else:
        actions = rng.integers(0, 3, size=n).tolist()
        signals = [(-1.0, 0.0, 1.0)[a] for a in actions]
    _, _, infos = run(env, actions)
    assert len(infos) == n + 1
    assert infos[0]["position"] == 0.0 and infos[0]["signal"] == 0.0
    for prev, info, sig in zip(infos[:-1], infos[1:], signals):
        bar = prev["bar"]  # the decision bar: the exposure uses σ̂ of that bar
        assert info["signal"] == sig
        assert info["position"] == pytest.approx(sig * scale[bar], rel=1e-12, abs=1e-15)
    exposures = np.array([i["position"] for i in infos[1:]])
    assert np.abs(exposures).max() <= 1.2
    assert len(np.unique(np.abs(exposures[exposures != 0]))) > 100  # the scale moves


def test_fees_on_exposure_change_and_borrow_on_short_exposure(googl):
    fee, borrow = 0.002, 0.05
    scale = reference_scale(googl["close"].to_numpy(), 0.10, 60, 1.0, 252.0)
    lr = np.diff(np.log(googl["close"].to_numpy()))
    for action, sign in ((2, 1.0), (0, -1.0)):  # a constant long, then a constant short signal
        env = TradingEnv(  # fill="close": the decided exposure earns the close-to-close return
            googl,
            sizing="vol_target",
            fee=fee,
            borrow_rate=borrow,
            random_start=False,
            fill="close",
        )
        _, rewards, infos = run(env, [action] * 300)
        held = 0.0  # the share of equity in the asset just before each fill
        simple = np.expm1(lr)
        for r, prev, info in zip(rewards, infos[:-1], infos[1:]):
            t = prev["bar"]
            exposure = sign * scale[t]
            assert info["position"] == pytest.approx(exposure, rel=1e-12)
            exp_fee = fee * abs(exposure - held)
            exp_borrow = borrow / 252 * max(-exposure, 0.0)
            assert info["fee_cost"] == pytest.approx(exp_fee, rel=1e-9, abs=1e-16)
            assert info["borrow_cost"] == pytest.approx(exp_borrow, rel=1e-12, abs=0)
            growth = 1.0 + exposure * simple[t]  # equity's growth holding that share of it
            assert r == pytest.approx(math.log(growth) - exp_fee - exp_borrow, rel=1e-9, abs=1e-15)
            held = exposure * (1.0 + simple[t]) / growth  # the share drifts with the price
        fees = [i["fee_cost"] for i in infos[2:]]
        # a constant signal still pays for the rebalancing that the moving scale causes
        assert all(f > 0 for f in fees)
        assert (sum(i["borrow_cost"] for i in infos) > 0) == (sign < 0)
        assert infos[-1]["turnover"] == pytest.approx(
            scale[infos[0]["bar"]] + sum(f / fee for f in fees), rel=1e-9
        )


def test_realised_volatility_is_near_the_target_on_googl(googl):
    for target, lev in ((0.10, 1.0), (0.20, 3.0)):
        env = TradingEnv(
            googl,
            sizing="vol_target",
            vol_target=target,
            max_leverage=lev,
            fee=0.0,
            borrow_rate=0.0,
            random_start=False,
        )
        _, rewards, _ = run(env, [2] * len(googl))
        assert len(rewards) == env.max_episode_steps > 2000
        realised = float(np.std(rewards, ddof=1) * math.sqrt(252))
        assert abs(realised / target - 1.0) < 0.25, realised
    # the unsized long position is far off the 10% target (the check above can fail)
    _, raw, _ = run(TradingEnv(googl, fee=0.0, borrow_rate=0.0, random_start=False), [2] * 3000)
    assert abs(float(np.std(raw, ddof=1) * math.sqrt(252)) / 0.10 - 1.0) > 0.25


@pytest.mark.parametrize("continuous", [False, True])
def test_leverage_cap_holds(googl, continuous):
    env = TradingEnv(
        googl,
        continuous=continuous,
        sizing="vol_target",
        vol_target=0.6,
        max_leverage=1.5,
        random_start=False,
    )
    actions = [np.array([1.0], np.float32)] * 5000 if continuous else [2] * 5000
    _, _, infos = run(env, actions)
    exposures = np.array([i["position"] for i in infos[1:]])
    assert exposures.max() == 1.5  # the cap binds (GOOGL's vol is below 40% most of the time)
    assert (exposures <= 1.5).all() and (exposures > 0).all() and (exposures < 1.5).any()
    # constant prices: zero volatility takes the cap, never inf/nan
    flat = TradingEnv(
        constant_frame(120),
        features=("ret_1",),
        sizing="vol_target",
        vol_span=10,
        max_leverage=2.0,
        random_start=False,
    )
    _, rewards, infos = run(flat, [0] * 200)
    assert {i["position"] for i in infos[1:]} == {-2.0}
    assert all(math.isfinite(r) for r in rewards)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"positions": (-1.0, 0.0, 0.5), "max_leverage": 2.0, "vol_target": 0.5},
        {"positions": (0.0, 1.0), "max_leverage": 0.5},
        {"continuous": True, "positions": None, "max_leverage": 3.0, "vol_target": 1.0},
    ],
)
def test_observation_space_contains_every_observation(googl, kwargs):
    env = TradingEnv(googl, sizing="vol_target", window=3, obs_drawdown=True, **kwargs)
    rng = np.random.default_rng(1)
    for seed in range(3):
        if env.continuous:
            actions = list(rng.uniform(-1, 1, size=(300, 1)).astype(np.float32))
            actions[:50] = [np.array([s], np.float32) for s in (1.0, -1.0) * 25]
        else:
            actions = rng.integers(0, env.action_space.n, size=300).tolist()
        observations, _, infos = run(env, actions, seed=seed)
        for obs in observations:
            assert env.observation_space.contains(obs), obs[-2:]
        # the observation's position entry is the previously held exposure
        pos_slot = env.observation_names.index("position")
        for obs, info in zip(observations, infos):
            assert obs[pos_slot] == np.float32(info["position"])
    # a position at the cap is exactly representable at the space's bound
    lev = env.max_leverage
    assert env.observation_space.high[pos_slot] == np.float32(lev * max(env.positions or (1,)))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sizing", "foo"),
        ("sizing", None),
        ("vol_target", 0.0),
        ("vol_target", -0.1),
        ("vol_target", float("nan")),
        ("vol_target", float("inf")),
        ("vol_target", "0.1"),
        ("vol_span", 1),
        ("vol_span", 0),
        ("vol_span", 20.0),
        ("vol_span", True),
        ("max_leverage", 0.0),
        ("max_leverage", -1.0),
        ("max_leverage", float("nan")),
    ],
)
@pytest.mark.parametrize("sizing", ["vol_target", "none"])
def test_invalid_sizing_configuration_names_the_field(googl, field, value, sizing):
    kwargs = {"sizing": sizing, field: value}
    with pytest.raises(ValueError, match=f"^{field}="):
        TradingEnv(googl, **kwargs)


def test_sizing_warmup_sets_the_first_valid_bar():
    df = gbm(400, seed=0)
    assert (
        TradingEnv(df, features=("ret_1",), sizing="vol_target", vol_span=90).first_valid_index
        == 90
    )
    assert TradingEnv(df, sizing="vol_target", vol_span=5, window=10).first_valid_index == 29
    assert TradingEnv(df, features=("ret_1",), vol_span=90).first_valid_index == 1  # no sizing
    with pytest.raises(ValueError, match="sizing needs 500"):
        TradingEnv(df, sizing="vol_target", vol_span=500, episode_length=None)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"continuous": True}, {"window": 3, "obs_drawdown": True, "max_leverage": 2.0}],
)
def test_check_env_with_sizing(googl, kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(TradingEnv(googl, sizing="vol_target", **kwargs), skip_render_check=True)
        sb3_check_env(TradingEnv(googl, sizing="vol_target", **kwargs), warn=True)
    assert [str(w.message) for w in caught] == []


# ---- long_only: continuous actions map [-1, 1] to a signal in [0, 1] ----------------------------


def test_long_only_maps_the_action_range_onto_long_signals(googl):
    """Mutation check: dropping the affine map in ``_continuous_target`` (signal = action) gives
    a short exposure for action -1 and fails the first assertions."""
    env = TradingEnv(googl, continuous=True, random_start=False, long_only=True)
    env.reset()
    for action, signal in ((-1.0, 0.0), (-7.0, 0.0), (0.0, 0.5), (0.5, 0.75), (1.0, 1.0)):
        info = env.step(np.array([action], np.float32))[4]
        assert info["signal"] == signal and info["position"] == signal
    assert env.signal_range == (0.0, 1.0)
    assert env.observation_space.low[env.observation_names.index("position")] == 0.0
    # action_for_signal inverts the map (and clips signals below 0 to flat)
    np.testing.assert_array_equal(
        env.action_for_signal(np.array([0.0, 0.25, 1.0, -0.5])), [[-1.0], [-0.5], [1.0], [-1.0]]
    )
    sized = TradingEnv(googl, continuous=True, long_only=True, sizing="vol_target")
    rng = np.random.default_rng(0)
    _, _, infos = run(sized, list(rng.uniform(-1, 1, (300, 1)).astype(np.float32)), seed=0)
    assert min(i["position"] for i in infos) >= 0.0
    assert max(i["position"] for i in infos) > 0.0


def test_long_only_discrete_needs_non_negative_positions(googl):
    with pytest.raises(ValueError, match=r"long_only=True with discrete positions \[-1.0"):
        TradingEnv(googl, long_only=True)
    env = TradingEnv(googl, long_only=True, positions=(0.0, 0.5, 1.0))
    assert env.positions == (0.0, 0.5, 1.0)


def test_long_only_teacher_reaches_the_baselines_exposure(googl):
    """The strategy teacher's action on a long_only env makes it hold the baseline's exposure."""
    env = TradingEnv(googl, continuous=True, random_start=False, long_only=True)
    targets = strategy_signals(env, strategy_exposures(env, "sma_crossover"))
    actions = nearest_actions(env, targets)
    env.reset()
    first = env.first_valid_index
    held = [env.step(actions[first + k])[4]["position"] for k in range(100)]
    np.testing.assert_array_equal(held, targets[first : first + 100])


# ---- min_signal: a core long position the agent scales between min_signal and 1 ----------------


def test_min_signal_keeps_a_core_long_position(googl):
    """Mutation check: dropping ``m +`` (or the ``(1 - m)`` factor) in ``_continuous_target``
    moves the signals for actions -1 / 0 and fails the first loop."""
    env = TradingEnv(googl, continuous=True, random_start=False, long_only=True, min_signal=0.5)
    env.reset()
    for action, signal in ((-1.0, 0.5), (-7.0, 0.5), (0.0, 0.75), (1.0, 1.0), (3.0, 1.0)):
        info = env.step(np.array([action], np.float32))[4]
        assert info["signal"] == signal and info["position"] == signal
    assert env.signal_range == (0.5, 1.0)
    # action_for_signal inverts the map; signals below the core are clipped to it
    np.testing.assert_array_equal(
        env.action_for_signal(np.array([0.5, 0.75, 1.0, 0.0])), [[-1.0], [0.0], [1.0], [-1.0]]
    )
    sized = TradingEnv(googl, continuous=True, long_only=True, min_signal=0.5, sizing="vol_target")
    rng = np.random.default_rng(0)
    _, _, infos = run(sized, list(rng.uniform(-1, 1, (300, 1)).astype(np.float32)), seed=0)
    assert all(i["signal"] >= 0.5 for i in infos[1:])  # infos[0]: flat at reset
    assert min(i["position"] / i["signal"] for i in infos[1:]) > 0
    # min_signal=0 is long_only exactly (same floats)
    plain = TradingEnv(googl, continuous=True, random_start=False, long_only=True)
    zero = TradingEnv(googl, continuous=True, random_start=False, long_only=True, min_signal=0.0)
    acts = list(rng.uniform(-1, 1, (50, 1)).astype(np.float32))
    assert [i["signal"] for i in run(plain, acts)[2]] == [i["signal"] for i in run(zero, acts)[2]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"continuous": True, "long_only": True, "min_signal": 1.0}, r"^min_signal=1\.0 is inv"),
        ({"continuous": True, "long_only": True, "min_signal": -0.1}, r"^min_signal=-0\.1"),
        ({"continuous": True, "long_only": True, "min_signal": "0.5"}, r"^min_signal='0\.5'"),
        ({"continuous": True, "min_signal": 0.5}, r"min_signal=0\.5 needs continuous=True and"),
        ({"long_only": True, "positions": (0.0, 1.0), "min_signal": 0.5}, "needs continuous"),
    ],
)
def test_min_signal_is_checked_with_one_line(googl, kwargs, message):
    with pytest.raises(ValueError, match=message):
        TradingEnv(googl, **kwargs)


def test_baselines_do_not_inherit_the_agents_core_position():
    """The SMA crossover still goes flat when the agent's env keeps a core position."""
    kwargs = {"continuous": True, "long_only": True, "min_signal": 0.5, "sizing": "vol_target"}
    assert _with_sizing(kwargs, "none") == {"continuous": True, "long_only": True, "sizing": "none"}
