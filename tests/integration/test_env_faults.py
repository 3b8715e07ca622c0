"""Env faults (R-REL-5) with real env classes, in-process and in subprocess
workers: a reward or an observation of the wrong kind names env, step and field; a hanging env
under ``vec_env: subproc`` with ``env.step_timeout`` stops with an error naming it."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from riskppo.config import EnvConfig
from riskppo.envs.vec.build import EnvOutputError, ObservationError, build_vec_env

# Observations of the wrong kind, each with what the error must say about it.
BAD_OBS: dict[str, tuple[Any, str]] = {
    "obs_none": (None, "observation of shape (), but its observation_space has shape (2,)"),
    "obs_shape": (np.zeros(3), "observation of shape (3,), but its observation_space has shape"),
    "obs_str": ("up", "observation of shape (), but its observation_space has shape (2,)"),
    "obs_text": (np.array(["a", "b"]), "non-numeric observation"),
    "obs_ragged": ([[1.0], [1.0, 2.0]], "observation of shape None"),
}


def bad_env(kind: str, dtype: Any = np.float32) -> type[gym.Env]:
    """Env 1 of 2 misbehaves at its third step, or with ``reset_*`` kinds at its first reset
    (defined in a function: pickled by value)."""

    class Bad(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), dtype)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            super().reset(seed=seed)
            self.t = 0
            if kind.startswith("reset_") and seed_of(self) == 1:
                return BAD_OBS[kind.removeprefix("reset_")][0], {}
            return np.zeros(2, dtype), {}

        def step(self, action: Any) -> Any:
            self.t += 1
            reward: Any = np.float32(1.0)
            obs: Any = np.zeros(2, dtype)
            terminated = False
            if self.t == 3 and seed_of(self) == 1:
                if kind.startswith(("obs_", "terminal_")):
                    obs = BAD_OBS[kind.replace("terminal_", "obs_")][0]
                    terminated = kind.startswith("terminal_")
                else:
                    reward = {"none": None, "array": np.array([1.0, 2.0]), "hang": 0.0}[kind]
                if kind == "hang":
                    time.sleep(3600)
            return obs, reward, terminated, False, {}

    return Bad


def seed_of(env: gym.Env) -> int:
    return int(env.np_random_seed or 0) - 100


def steps(cfg: EnvConfig, kind: str, n: int = 5, dtype: Any = np.float32) -> None:
    venv = build_vec_env(bad_env(kind, dtype), cfg, seed=100)
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


@pytest.mark.parametrize("vec_env", ["dummy", "subproc"])
@pytest.mark.parametrize("kind", sorted(BAD_OBS))
def test_observation_of_wrong_kind_names_env_step_field(vec_env: str, kind: str) -> None:
    for policy in ("raise", "skip"):  # never skipped or zeroed: it is a bug, not a NaN
        cfg = EnvConfig(id="x", n_envs=2, vec_env=vec_env, nonfinite_policy=policy)
        with pytest.raises(ObservationError) as err:
            steps(cfg, kind)
        msg = str(err.value)
        assert msg.startswith("env 1 (<Bad instance>) step() returned"), msg
        assert BAD_OBS[kind][1] in msg and "field 'observation'" in msg, msg
        assert "at step 3 of its episode, at vec step 3;" in msg, msg
        assert isinstance(err.value, ValueError)  # what it was before it named env and step


@pytest.mark.parametrize(
    ("kind", "dtype", "vec_env"),
    [
        ("reset_obs_none", np.float32, "dummy"),
        ("reset_obs_text", np.float32, "subproc"),
        ("reset_obs_shape", np.int64, "dummy"),  # no NaN in an integer space: notes read
        ("terminal_none", np.float32, "dummy"),  # the step that ends the episode
        ("terminal_none", np.float32, "subproc"),
        ("obs_str", np.int64, "subproc"),
    ],
)
def test_bad_observation_at_reset_episode_end_or_in_integer_space(
    kind: str, dtype: Any, vec_env: str
) -> None:
    cfg = EnvConfig(id="x", n_envs=2, vec_env=vec_env, normalize_obs=False)
    with pytest.raises(ObservationError) as err:
        steps(cfg, kind, dtype=dtype)
    msg = str(err.value)
    if kind.startswith("reset_"):
        assert msg.startswith("env 1 (<Bad instance>) reset() returned"), msg
        assert "at reset, at vec step 0; reset() must return" in msg, msg
    else:
        assert msg.startswith("env 1 (<Bad instance>) step() returned"), msg
        assert "at step 3 of its episode, at vec step 3;" in msg, msg


def test_one_element_array_reward_is_accepted() -> None:
    from riskppo.envs.vec.build import OutputCheck

    env = OutputCheck(bad_env("none")())
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
