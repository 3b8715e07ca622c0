"""R-TRADE-2: TradingEnv timing, rewards, causality, episodes, seeding and API conformance."""

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
    compute_features,
    default_split,
    gbm,
    index_range,
    load_dataset,
    regime_switching,
)
from riskppo.envs.causality import perturb_after

INFO_KEYS = {
    "equity",
    "log_equity",
    "position",
    "signal",
    "turnover",
    "drawdown",
    "reward_costs_fraction",
    "reward_slope",
    "reward_slope_prev",
    "gross_return",
    "costs",
    "fee_cost",
    "borrow_cost",
    "bar",
    "timestamp",
    "episode_step",
    "fill",
}


@pytest.fixture(scope="module")
def googl() -> pd.DataFrame:
    return load_dataset("googl")


def frame_from_closes(closes: list[float]) -> pd.DataFrame:
    """Bars opening at the previous close with a 1% range around open/close."""
    c = np.asarray(closes, dtype=np.float64)
    o = np.concatenate(([c[0]], c[:-1]))
    idx = pd.date_range("2021-01-04", periods=len(c), freq="B", name="timestamp")
    return pd.DataFrame(
        {
            "open": o,
            "high": np.maximum(o, c) * 1.01,
            "low": np.minimum(o, c) * 0.99,
            "close": c,
            "volume": np.full(len(c), 1000.0),
        },
        index=idx,
    )


def run_episode(env: TradingEnv, actions, *, seed=None, options=None):
    """Run until the episode ends (or actions run out); return obs, rewards, infos, flags."""
    obs, info = env.reset(seed=seed, options=options)
    observations, rewards, infos = [obs], [], [info]
    terminated = truncated = False
    for a in actions:
        obs, r, terminated, truncated, info = env.step(a)
        observations.append(obs)
        rewards.append(r)
        infos.append(info)
        if terminated or truncated:
            break
    return observations, rewards, infos, terminated, truncated


