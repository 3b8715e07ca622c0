"""The batched trading env on the shipped configs, over whole episodes, gives what separate
TradingEnv instances give; and SubprocVecEnv workers step separate envs."""

from __future__ import annotations

import numpy as np
import pytest

from riskppo.envs.registration import TRADING_ID
from riskppo.envs.trading.vec import BatchedTradingVecEnv
from riskppo.envs.vec.build import InProcessVecEnv, build_vec_env
from tests.vec_runs import assert_same_run, build_venv, shipped_config


@pytest.mark.parametrize("overlay", [True, False], ids=["overlay", "no-overlay"])
@pytest.mark.parametrize("name", ["trading_googl.yaml", "trading_eurusd.yaml"])
def test_shipped_configs_batched_like_separate_envs(name: str, overlay: bool) -> None:
    cfg = shipped_config(name, overlay)
    ref, fast = build_venv(cfg, False), build_venv(cfg, True)
    assert isinstance(ref, InProcessVecEnv) and isinstance(fast, BatchedTradingVecEnv)
    # beyond [-1, 1] too (clipped); two episodes and some of a third per env
    steps = int(2.2 * cfg.env.kwargs["episode_length"])
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1.3, 1.3, size=(steps, 8, 1)).astype(np.float32)
    ended = assert_same_run(ref, fast, actions)
    assert ended["truncated"] >= 16


@pytest.mark.slow
def test_subprocesses_step_separate_envs() -> None:
    cfg = shipped_config("trading_googl.yaml", True)
    sub = cfg.env.model_copy(update={"vec_env": "subproc", "n_envs": 2})
    venv = build_vec_env(TRADING_ID, sub, 0, cfg.data, risk=cfg.risk)
    assert not isinstance(venv.venv, BatchedTradingVecEnv)
    venv.close()
