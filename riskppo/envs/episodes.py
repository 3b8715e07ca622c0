"""Whole evaluation episodes of a recurrent agent on a vector env."""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv


def run_episodes(model: Any, venv: VecEnv, n_episodes: int, deterministic: bool) -> list[float]:
    """Raw returns of ``n_episodes`` episodes, with a fixed quota per env (like SB3's
    ``evaluate_policy``) so that envs with short episodes are not over-represented.

    ``model`` is anything with ``DistributionalPPO.predict``'s signature (e.g. an attacked agent,
    :class:`riskppo.evaluation.robustness.AttackedAgent`)."""
    obs = venv.reset()
    n = venv.num_envs
    quota = np.array([(n_episodes + i) // n for i in range(n)])  # sums to n_episodes
    state = None
    starts = np.ones(n, dtype=bool)
    acc = np.zeros(n)
    counts = np.zeros(n, dtype=int)
    out: list[float] = []
    while (counts < quota).any():
        actions, state = model.predict(obs, state, starts, deterministic)
        obs, rewards, dones, _ = venv.step(actions)
        acc += rewards
        for i in np.flatnonzero(dones):
            if counts[i] < quota[i]:
                out.append(float(acc[i]))
                counts[i] += 1
            acc[i] = 0.0
        starts = dones
    return out
