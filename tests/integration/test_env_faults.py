"""Env faults (R-REL-5, issue 16 item 7) with real env classes, in-process and in subprocess
workers: a reward of the wrong kind names env, step and field; a hanging env under
``vec_env: subproc`` with ``env.step_timeout`` stops with an error naming it."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from riskppo.config import EnvConfig
from riskppo.train.vec_env import EnvOutputError, build_vec_env


def bad_env(kind: str) -> type[gym.Env]:
    """Env 1 of 2 misbehaves at its third step (defined in a function: pickled by value)."""

    class Bad(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, action: Any) -> Any:
            self.t += 1
            reward: Any = np.float32(1.0)
            if self.t == 3 and seed_of(self) == 1:
                reward = {"none": None, "array": np.array([1.0, 2.0]), "hang": 0.0}[kind]
                if kind == "hang":
                    time.sleep(3600)
            return np.zeros(2, np.float32), reward, False, False, {}

    return Bad


def seed_of(env: gym.Env) -> int:
    return int(env.np_random_seed or 0) - 100


def steps(cfg: EnvConfig, kind: str, n: int = 5) -> None:
    venv = build_vec_env(bad_env(kind), cfg, seed=100)
    try:
        venv.reset()
        for _ in range(n):
            venv.step(np.zeros(2, dtype=np.int64))
    finally:
        venv.close()


@pytest.mark.parametrize("vec_env", ["dummy", "subproc"])
@pytest.mark.parametrize("kind", ["none", "array"])
def test_reward_of_wrong_kind_names_env_step_field(vec_env: str, kind: str) -> None:
    for policy in ("raise", "skip"):  # never skipped: it is a bug, not a NaN
        cfg = EnvConfig(id="x", n_envs=2, vec_env=vec_env, nonfinite_policy=policy)
        with pytest.raises(EnvOutputError) as err:
            steps(cfg, kind)
        msg = str(err.value)
        assert msg.startswith("env 1 "), msg
        assert "field 'reward'" in msg and "step 3 of its episode" in msg, msg
        assert "vec step 3" in msg, msg
        assert ("None (NoneType)" if kind == "none" else "shape (2,)") in msg, msg


def test_one_element_array_reward_is_accepted() -> None:
    from riskppo.train.vec_env import RewardCheck

    env = RewardCheck(bad_env("none")())
    env.reset(seed=5)
    info: dict[str, Any] = {}
    assert env._check_reward(np.array([2.5]), info) == 2.5 and not info


def test_hanging_env_under_subproc_times_out() -> None:
    cfg = EnvConfig(id="x", n_envs=2, vec_env="subproc", step_timeout=1.0)
    start = time.monotonic()
    with pytest.raises(EnvOutputError, match=r"^env 1 did not return from step\(\) within"):
        steps(cfg, "hang")
    assert time.monotonic() - start < 60


def test_step_timeout_needs_subproc() -> None:
    with pytest.raises(ValueError, match=r"step_timeout needs env\.vec_env: subproc"):
        EnvConfig(id="x", step_timeout=1.0)
    with pytest.raises(ValueError):
        EnvConfig(id="x", vec_env="subproc", step_timeout=0)
