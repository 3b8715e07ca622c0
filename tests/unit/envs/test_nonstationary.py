"""NonStationaryCartPole: a valid Gymnasium env whose phase changes the dynamics as documented."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_util import make_vec_env

from riskppo.envs.tasks.nonstationary import NonStationaryCartPole, phase_transform


def rollout(env, actions, seed=0):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, *_ = env.step(a)
        out.append(obs)
    return np.stack(out)


@pytest.mark.parametrize("mode", ["obs", "action", "both"])
@pytest.mark.parametrize("phase", [0, 1, 4])
def test_env_checker_passes(mode, phase):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*render.*")  # no spec: render modes untested
        check_env(NonStationaryCartPole(phase, mode=mode, task_seed=3), skip_render_check=True)


def test_phase_zero_is_plain_cartpole():
    env, ref = NonStationaryCartPole(), CartPoleEnv()
    actions = [0, 1, 1, 0, 1, 0, 0, 1]
    a = rollout(env, actions)
    ref.reset(seed=0)
    b = [ref.reset(seed=0)[0]] + [ref.step(x)[0] for x in actions]
    np.testing.assert_array_equal(a, np.stack(b))


@pytest.mark.parametrize("mode", ["obs", "action", "both"])
def test_phase_recodes_observations_and_actions_as_documented(mode):
    plain = NonStationaryCartPole(mode=mode)
    env = NonStationaryCartPole(mode=mode, task_seed=5)
    actions = [1, 1, 0, 1, 0, 0, 1, 0, 0, 1]
    for k in range(1, 6):
        env.set_phase(k)
        t = phase_transform(5, k, mode)
        assert env.transform == t and env.phase == k
        assert t.invert == (mode != "obs" and k % 2 == 1)
        if mode == "action":
            assert t.perm == (0, 1, 2, 3) and t.signs == (1.0,) * 4
        physical = [1 - a for a in actions] if t.invert else actions
        s = rollout(plain, physical, seed=k)  # plain CartPole states
        obs = rollout(env, actions, seed=k)
        np.testing.assert_allclose(obs, np.asarray(t.signs, np.float32) * s[:, list(t.perm)])


def test_consecutive_phases_are_different_tasks():
    for seed in range(20):
        for k in range(1, 12):
            prev, cur = phase_transform(seed, k - 1), phase_transform(seed, k)
            assert cur.invert != prev.invert  # mode "both": actions flip at every switch
            mirrored = tuple(-s for s in prev.signs)
            # not the same task and not its mirror image (CartPole is left-right symmetric)
            assert (cur.perm, cur.signs) != (prev.perm, mirrored)
    assert phase_transform(0, 0) == ((0, 1, 2, 3), (1.0,) * 4, False)
    assert len({phase_transform(0, k)[:2] for k in range(1, 10)}) > 3


def test_switch_takes_effect_mid_episode_and_survives_reset():
    env = NonStationaryCartPole(task_seed=1)
    env.reset(seed=0)
    env.step(1)
    state = np.asarray(env.state, dtype=np.float32)
    env.set_phase(2)
    t = env.transform
    # the physical state is untouched, only the coding changes
    np.testing.assert_allclose(env._observe(), np.asarray(t.signs) * state[list(t.perm)])
    _, _, _, _, info = env.step(0)
    assert info["phase"] == 2
    _, info = env.reset()
    assert info["phase"] == 2 and env.phase == 2


def test_truncation_at_max_episode_steps():
    env = NonStationaryCartPole(max_episode_steps=5)
    env.reset(seed=0)
    flags = [env.step(i % 2)[2:4] for i in range(5)]
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])
    env.reset()
    assert env.step(0)[3] is False


def test_seeding_is_reproducible():
    actions = [0, 1] * 10
    a = rollout(NonStationaryCartPole(3, task_seed=2), actions, seed=7)
    b = rollout(NonStationaryCartPole(3, task_seed=2), actions, seed=7)
    c = rollout(NonStationaryCartPole(3, task_seed=2), actions, seed=8)
    d = rollout(NonStationaryCartPole(3, task_seed=9), actions, seed=7)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)  # episode seed changes the initial state
    assert not np.allclose(a, d)  # task seed changes the coding


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="mode"):
        NonStationaryCartPole(mode="reward")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="phase"):
        NonStationaryCartPole(-1)
    with pytest.raises(ValueError, match="max_episode_steps"):
        NonStationaryCartPole(max_episode_steps=0)
    env = NonStationaryCartPole()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="valid action"):
        env.step(2)


def test_vector_env_phase_switch_via_env_method():
    venv = make_vec_env(NonStationaryCartPole, n_envs=3, seed=0)
    venv.reset()
    venv.env_method("set_phase", 3)
    assert venv.get_attr("phase") == [3, 3, 3]
    _, _, _, infos = venv.step(np.zeros(3, dtype=np.int64))
    assert [i["phase"] for i in infos] == [3, 3, 3]
    venv.close()
