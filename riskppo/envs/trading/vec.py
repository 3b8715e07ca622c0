"""The trading env's batched form as a Stable-Baselines3 ``VecEnv``.

:class:`BatchedTradingVecEnv` steps ``n_envs`` episodes of one :class:`TradingEnv` with
:class:`~riskppo.envs.trading.batch.TradingBatch` and returns what riskppo's in-process vec env
of ``n_envs`` separate trading envs returns for the same seeds: observations, rewards (float32),
done flags, and infos with ``TimeLimit.truncated``, ``terminal_observation`` and ``episode``
(:mod:`riskppo.envs.vec.infos`); an ended episode is reset in the same step, with the env's
own random generator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from riskppo.envs.trading.batch import TradingBatch
from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.vec.infos import EpisodeTally, env_indices

__all__ = ["BatchedTradingVecEnv"]


class BatchedTradingVecEnv(VecEnv):
    """``n_envs`` trading episodes of ``env`` stepped as arrays (see the module docstring).

    ``get_attr`` answers from ``env`` for every index (the envs share its data and settings);
    ``set_attr`` and ``env_method`` are not available (``env.vectorized: false`` steps separate
    envs that have them).
    """

    def __init__(self, env: TradingEnv, n_envs: int) -> None:
        self.env = env  # before VecEnv.__init__, which reads its render_mode
        super().__init__(n_envs, env.observation_space, env.action_space)
        self.batch = TradingBatch(env, n_envs)
        self.tally = EpisodeTally(n_envs)
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        rows = []
        for i in range(self.num_envs):
            obs, self.reset_infos[i] = self.batch.reset(i, self._seeds[i], self._options[i])
            rows.append(obs)
            self.tally.reset(i)
        self._reset_seeds()
        self._reset_options()
        return np.stack(rows)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        assert self._actions is not None, "step_async() first"
        step = self.batch.step(self._actions)
        obs, infos = step.obs, step.infos
        terminated, truncated = step.terminated, step.truncated
        self.tally.record(step.rewards.tolist(), terminated.tolist(), truncated.tolist(), infos)
        for i in step.ended:
            infos[i]["terminal_observation"] = obs[i].copy()
            obs[i], self.reset_infos[i] = self.batch.reset(i)
        return obs, step.rewards.astype(np.float32), terminated | truncated, infos

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self.env, attr_name) for _ in env_indices(indices, self.num_envs)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise NotImplementedError(self._unavailable(f"set_attr({attr_name!r})"))

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        raise NotImplementedError(self._unavailable(f"env_method({method_name!r})"))

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in env_indices(indices, self.num_envs)]

    @staticmethod
    def _unavailable(what: str) -> str:
        return (
            f"{what}: the batched trading env has no separate envs; set env.vectorized: false "
            "to step separate TradingEnv instances"
        )
