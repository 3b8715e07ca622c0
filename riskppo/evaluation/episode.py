"""One deterministic episode of a trained agent over a whole evaluation period: the stepping
code that the backtest (:mod:`riskppo.evaluation.backtest`, :mod:`riskppo.evaluation.portfolio.
backtest`), ``riskppo signal`` and ``riskppo paper`` (:mod:`riskppo.live`) share, so
that they hold the same positions bit for bit.

The agent acts on a one-env evaluation VecEnv (:meth:`~riskppo.DistributionalPPO.make_eval_env`):
observation statistics frozen at the model's, recurrent state carried from the first decision bar
(reset there), deterministic actions. :func:`run_agent_episode` returns every step's info and
action, the observations the agent decided on (normalised, as the policy saw them), the
observation of the last bar (the bar only observed: the next decision is made there) and the
recurrent state after the last step's decision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv

    from riskppo.agent import DistributionalPPO

__all__ = ["AgentEpisode", "run_agent_episode", "single_env"]


class AgentEpisode(NamedTuple):
    """What one deterministic episode of the agent did (``T`` steps)."""

    infos: list[dict[str, Any]]  # [T] each step's info (the env's, see TradingEnv)
    actions: list[np.ndarray]  # [T] the action of each step, as the env got it
    observations: np.ndarray  # [T, D] float32, normalised observations decided on
    final_obs: np.ndarray | None  # [D] normalised observation of the last bar; None: ruin
    state: Any  # the recurrent state after the last step's decision
    env: gym.Env[Any, Any]  # the (unwrapped) env the episode ran in: its per-bar tables

    @property
    def truncated(self) -> bool:
        """Whether the episode ran to the end of its range (not stopped by ruin)."""
        return self.final_obs is not None


def single_env(venv: VecEnv) -> gym.Env[Any, Any]:
    """The unwrapped env of a one-env VecEnv (under its guard and normaliser)."""
    inner: Any = venv.unwrapped
    return inner.envs[0].unwrapped


def run_agent_episode(
    model: DistributionalPPO,
    part: str,
    *,
    env: Callable[..., gym.Env[Any, Any]] | None = None,
    agent: Any = None,
) -> AgentEpisode:
    """One deterministic episode of ``agent`` (default ``model``: anything with
    ``model.predict``'s signature) on ``part`` of the model's env, or on the envs ``env``
    makes (a factory taking the config's ``env.kwargs``), from its first decision bar to the
    end of its range."""
    actor = agent or model
    venv = model.make_eval_env(part, n_envs=1, env=env)
    try:
        obs: Any = venv.reset()
        state = None
        starts = np.ones(1, dtype=bool)
        seen: list[np.ndarray] = []
        infos: list[dict[str, Any]] = []
        actions: list[np.ndarray] = []
        while True:
            seen.append(np.array(obs[0], dtype=np.float32))
            action, state = actor.predict(obs, state, starts, deterministic=True)
            obs, _, dones, step_infos = venv.step(action)
            infos.append(step_infos[0])
            actions.append(np.array(action[0]))
            starts = dones
            if dones[0]:
                break
        inner = single_env(venv)
    finally:
        venv.close()
    last = infos[-1]
    terminal = last.get("terminal_observation")
    final = None
    if terminal is not None and bool(last.get("TimeLimit.truncated", True)):
        final = np.asarray(terminal, dtype=np.float32)  # ruin: no decision after the end
    return AgentEpisode(infos, actions, np.stack(seen), final, state, inner)
