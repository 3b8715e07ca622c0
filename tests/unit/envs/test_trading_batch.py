"""The batched trading env gives exactly what n separate TradingEnv instances give: the same
observations, rewards, done flags, infos, terminal observations and resets (each env's own
random start), over whole episodes; and training builds it for n_envs > 1 unless told not to."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env

import riskppo.envs.trading.env as trading
from riskppo.envs import TradingEnv, gbm
from riskppo.envs.trading.vec import BatchedTradingVecEnv
from riskppo.envs.vec.build import InProcessVecEnv
from tests.vec_runs import assert_same_run, build_venv, shipped_config


def test_evaluation_part_runs_start_to_end_like_separate_envs() -> None:
    """Evaluation envs (random_start off) are batched too (n_envs up to 4)."""
    cfg = shipped_config("trading_googl.yaml", True)
    ref, fast = build_venv(cfg, False, part="val", n=4), build_venv(cfg, True, part="val", n=4)
    assert isinstance(fast, BatchedTradingVecEnv)
    actions = np.random.default_rng(1).uniform(-1, 1, size=(800, 4, 1)).astype(np.float32)
    assert assert_same_run(ref, fast, actions)["truncated"] >= 8


@pytest.mark.parametrize(
    "kwargs",
    [
        # shorts (borrow costs), discrete actions, ruin, drawdown observed, a delayed fill
        dict(fill="next_close", ruin_equity=0.97, obs_drawdown=True, window=3),
        dict(fill="close", ruin_equity=0.97, episode_length=40, fee=0.002),
        dict(sizing="vol_target", vol_span=20, max_leverage=2.0, ruin_equity=0.95),
    ],
    ids=["next_close", "close", "vol_target"],
)
def test_discrete_shorts_and_ruin_like_separate_envs(kwargs: dict[str, Any]) -> None:
    df = gbm(1500, sigma=0.6, seed=5)
    kwargs = {"episode_length": 120, **kwargs}
    ref = make_vec_env(
        lambda: TradingEnv(df, **kwargs), n_envs=5, seed=11, vec_env_cls=InProcessVecEnv
    )
    fast = BatchedTradingVecEnv(TradingEnv(df, **kwargs), 5)
    fast.seed(11)
    actions = np.random.default_rng(2).integers(0, 3, size=(600, 5))
    ended = assert_same_run(ref, fast, actions)
    assert ended["terminated"] > 0 and ended["truncated"] > 0


def test_windows_gathered_per_step_like_separate_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame too long for the observation table: windows are read from the sliding view."""
    monkeypatch.setattr(trading, "_TABLE_MAX_ELEMENTS", 10)
    df = gbm(800, seed=1)
    kwargs = dict(window=5, continuous=True, episode_length=60)
    ref = make_vec_env(
        lambda: TradingEnv(df, **kwargs), n_envs=3, seed=0, vec_env_cls=InProcessVecEnv
    )
    fast = BatchedTradingVecEnv(TradingEnv(df, **kwargs), 3)
    assert fast.env._table is None
    fast.seed(0)
    actions = np.random.default_rng(3).uniform(-1, 1, size=(200, 3, 1)).astype(np.float32)
    assert assert_same_run(ref, fast, actions)["truncated"] >= 6


def test_bad_actions_name_the_env() -> None:
    df = gbm(600, seed=2)
    box = BatchedTradingVecEnv(TradingEnv(df, continuous=True, episode_length=50), 3)
    box.reset()
    with pytest.raises(ValueError, match=r"^env 1: continuous action is not finite"):
        box.step(np.array([[0.0], [np.nan], [0.5]], dtype=np.float32))
    discrete = BatchedTradingVecEnv(TradingEnv(df, episode_length=50), 3)
    discrete.reset()
    with pytest.raises(ValueError, match=r"^env 2: action 3 is outside \[0, 3\)"):
        discrete.step(np.array([0, 1, 3]))


def test_vectorized_off_or_one_env_steps_separate_envs() -> None:
    cfg = shipped_config("trading_googl.yaml", True)
    assert isinstance(build_venv(cfg, True, n=2), BatchedTradingVecEnv)
    assert isinstance(build_venv(cfg, False, n=2), InProcessVecEnv)
    assert isinstance(build_venv(cfg, True, n=1), InProcessVecEnv)


def test_attributes_are_the_trading_envs() -> None:
    """What the trainer and SB3 read through get_attr: the shared env's settings."""
    cfg = shipped_config("trading_googl.yaml", True)
    venv = build_venv(cfg, True, n=3)
    assert venv.get_attr("render_mode") == [None, None, None]
    (env,) = venv.get_attr("unwrapped", [0])
    assert isinstance(env, TradingEnv) and env.overlay is not None
    with pytest.raises(NotImplementedError, match=r"env\.vectorized: false"):
        venv.env_method("reset")
