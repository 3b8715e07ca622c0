"""Natively vectorised envs: one object that steps all ``n_envs`` envs at once.

:func:`native_vec_env` picks, for an env id and ``n_envs > 1``, its kind's batched form (the
``batched`` entry of its :class:`~riskppo.envs.registration.EnvKind`: the trading env's
:mod:`riskppo.envs.trading.vec`) or the id's Gymnasium ``vector_entry_point``
(:mod:`riskppo.envs.vec.gym_vector`, used only where it can give SB3's reset semantics exactly);
``None`` where there is none, and riskppo steps ``n_envs`` separate envs.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorEnv
from stable_baselines3.common.vec_env import VecEnv

from riskppo.config import ConfigError
from riskppo.envs.registration import env_kind, env_spec
from riskppo.envs.vec.cartpole import with_single_resets
from riskppo.envs.vec.gym_vector import GymVectorVecEnv, autoreset_mode, resets_single_envs

__all__ = ["from_gym_vector", "native_vec_env"]


def native_vec_env(env: Any, n_envs: int, kwargs: dict[str, Any]) -> VecEnv | None:
    """The batched form of env id ``env`` with ``n_envs`` envs and constructor ``kwargs``, or
    ``None`` (not an id, one env, no batched form). Not yet seeded nor reset."""
    if not isinstance(env, str) or n_envs < 2:
        return None
    kind = env_kind(env)
    if kind is not None and kind.batched is not None:
        # its entry points are imported here: a run without the kind does not import pandas
        made = gym.make(env_spec(env), **kwargs).unwrapped
        assert isinstance(made, kind.load(kind.env_class))
        return kind.load(kind.batched)(made, n_envs)
    spec = env_spec(env)
    if spec.vector_entry_point is None:
        return None
    vec = gym.make_vec(spec, num_envs=n_envs, vectorization_mode="vector_entry_point", **kwargs)
    # Gymnasium's CartPoleVectorEnv draws every env's states from one generator: its episodes
    # are not those of n separate envs seeded s, s+1, ..., so the id keeps the separate envs
    # (a user who passes it gets it, with single resets: from_gym_vector)
    if not resets_single_envs(vec):
        vec.close()
        return None
    return GymVectorVecEnv(vec)


def from_gym_vector(vec: VectorEnv) -> GymVectorVecEnv:
    """A user's Gymnasium vector env (``gymnasium.make_vec(...)``, ``SyncVectorEnv``, ...) as a
    VecEnv; one line naming the remedy if it cannot give SB3's reset semantics."""
    vec = with_single_resets(vec)
    if not resets_single_envs(vec):
        raise ConfigError(
            f"env: this Gymnasium vector env ({type(vec.unwrapped).__name__}) autoresets in "
            f"{autoreset_mode(vec).name} mode and cannot reset single envs "
            "(reset(options={'reset_mask': ...})); make it with gymnasium.make_vec(id, n, "
            "vectorization_mode='sync'), or with vector_kwargs={'autoreset_mode': "
            "gymnasium.vector.AutoresetMode.SAME_STEP}, or pass the env id"
        )
    return GymVectorVecEnv(vec)
