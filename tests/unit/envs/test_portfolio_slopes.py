"""The portfolio env's reward slopes (``reward_slopes=True``) against central finite differences
of the rewards the env itself books: each action's slope of this step's reward and of the next
step's, under every part of the position map (softmax or gross-capped weights, volatility
targeting at and below the leverage cap, the overlay's cap in both modes, the exposure signal)
and both fill timings, fees, borrow and a reward scale."""

from __future__ import annotations

import numpy as np
import pytest

from riskppo.envs.portfolio.env import PortfolioEnv
from tests.unit.envs.test_portfolio_env import _data, _walk

FEATS = ("ret_1", "vret_5")
EPS = 1e-6


def _opens(closes: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 100)
    prev = np.vstack([closes[:1], closes[:-1]])
    return prev * np.exp(rng.normal(0, 0.004, closes.shape))


def _env(opens: bool, **kw: object) -> PortfolioEnv:
    closes = _walk(400, 4, seed=1)
    data = _data(closes, _opens(closes, 1) if opens else None)
    kw = {"features": FEATS, "vol_span": 20, "episode_length": None, "random_start": False, **kw}
    return PortfolioEnv(data, reward_slopes=True, **kw)  # type: ignore[arg-type]


def _run(env: PortfolioEnv, actions: np.ndarray) -> tuple[np.ndarray, list[dict]]:
    env.reset(options={"start": 300})
    rewards, infos = [], []
    for a in actions:
        _, r, _, _, info = env.step(a)
        rewards.append(float(r))
        infos.append(info)
    return np.array(rewards), infos


CASES = {
    "long-only, vol target, next close": (False, {}),
    "long-only, leverage cap binds": (False, {"vol_target": 5.0, "max_leverage": 1.5}),
    "long-only, overlay scale, exposure signal, next open": (
        True,
        dict(
            exposure_signal=True,
            min_signal=0.25,
            overlay={"limit": -0.02, "min_history": 50, "mode": "scale"},
        ),
    ),
    "long-short, overlay clip, exposure signal, borrow, next open": (
        True,
        dict(
            long_only=False,
            max_gross=1.5,
            exposure_signal=True,
            borrow_rate=0.5,
            overlay={"limit": -0.03, "min_history": 50},
            reward_scale=10.0,
        ),
    ),
    "long-short, no sizing, next close, borrow": (
        False,
        dict(long_only=False, sizing="none", borrow_rate=0.5, fee=0.002),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_slopes_are_the_rewards_finite_differences(case: str) -> None:
    opens, kw = CASES[case]
    env = _env(opens, **kw)
    a_dim = env.action_space.shape[0]
    actions = np.random.default_rng(3).uniform(-0.9, 0.9, (12, a_dim))
    _, infos = _run(env, actions)
    checked = 0
    for t in (2, 5, 9):
        for j in range(a_dim):
            up, down = actions.copy(), actions.copy()
            up[t, j] += EPS
            down[t, j] -= EPS
            fd = (_run(env, up)[0] - _run(env, down)[0]) / (2 * EPS)
            assert np.allclose(fd[:t], 0.0) and np.allclose(fd[t + 2 :], 0.0, atol=1e-7)
            now, nxt = infos[t]["reward_slope"][j], infos[t + 1]["reward_slope_prev"][j]
            assert now == pytest.approx(fd[t], rel=1e-4, abs=1e-7), (t, j)
            assert nxt == pytest.approx(fd[t + 1], rel=1e-4, abs=1e-7), (t, j)
            checked += abs(fd[t]) > 1e-4
    assert checked >= a_dim  # the slopes checked are not all zero
    assert np.all(infos[0]["reward_slope_prev"] == 0.0)  # nothing was held before the episode


def test_an_action_outside_the_box_has_slope_zero() -> None:
    env = _env(True, exposure_signal=True)
    a = np.array([1.5, 0.2, -0.3, 0.1, 2.0])  # the first weight and the exposure clipped
    _, infos = _run(env, np.stack([a, a * 0.5]))
    slope = infos[0]["reward_slope"]
    assert slope[0] == 0.0 and slope[4] == 0.0 and np.all(slope[1:4] != 0.0)


def test_off_by_default_and_the_rewards_do_not_change() -> None:
    closes = _walk(400, 4, seed=1)
    actions = np.random.default_rng(0).uniform(-1, 1, (20, 4))
    plain = PortfolioEnv(_data(closes), features=FEATS, vol_span=20, random_start=False)
    with_slopes = PortfolioEnv(
        _data(closes), features=FEATS, vol_span=20, random_start=False, reward_slopes=True
    )
    got = []
    for env in (plain, with_slopes):
        env.reset(options={"start": 300})
        got.append([env.step(a)[1:] for a in actions])
    assert "reward_slope" not in got[0][0][3]
    assert [g[0] for g in got[0]] == [g[0] for g in got[1]]
