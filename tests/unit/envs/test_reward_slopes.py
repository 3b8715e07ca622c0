"""The trading env's reward slopes against finite differences of whole episodes.

``reward_slope`` at step ``k`` plus ``reward_slope_prev`` at step ``k + 1`` must be the derivative
of the episode's total reward with respect to the action of step ``k`` — measured here by moving
that one action by ``±h`` and replaying the episode (an independent reference: nothing of the
env's slope code runs in it)."""

from __future__ import annotations

import numpy as np
import pytest

from riskppo.envs import TradingEnv
from riskppo.envs.market.planted import ar_market
from riskppo.envs.trading.batch import TradingBatch


@pytest.fixture(scope="module")
def bars():
    df, _ = ar_market(400, phi=0.1, seed=3)
    return df


def _episode(env: TradingEnv, actions: np.ndarray) -> tuple[float, list[dict]]:
    env.reset(options={"start": 100})
    total, infos = 0.0, []
    for a in actions:
        _, r, term, trunc, info = env.step(np.array([a], dtype=np.float32))
        total += float(r)
        infos.append(info)
        if term or trunc:
            break
    return total, infos


def _total_slopes(infos: list[dict]) -> np.ndarray:
    now = np.array([i["reward_slope"] for i in infos])
    prev = np.array([i["reward_slope_prev"] for i in infos])
    return now + np.concatenate((prev[1:], [0.0]))


SETTINGS = [
    {"long_only": True, "min_signal": 0.25, "sizing": "vol_target", "fill": "next_open"},
    {"long_only": False, "sizing": "vol_target", "fill": "next_close", "borrow_rate": 0.05},
    {"long_only": False, "sizing": "none", "fill": "next_open", "borrow_rate": 0.05},
    {"long_only": True, "min_signal": 0.0, "sizing": "vol_target", "fill": "close"},
]


@pytest.mark.parametrize("kwargs", SETTINGS)
def test_slopes_are_the_episode_returns_derivative(bars, kwargs):
    env = TradingEnv(bars, continuous=True, fee=0.002, random_start=False, reward_scale=3.0,
                     **kwargs)  # fmt: skip
    rng = np.random.default_rng(0)
    actions = rng.uniform(-0.9, 0.9, size=60).astype(np.float32).astype(np.float64)
    _, infos = _episode(env, actions)
    slopes = _total_slopes(infos)
    h = 1e-4
    for k in range(0, 59, 7):  # the last decision's next step is not in the episode
        up, down = actions.copy(), actions.copy()
        up[k] += h
        down[k] -= h
        fd = (_episode(env, up)[0] - _episode(env, down)[0]) / (2 * h)
        assert slopes[k] == pytest.approx(fd, rel=2e-3, abs=1e-7), (k, kwargs)
    assert np.abs(slopes).max() > 0


def test_clipped_actions_and_capped_positions_have_no_slope(bars):
    env = TradingEnv(bars, continuous=True, random_start=False, sizing="vol_target",
                     overlay={"limit": -0.001, "horizon": 20})  # fmt: skip
    _, infos = _episode(env, np.array([1.5, -2.0, 1.0, -1.0, 0.3]))
    assert [i["reward_slope"] for i in infos[:4]] == [0.0] * 4
    assert all(i["reward_slope_prev"] == 0.0 for i in infos[1:5])  # nothing to move before
    # a tight overlay caps the position: the action moves nothing
    capped = [i for i in infos if abs(i["position"]) < abs(i["signal"]) * 1.0]
    assert capped and all(i["reward_slope"] == 0.0 for i in capped)


def test_the_batch_reports_the_single_envs_slopes(bars):
    kwargs = {"continuous": True, "long_only": True, "min_signal": 0.25, "fee": 0.001,
              "sizing": "vol_target", "random_start": False}  # fmt: skip
    single = TradingEnv(bars, **kwargs)
    batch = TradingBatch(TradingEnv(bars, **kwargs), 3)
    rng = np.random.default_rng(1)
    actions = rng.uniform(-1.2, 1.2, size=(40, 3)).astype(np.float32)
    for i in range(3):
        batch.reset(i, options={"start": 100})
    steps = [batch.step(actions[t][:, None]) for t in range(40)]
    for i in range(3):
        _, infos = _episode(single, actions[:, i].astype(np.float64))
        for t, info in enumerate(infos):
            got = steps[t].infos[i]
            assert got["reward_slope"] == info["reward_slope"]
            assert got["reward_slope_prev"] == info["reward_slope_prev"]
