"""The batched trading env gives exactly what n separate TradingEnv instances give: the same
observations, rewards, done flags, infos, terminal observations and resets (each env's own
random start), over whole episodes; and training builds it for n_envs > 1 unless told not to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

import riskppo.envs.trading as trading
from riskppo.config import Config
from riskppo.envs import TradingEnv, gbm
from riskppo.envs.registration import TRADING_ID
from riskppo.envs.trading_vec import BatchedTradingVecEnv
from riskppo.envs.vec import InProcessVecEnv, build_vec_env
from tests.vec_runs import assert_same_run

CONFIGS = Path(__file__).resolve().parents[3] / "riskppo" / "configs"


def _config(name: str, overlay: bool, **env: Any) -> Config:
    cfg = Config.from_yaml(CONFIGS / name)
    kwargs = dict(cfg.env.kwargs)
    if not overlay:
        kwargs.pop("overlay", None)
    update = {"kwargs": kwargs, "normalize_obs": False, **env}
    return cfg.model_copy(update={"env": cfg.env.model_copy(update=update)})


def _build(cfg: Config, vectorized: bool, part: str = "train", n: int = 8) -> VecEnv:
    env = cfg.env.model_copy(update={"vectorized": vectorized})
    venv = build_vec_env(cfg.env.id, env, 3, cfg.data, part=part, n_envs=n, risk=cfg.risk)
    return venv.venv  # below VecFiniteGuard


@pytest.mark.parametrize("overlay", [True, False], ids=["overlay", "no-overlay"])
@pytest.mark.parametrize("name", ["trading_googl.yaml", "trading_eurusd.yaml"])
def test_shipped_configs_batched_like_separate_envs(name: str, overlay: bool) -> None:
    cfg = _config(name, overlay)
    ref, fast = _build(cfg, False), _build(cfg, True)
    assert isinstance(ref, InProcessVecEnv) and isinstance(fast, BatchedTradingVecEnv)
    # beyond [-1, 1] too (clipped); two episodes and some of a third per env
    steps = int(2.2 * cfg.env.kwargs["episode_length"])
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1.3, 1.3, size=(steps, 8, 1)).astype(np.float32)
    ended = assert_same_run(ref, fast, actions)
    assert ended["truncated"] >= 16


def test_evaluation_part_runs_start_to_end_like_separate_envs() -> None:
    """Evaluation envs (random_start off) are batched too (n_envs up to 4)."""
    cfg = _config("trading_googl.yaml", True)
    ref, fast = _build(cfg, False, part="val", n=4), _build(cfg, True, part="val", n=4)
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
    cfg = _config("trading_googl.yaml", True)
    assert isinstance(_build(cfg, True, n=2), BatchedTradingVecEnv)
    assert isinstance(_build(cfg, False, n=2), InProcessVecEnv)
    assert isinstance(_build(cfg, True, n=1), InProcessVecEnv)


@pytest.mark.slow
def test_subprocesses_step_separate_envs() -> None:
    cfg = _config("trading_googl.yaml", True)
    sub = cfg.env.model_copy(update={"vec_env": "subproc", "n_envs": 2})
    venv = build_vec_env(TRADING_ID, sub, 0, cfg.data, risk=cfg.risk)
    assert not isinstance(venv.venv, BatchedTradingVecEnv)
    venv.close()


def test_attributes_are_the_trading_envs() -> None:
    """What the trainer and SB3 read through get_attr: the shared env's settings."""
    cfg = _config("trading_googl.yaml", True)
    venv = _build(cfg, True, n=3)
    assert venv.get_attr("render_mode") == [None, None, None]
    (env,) = venv.get_attr("unwrapped", [0])
    assert isinstance(env, TradingEnv) and env.overlay is not None
    with pytest.raises(NotImplementedError, match=r"env\.vectorized: false"):
        venv.env_method("reset")
