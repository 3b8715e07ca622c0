"""``FiniteVecNormalize``: SB3's ``VecNormalize`` (observations only) with riskppo's finite-value
guard held inside, so the chain is ``VecNormalize → VecEnv`` as SB3 builds it. It must step
exactly like ``VecNormalize(VecFiniteGuard(venv))`` did, and survive SB3's ``save`` / ``load``.
Real CartPole envs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from riskppo.envs.vec.build import FiniteVecNormalize, VecFiniteGuard, sb3_view


def _base() -> VecEnv:
    return make_vec_env("CartPole-v1", n_envs=3, seed=0)


def test_it_steps_like_vecnormalize_over_the_guard() -> None:
    stacked = VecNormalize(VecFiniteGuard(_base()), norm_obs=True, norm_reward=False, clip_obs=5)
    held = FiniteVecNormalize(VecFiniteGuard(_base()), clip_obs=5)
    assert not isinstance(held.venv, VecFiniteGuard)  # what SB3's sync_envs_normalization walks
    np.testing.assert_array_equal(stacked.reset(), held.reset())
    actions = np.random.default_rng(0).integers(0, 2, size=(80, 3))
    n_done = 0
    for a in actions:
        ref, got = stacked.step(a), held.step(a)
        for x, y in zip(ref[:3], got[:3], strict=True):
            np.testing.assert_array_equal(x, y)
        for i in np.flatnonzero(ref[2]):
            n_done += 1
            np.testing.assert_array_equal(
                ref[3][i]["terminal_observation"], got[3][i]["terminal_observation"]
            )
    assert n_done > 0
    np.testing.assert_array_equal(stacked.obs_rms.mean, held.obs_rms.mean)
    np.testing.assert_array_equal(stacked.obs_rms.var, held.obs_rms.var)
    np.testing.assert_array_equal(stacked.get_original_obs(), held.get_original_obs())
    assert held.guard.n_steps == 80


def test_save_and_load_give_a_guard_over_the_new_env(tmp_path: Path) -> None:
    held = FiniteVecNormalize(VecFiniteGuard(_base(), policy="skip"), clip_obs=5)
    held.reset()
    held.step(np.zeros(3, dtype=int))
    held.save(str(tmp_path / "vecnormalize.pkl"))
    loaded = VecNormalize.load(str(tmp_path / "vecnormalize.pkl"), _base())
    assert isinstance(loaded, FiniteVecNormalize) and loaded.guard.policy == "skip"
    assert loaded.guard.venv is loaded.venv
    np.testing.assert_array_equal(loaded.obs_rms.mean, held.obs_rms.mean)
    assert np.isfinite(loaded.reset()).all()


def test_sb3_view_leaves_out_an_outer_guard_only() -> None:
    base = _base()
    assert sb3_view(VecFiniteGuard(base)) is base
    held = FiniteVecNormalize(VecFiniteGuard(base), clip_obs=5)
    assert sb3_view(held) is held
