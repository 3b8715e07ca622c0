"""Gymnasium vector envs give riskppo's own vec env's transitions: in NEXT_STEP, SAME_STEP and
DISABLED autoreset modes, the same observations (episode starts), terminal observations,
truncation flags, rewards and episode statistics over the same seeds."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import TimeLimit
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

from riskppo.agent import DistributionalPPO
from riskppo.config import EnvConfig
from riskppo.envs.vec.build import InProcessVecEnv, build_vec_env
from riskppo.envs.vec.gym_vector import GymVectorVecEnv, resets_single_envs, unbatch_infos
from riskppo.envs.vec.native import native_vec_env
from tests.vec_runs import assert_same_run

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


class StepCount(gym.Wrapper):
    """Reports its step count in every info (0 in the reset's), so infos can be told apart."""

    def reset(self, **kwargs: Any) -> Any:
        self.steps = 0
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "steps": 0}

    def step(self, action: Any) -> Any:
        self.steps += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "steps": self.steps}


def _limit30(env: gym.Env) -> gym.Env:
    return StepCount(TimeLimit(env, 30))


def _pair(env_id: str, mode: AutoresetMode, n: int = 4) -> tuple[VecEnv, VecEnv]:
    """riskppo's vec env and a Gymnasium SyncVectorEnv in ``mode``, both seeded 3. CartPole
    gets a 30-step limit: episodes end by termination and by truncation."""
    wrap = _limit30 if env_id == "CartPole-v1" else None
    ref = make_vec_env(
        lambda: wrap(gym.make(env_id)) if wrap else gym.make(env_id),
        n_envs=n,
        seed=3,
        vec_env_cls=InProcessVecEnv,
    )
    vec = gym.make_vec(
        env_id,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        wrappers=[wrap] if wrap else None,
    )
    venv = GymVectorVecEnv(vec)
    venv.seed(3)
    return ref, venv


def _actions(env_id: str, steps: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    if env_id == "Pendulum-v1":
        return rng.uniform(-2, 2, size=(steps, n, 1)).astype(np.float32)
    return rng.integers(0, 2, size=(steps, n))


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_sync_vector_env_gives_riskppos_transitions(env_id: str, mode: AutoresetMode) -> None:
    ref, venv = _pair(env_id, mode)
    ended = assert_same_run(ref, venv, _actions(env_id, 450, 4))
    assert ended["truncated"] > 0  # Pendulum: its 200-step limit
    if env_id == "CartPole-v1":
        assert ended["terminated"] > 0


def test_built_from_a_vector_env_instance() -> None:
    """build_vec_env takes a VectorEnv (gymnasium.make_vec's default for CartPole, its native
    vector env, is given single resets: tests/unit/envs/test_cartpole_vec.py)."""
    vec = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    venv = build_vec_env(vec, EnvConfig(), seed=3)
    ref = build_vec_env("CartPole-v1", EnvConfig(n_envs=3), seed=3)
    assert_same_run(ref, venv, _actions("CartPole-v1", 60, 3))
    raw = EnvConfig(normalize_obs=False)
    native = build_vec_env(gym.make_vec("CartPole-v1", num_envs=3), raw, seed=0)
    assert isinstance(native.venv, GymVectorVecEnv)


def test_native_vector_env_that_cannot_reset_single_envs_is_not_used() -> None:
    """Gymnasium's CartPoleVectorEnv autoresets on the next step only and draws every env's
    states from one generator: for the id riskppo steps separate envs, whose episodes are those
    of SB3's vec env with the same seed."""
    vec = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point")
    assert not resets_single_envs(vec)
    assert native_vec_env("CartPole-v1", 3, {}) is None


def _sync_cartpoles(num_envs: int, **kwargs: Any) -> SyncVectorEnv:
    return SyncVectorEnv(
        [lambda: TimeLimit(CartPoleEnv(**kwargs), 30) for _ in range(num_envs)],
        autoreset_mode=AutoresetMode.NEXT_STEP,
    )


def test_an_ids_vector_entry_point_is_used_natively() -> None:
    gym.register(
        "RiskppoTestVecCart-v0",
        entry_point=lambda: TimeLimit(CartPoleEnv(), 30),
        vector_entry_point=_sync_cartpoles,
    )
    try:
        on = EnvConfig(n_envs=4, normalize_obs=False)
        venv = build_vec_env("RiskppoTestVecCart-v0", on, seed=3).venv
        off = EnvConfig(n_envs=4, vectorized=False, normalize_obs=False)
        ref = build_vec_env("RiskppoTestVecCart-v0", off, seed=3).venv
    finally:
        gym.registry.pop("RiskppoTestVecCart-v0")
    assert isinstance(venv, GymVectorVecEnv) and isinstance(ref, InProcessVecEnv)
    assert assert_same_run(ref, venv, _actions("CartPole-v1", 120, 4))["truncated"] > 0


def test_unbatch_infos() -> None:
    infos = {
        "a": np.array([1, 0, 3]),
        "_a": np.array([True, False, True]),
        "d": {"x": np.array([0.5, 0.0, 0.0]), "_x": np.array([True, False, False])},
        "_d": np.array([True, False, False]),
    }
    assert unbatch_infos(infos, 3) == [{"a": 1, "d": {"x": 0.5}}, {}, {"a": 3}]


def test_training_on_a_vector_env_is_training_on_its_id() -> None:
    """DistributionalPPO takes a Gymnasium vector env: the same seed trains the same weights as
    the id stepped by riskppo's own vec env."""
    small = dict(n_envs=2, n_steps=16, batch_size=32, bptt_len=8, n_epochs=1, lstm_hidden_size=16)
    vec = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    on_vec = DistributionalPPO(vec, seed=0, **small).learn(64)
    on_id = DistributionalPPO("CartPole-v1", seed=0, **small).learn(64)
    for (name, a), b in zip(
        on_vec.policy.state_dict().items(), on_id.policy.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_attributes_and_methods_reach_every_env() -> None:
    vec = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    venv = build_vec_env(vec, EnvConfig(), seed=0).venv
    venv.set_attr("spam", 3)
    assert venv.get_attr("spam") == [3, 3] and venv.get_attr("spam", [1]) == [3]
    assert len(venv.env_method("get_wrapper_attr", "spam")) == 2
    with pytest.raises(NotImplementedError, match="leave indices out"):
        venv.env_method("reset", indices=[0])