# ----------------------------------------------------------------------------- API conformance


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"continuous": True},
        {"window": 4, "obs_drawdown": True},
        {"continuous": True, "window": 2, "positions": None, "episode_length": None},
        {"positions": (0.0, 0.5, 1.0), "random_start": False},
    ],
)
def test_check_env_gymnasium_and_sb3_without_warnings(googl, kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(TradingEnv(googl, **kwargs), skip_render_check=True)
        sb3_check_env(TradingEnv(googl, **kwargs), warn=True)
    assert [str(w.message) for w in caught] == []


def test_spaces(googl):
    env = TradingEnv(googl, window=3, obs_drawdown=True)
    n_feat = len(env.feature_names)
    assert env.observation_space.shape == (3 * n_feat + 2,)
    assert env.observation_space.dtype == np.float32
    assert len(env.observation_names) == 3 * n_feat + 2
    assert env.observation_names[-2:] == ["position", "drawdown"]
    assert env.action_space.n == 3
    cont = TradingEnv(googl, continuous=True)
    assert cont.action_space.shape == (1,) and cont.action_space.dtype == np.float32
    assert cont.action_space.low[0] == -1 and cont.action_space.high[0] == 1
    # the space depends on the configuration only: train and test envs agree
    s = default_split(googl)
    assert TradingEnv(s.train).observation_space == TradingEnv(s.test).observation_space


# ----------------------------------------------------------------------------- reward algebra


def test_fill_at_next_bar_and_fee_on_change():
    closes = [100.0, 101.0, 110.0, 99.0, 99.0, 120.0, 90.0]
    env = TradingEnv(
        frame_from_closes(closes),
        features=("ret_1",),
        fee=0.001,
        borrow_rate=0.0,
        random_start=False,
        episode_length=None,
    )
    assert env.first_valid_index == 1 and env.trading_range == (1, 6)
    # decisions at bars 1..5: long, flat, short, short, long
    _, rewards, infos, terminated, truncated = run_episode(env, [2, 1, 0, 0, 2])
    R = np.diff(closes) / closes[:-1]  # simple return of each bar
    short_after = -(1 + R[4]) / (1 - R[4])  # a short of the whole equity after 99 -> 120
    L = math.log
    expected = [
        L(1 + R[1]) - 0.001 * 1,  # long at close 1 earns close 1 -> close 2
        0.0 - 0.001 * 1,  # back to flat: no exposure to 110 -> 99
        L(1 - R[3]) - 0.001 * 1,  # short over 99 -> 99
        L(1 - R[4]) - 0.0,  # still short over 99 -> 120, no fee (99 -> 99 left it at -1)
        L(1 + R[5]) - 0.001 * (1 - short_after),  # the drifted short -> long
    ]
    np.testing.assert_allclose(rewards, expected, rtol=0, atol=1e-15)
    assert [i["position"] for i in infos[1:]] == [1.0, 0.0, -1.0, -1.0, 1.0]
    assert [i["bar"] for i in infos] == [1, 2, 3, 4, 5, 6]
    assert infos[-1]["turnover"] == pytest.approx(3 + 1 - short_after, abs=1e-15)
    assert infos[2]["gross_return"] == 0.0 and infos[2]["fee_cost"] == 0.001
    assert truncated and not terminated


def test_observed_position_is_the_held_one():
    env = TradingEnv(
        frame_from_closes([100.0 + i for i in range(10)]),
        features=("ret_1",),
        positions=(-0.5, 0.0, 0.5),
        random_start=False,
    )
    obs, _ = env.reset()
    assert obs[-1] == 0.0
    obs, *_ = env.step(2)
    assert obs[-1] == 0.5
    obs, *_ = env.step(0)
    assert obs[-1] == -0.5


def test_borrow_cost_only_on_shorts():
    closes = [100.0 * 1.01**i for i in range(12)]
    env = TradingEnv(
        frame_from_closes(closes),
        features=("ret_1",),
        positions=(-1.0, -0.5, 0.0, 0.5, 1.0),
        fee=0.0,
        borrow_rate=0.252,
        bars_per_year=252,
        random_start=False,
    )
    _, rewards, infos, _, _ = run_episode(env, [4, 3, 2, 1, 0])
    per_bar = 0.252 / 252
    assert [i["borrow_cost"] for i in infos[1:]] == [0.0, 0.0, 0.0, 0.5 * per_bar, per_bar]
    for r, p, i in zip(rewards, (1.0, 0.5, 0.0, -0.5, -1.0), infos[1:]):  # no fee
        assert r == pytest.approx(math.log(1 + p * 0.01) - max(-p, 0.0) * per_bar, abs=1e-15)
        assert i["costs"] == i["borrow_cost"]


@pytest.mark.parametrize("continuous", [False, True])
def test_rewards_sum_to_log_equity(googl, continuous):
    env = TradingEnv(googl, continuous=continuous, fee=0.001, borrow_rate=0.03, random_start=False)
    rng = np.random.default_rng(0)
    if continuous:
        actions = list(rng.uniform(-1.3, 1.3, size=(env.max_episode_steps, 1)).astype(np.float32))
    else:
        actions = rng.integers(0, 3, size=env.max_episode_steps).tolist()
    _, rewards, infos, _, truncated = run_episode(env, actions)
    assert truncated and len(rewards) == env.max_episode_steps
    final = infos[-1]
    assert abs(sum(rewards) - math.log(final["equity"] / 1.0)) < 1e-10
    assert final["log_equity"] == pytest.approx(sum(rewards), abs=1e-12)
    gross = sum(i["gross_return"] for i in infos[1:])
    costs = sum(i["costs"] for i in infos[1:])
    assert abs(sum(rewards) - (gross - costs)) < 1e-10 and costs > 0
    for i in infos:
        assert set(i) == INFO_KEYS
        frac = i["reward_costs_fraction"]
        assert 0.0 <= frac <= 1.0 and math.isfinite(frac)
        assert 0.0 <= i["drawdown"] < 1.0
    # the turnover is the share traded at the fills: the decisions' changes, and the drifts'
    positions = [i["position"] for i in infos]  # infos[0]: flat at reset
    turnover = np.array([i["turnover"] for i in infos[1:]])
    assert (np.diff(turnover) >= 0).all() and turnover[-1] > np.abs(np.diff(positions)).sum()
    equity = np.array([i["equity"] for i in infos])
    expected_dd = 1.0 - equity / np.maximum.accumulate(equity)
    np.testing.assert_allclose([i["drawdown"] for i in infos], expected_dd, atol=1e-12)


def test_reward_scale_scales_reward_not_equity(googl):
    actions = np.random.default_rng(1).integers(0, 3, size=300).tolist()
    _, r1, i1, _, _ = run_episode(TradingEnv(googl, random_start=False), actions)
    _, r3, i3, _, _ = run_episode(TradingEnv(googl, random_start=False, reward_scale=3.0), actions)
    np.testing.assert_allclose(r3, 3.0 * np.asarray(r1), rtol=1e-14)
    assert i1[-1]["equity"] == i3[-1]["equity"]


def test_continuous_actions_are_clipped(googl):
    env = TradingEnv(googl, continuous=True, random_start=False)
    env.reset()
    assert env.step(np.array([2.5], np.float32))[4]["position"] == 1.0
    assert env.step(np.array([-7.0], np.float32))[4]["position"] == -1.0
    assert env.step(np.array([0.25], np.float32))[4]["position"] == 0.25
    with pytest.raises(ValueError, match="not finite"):
        env.step(np.array([np.nan], np.float32))


def test_invalid_discrete_action(googl):
    env = TradingEnv(googl)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside"):
        env.step(3)
    with pytest.raises(ValueError, match="integer"):
        env.step(0.5)
    env.step(np.array([2]))  # a size-1 integer array is accepted


# ----------------------------------------------------------------------------- causality


@pytest.mark.parametrize("fill", ["close", "next_open", "next_close"])
@pytest.mark.parametrize("sizing", ["none", "vol_target"])
@pytest.mark.parametrize("data", ["googl", "regime"])
def test_future_bars_do_not_change_past_observations_or_rewards(googl, data, sizing, fill):
    """Changing every bar after t leaves the observations of bars <= t, the exposures decided at
    bars <= t (with sizing: σ̂_t uses closes <= t) and the rewards earned up to t unchanged, with
    every fill mode."""
    df = googl if data == "googl" else regime_switching(600, seed=4)
    rng = np.random.default_rng(123)
    kwargs = dict(
        window=5, obs_drawdown=True, random_start=False, fee=0.001, borrow_rate=0.05, fill=fill
    )
    if sizing == "vol_target":
        kwargs.update(sizing="vol_target", vol_target=0.3, vol_span=30, max_leverage=2.0)
    env = TradingEnv(df, **kwargs)
    start = env.first_valid_index
    actions = rng.integers(0, 3, size=len(df)).tolist()
    obs_a, rew_a, inf_a, _, _ = run_episode(env, actions)
    moved_exposures = 0
    for t in rng.integers(start + 1, len(df) - 2, size=6):
        t = int(t)
        env_b = TradingEnv(perturb_after(df, t, rng), **kwargs)
        assert env_b.first_valid_index == start
        obs_b, rew_b, inf_b, _, _ = run_episode(env_b, actions)
        k = t - start  # obs index k is bar start + k; reward j uses closes start+j, start+j+1
        for j in range(k + 1):
            np.testing.assert_array_equal(obs_a[j], obs_b[j], err_msg=f"obs of bar {start + j}")
        # infos[j + 1] is the step decided at bar start + j: its exposure is fixed by bars <= t
        assert [i["position"] for i in inf_a[: k + 2]] == [i["position"] for i in inf_b[: k + 2]]
        assert rew_a[:k] == rew_b[:k]
        # sanity: the perturbation is visible right after t
        assert not np.array_equal(obs_a[k + 1], obs_b[k + 1]) or rew_a[k] != rew_b[k]
        moved_exposures += inf_a[k + 2]["position"] != inf_b[k + 2]["position"]
    if sizing == "vol_target":  # ... and the sizing of the exposures decided after t
        assert moved_exposures > 0


def test_features_are_causal_row_by_row(googl):
    rng = np.random.default_rng(7)
    base = compute_features(googl).values
    for t in rng.integers(0, len(googl) - 1, size=5):
        pert = compute_features(perturb_after(googl, int(t), rng)).values
        np.testing.assert_array_equal(base[: t + 1], pert[: t + 1])


def test_warmup_rows_are_incomplete_and_then_complete(googl):
    fm = compute_features(googl)
    assert fm.warmup == 20
    assert np.isnan(fm.values[fm.warmup - 1]).any()
    assert np.isfinite(fm.values[fm.warmup :]).all()
    env = TradingEnv(googl, window=10)
    assert env.first_valid_index == fm.warmup + 9


# ----------------------------------------------------------------------------- episodes


def test_evaluation_episode_covers_whole_frame(googl):
    env = TradingEnv(googl, random_start=False, episode_length=10)  # length ignored
    _, rewards, infos, terminated, truncated = run_episode(env, [1] * len(googl))
    assert infos[0]["bar"] == env.first_valid_index
    assert infos[-1]["bar"] == len(googl) - 1
    assert len(rewards) == env.max_episode_steps == len(googl) - 1 - env.first_valid_index
    assert truncated and not terminated
    assert infos[-1]["timestamp"] == googl.index[-1].value
    with pytest.raises(RuntimeError, match="reset"):
        env.step(1)


def test_random_episodes_have_fixed_length_inside_range(googl):
    env = TradingEnv(googl, episode_length=100, start="2012-01-01", end="2014-01-01")
    lo = googl.index.searchsorted(pd.Timestamp("2012-01-01"))
    hi = googl.index.searchsorted(pd.Timestamp("2014-01-01"))
    assert env.trading_range == (lo, hi - 1)
    for seed in range(20):
        _, rewards, infos, terminated, truncated = run_episode(env, [2] * 1000, seed=seed)
        assert len(rewards) == 100 and truncated and not terminated
        assert lo <= infos[0]["bar"] and infos[-1]["bar"] <= hi - 1


def test_same_seed_same_episode_different_seed_different_start(googl):
    env = TradingEnv(googl, window=3)
    actions = np.random.default_rng(0).integers(0, 3, size=300).tolist()
    a = run_episode(env, actions, seed=42)
    b = run_episode(TradingEnv(googl, window=3), actions, seed=42)
    np.testing.assert_array_equal(np.stack(a[0]), np.stack(b[0]))
    assert a[1] == b[1]
    starts = {env.reset(seed=s)[1]["bar"] for s in range(10)}
    assert len(starts) > 1
    assert env.reset(seed=0)[1]["bar"] != env.reset(seed=1)[1]["bar"]
    # unseeded resets continue the seeded stream deterministically
    env.reset(seed=5)
    s1 = [env.reset()[1]["bar"] for _ in range(3)]
    env.reset(seed=5)
    assert [env.reset()[1]["bar"] for _ in range(3)] == s1


def test_test_split_env_warms_up_on_earlier_bars(googl):
    split = default_split(googl)
    lo, hi = index_range(googl, split.test)
    full = TradingEnv(googl, start=lo, end=hi, random_start=False)
    alone = TradingEnv(split.test, random_start=False)
    _, _, infos, _, _ = run_episode(full, [2] * len(googl))
    assert infos[0]["bar"] == lo and infos[-1]["bar"] == hi - 1
    ts = {i["timestamp"] for i in infos}
    assert ts <= set(split.test.index.asi8)
    # without the preceding bars, the first 20 test bars would be lost to warm-up
    assert alone.max_episode_steps == full.max_episode_steps - 20
    # the same bar has the same observation whether the env trades the whole frame or the test part
    whole = TradingEnv(googl, random_start=False)
    obs_whole, _ = whole.reset(options={"start": lo})
    obs_full, _ = full.reset()
    np.testing.assert_array_equal(obs_whole, obs_full)
    # timestamps select the same range as positions
    by_time = TradingEnv(googl, start=split.test.index[0], random_start=False)
    assert by_time.trading_range == full.trading_range


def test_ruin_terminates():
    closes = [100.0 * 0.97**i for i in range(40)]
    env = TradingEnv(
        frame_from_closes(closes), features=("ret_1",), ruin_equity=0.8, random_start=False
    )
    _, _, infos, terminated, truncated = run_episode(env, [2] * 100)
    assert terminated and not truncated
    assert infos[-1]["equity"] <= 0.8 < infos[-2]["equity"]


def test_invalid_configurations(googl):
    short = googl.iloc[:30]
    with pytest.raises(ValueError, match="window"):
        TradingEnv(googl, window=0)
    with pytest.raises(ValueError, match="fee"):
        TradingEnv(googl, fee=-0.1)
    with pytest.raises(ValueError, match="positions"):
        TradingEnv(googl, continuous=True, positions=(0.0, 1.0))
    with pytest.raises(ValueError, match="episode_length"):
        TradingEnv(short, episode_length=252)
    with pytest.raises(ValueError, match=r"warm|no step"):
        TradingEnv(short.iloc[:21], episode_length=None)
    with pytest.raises(ValueError, match="unknown feature"):
        TradingEnv(googl, features=("ret_1", "macd"))
    with pytest.raises(ValueError, match="empty trading range"):
        TradingEnv(googl, start="2015-01-01", end="2014-01-01")
    with pytest.raises(RuntimeError, match="reset"):
        TradingEnv(googl).step(0)


def test_no_global_rng_or_warning_filter_changes(googl):
    np.random.seed(0)
    state = np.random.get_state()[1].copy()
    filters = list(warnings.filters)
    env = TradingEnv(gbm(400, seed=1), episode_length=50)
    run_episode(env, [0, 1, 2] * 30, seed=3)
    assert (np.random.get_state()[1] == state).all()
    assert warnings.filters == filters


def test_observations_are_fresh_arrays(googl):
    env = TradingEnv(googl, random_start=False)
    o0, _ = env.reset()
    keep = o0.copy()
    o1, *_ = env.step(2)
    o1[:] = 0.0  # mutating a returned observation must not leak into the env
    np.testing.assert_array_equal(o0, keep)
    o2, *_ = env.step(2)
    assert np.isfinite(o2).all() and o2[0] != 0.0
