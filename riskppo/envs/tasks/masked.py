"""Masked-velocity control tasks: observations without velocities, so memory is needed.

Registered (:mod:`riskppo.envs.registration`) as ``riskppo/MaskedVelocityCartPole-v1`` (x, θ
only) and ``riskppo/MaskedVelocityPendulum-v1`` (cos θ, sin θ only), as in sb3-contrib's
benchmarks.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

# Indices of the observation entries that are kept for each base env.
_KEEP = {"CartPole-v1": [0, 2], "Pendulum-v1": [0, 1]}


class MaskVelocityWrapper(gym.ObservationWrapper):
    """Keep only the position entries of the observation (drops velocities)."""

    def __init__(self, env: gym.Env, keep: list[int]) -> None:
        super().__init__(env)
        assert isinstance(env.observation_space, spaces.Box)
        self.keep = np.asarray(keep)
        low = env.observation_space.low[self.keep]
        high = env.observation_space.high[self.keep]
        self.observation_space = spaces.Box(low, high, dtype=env.observation_space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def make_masked(base_id: str, **kwargs: Any) -> gym.Env:
    return MaskVelocityWrapper(gym.make(base_id, **kwargs), _KEEP[base_id])
