"""Gymnasium's natively vectorised CartPole, given single-env resets: riskppo steps it with SB3's
semantics, each env following CartPole's own physics from the states it is reset to."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

from riskppo.agent import DistributionalPPO
from riskppo.config import ConfigError, EnvConfig
from riskppo.envs.vec.build import build_vec_env
from riskppo.envs.vec.cartpole import CartPoleSingleResets, with_single_resets
from riskppo.envs.vec.gym_vector import GymVectorVecEnv, resets_single_envs

N, LIMIT = 5, 40


def _native(n: int = N) -> CartPoleVectorEnv:
    return gym.make_vec(
        "CartPole-v1", n, vectorization_mode="vector_entry_point", max_episode_steps=LIMIT
    )


def _singles(vec: CartPoleVectorEnv) -> list[CartPoleEnv]:
    """One CartPoleEnv per env of ``vec``, each put in that env's current state."""
    out = []
    for i in range(vec.num_envs):
        env = CartPoleEnv()
        env.reset(seed=0)
        env.state = vec.state[:, i].copy()
        out.append(env)
    return out


def test_each_env_follows_cartpoles_physics_across_resets() -> None:
    """Step for step, every env equals a single CartPoleEnv started where it was reset; an
    ended episode's terminal observation is its last one, the returned one a fresh start, and
    no action is ignored after a reset (Gymnasium's NEXT_STEP mode would ignore it)."""
    native = _native()
    venv = GymVectorVecEnv(with_single_resets(native))
    venv.seed(3)
    venv.reset()
    ref, steps = _singles(native), np.zeros(N, dtype=int)
    rng = np.random.default_rng(0)
    ended = {"terminated": 0, "truncated": 0}
    for _ in range(300):
        a = rng.integers(0, 2, N)
        obs, rewards, dones, infos = venv.step(a)
        np.testing.assert_array_equal(rewards, np.ones(N, dtype=np.float32))
        steps += 1
        for i in range(N):
            r_obs, _, r_term, _, _ = ref[i].step(int(a[i]))
            last = infos[i]["terminal_observation"] if dones[i] else obs[i]
            np.testing.assert_allclose(last, r_obs, rtol=1e-6, atol=1e-7)
            assert dones[i] == (r_term or steps[i] == LIMIT)
            if dones[i]:
                assert infos[i]["TimeLimit.truncated"] == (not r_term)
                ended["truncated" if not r_term else "terminated"] += 1
                assert np.all(np.abs(obs[i]) <= 0.05)  # a fresh start
                assert infos[i]["episode"]["l"] == steps[i]
                ref[i].state, steps[i] = native.state[:, i].copy(), 0
                ref[i].steps_beyond_terminated = None
    assert ended["terminated"] > 0 and ended["truncated"] > 0


def test_a_masked_reset_resets_only_the_masked_envs() -> None:
    env = CartPoleSingleResets(_native())
    env.reset(seed=1)
    moved, *_ = env.step(np.ones(N, dtype=np.int64))
    mask = np.array([True, False, True, False, False])
    after, _ = env.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(after[~mask], moved[~mask])
    assert not np.array_equal(after[mask], moved[mask]) and np.all(np.abs(after[mask]) <= 0.05)
    assert env.unwrapped.steps[mask].tolist() == [0, 0] and not env.unwrapped.prev_done.any()
    assert resets_single_envs(CartPoleSingleResets(_native()))
    with pytest.raises(ValueError, match="reset_mask of shape"):
        env.reset(options={"reset_mask": mask[:3]})
    with pytest.raises(ValueError, match="takes no seed"):
        env.reset(seed=0, options={"reset_mask": mask})


def test_the_same_seed_gives_the_same_episodes() -> None:
    runs = []
    for _ in range(2):
        venv = build_vec_env(_native(), EnvConfig(), seed=7)
        venv.reset()
        rng = np.random.default_rng(1)
        runs.append([venv.step(rng.integers(0, 2, N))[0] for _ in range(80)])
    np.testing.assert_array_equal(np.stack(runs[0]), np.stack(runs[1]))


def test_a_users_native_cartpole_vector_env_trains() -> None:
    model = DistributionalPPO(_native(4), n_steps=32, batch_size=64, seed=0)
    try:
        model.learn(256)
        assert model.num_timesteps == 256
    finally:
        model.close()


def test_other_vector_envs_that_cannot_reset_single_envs_are_refused_in_one_line() -> None:
    class OwnCartPoles(CartPoleVectorEnv):  # not Gymnasium's own class: not wrapped
        pass

    vec = OwnCartPoles(num_envs=3)
    assert GymVectorVecEnv(CartPoleSingleResets(_native())).get_attr("render_mode") == [None] * N
    assert with_single_resets(vec) is vec
    with pytest.raises(ConfigError, match=r"^env: .*OwnCartPoles.*vectorization_mode='sync'"):
        build_vec_env(vec, EnvConfig(), seed=0)
