"""InProcessVecEnv behaves exactly like SB3's DummyVecEnv (it only skips the deep copies)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from riskppo.envs.vec.build import InProcessVecEnv


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_same_transitions_as_dummy_vec_env(env_id: str) -> None:
    # CartPole episodes end by termination, Pendulum's by the 200-step time limit: both paths.
    # A 30-step limit on CartPole gives both endings there too.
    wrap = (
        {"wrapper_class": TimeLimit, "wrapper_kwargs": {"max_episode_steps": 30}}
        if env_id == "CartPole-v1"
        else {}
    )
    ref = make_vec_env(env_id, n_envs=4, seed=3, vec_env_cls=DummyVecEnv, **wrap)
    fast = make_vec_env(env_id, n_envs=4, seed=3, vec_env_cls=InProcessVecEnv, **wrap)
    np.testing.assert_array_equal(ref.reset(), fast.reset())
    rng = np.random.default_rng(0)
    seen = {"terminated": 0, "truncated": 0}
    for _ in range(450):
        if env_id == "Pendulum-v1":
            actions = rng.uniform(-2, 2, size=(4, 1)).astype(np.float32)
        else:
            actions = rng.integers(0, 2, size=4)
        o1, r1, d1, i1 = ref.step(actions)
        o2, r2, d2, i2 = fast.step(actions)
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(d1, d2)
        for a, b in zip(i1, i2, strict=True):
            assert a.keys() == b.keys()
            assert a["TimeLimit.truncated"] == b["TimeLimit.truncated"]
            if "terminal_observation" in a:
                np.testing.assert_array_equal(a["terminal_observation"], b["terminal_observation"])
                seen["truncated" if a["TimeLimit.truncated"] else "terminated"] += 1
    assert seen["truncated"] > 0
    if env_id == "CartPole-v1":
        assert seen["terminated"] > 0


def test_infos_of_a_step_are_not_changed_by_later_steps() -> None:
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=InProcessVecEnv)
    venv.reset()
    _, _, _, infos = venv.step(np.zeros(2, dtype=np.int64))
    snapshot = [dict(i) for i in infos]
    for _ in range(50):
        venv.step(np.ones(2, dtype=np.int64))
    assert [dict(i) for i in infos] == snapshot


def test_observations_of_a_step_are_not_changed_by_later_steps() -> None:
    """The observation array returned is a copy, not the env's buffer (the trainer keeps the
    last one as its carry-over observation)."""
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=InProcessVecEnv)
    first = venv.reset()
    kept = first.copy()
    obs, _, _, _ = venv.step(np.zeros(2, dtype=np.int64))
    snapshot = obs.copy()
    for _ in range(5):
        venv.step(np.ones(2, dtype=np.int64))
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(obs, snapshot)
