"""Rollout collection: one batched actor call per step for all envs (R-ALG-15).

Only the actor runs inside the step loop. The critics, which do not influence actions, are run
afterwards over the whole ``[T, N]`` rollout in one sequence pass (:func:`riskppo.train.estimate`),
exactly as training replays them — faster, and the first-epoch values equal the rollout's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from riskppo.data.buffer import Rollout, cat_states
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.nn.recurrent import LSTMState


@dataclass
class CollectorState:
    """What carries over from one rollout to the next (explicit, R-ALG-1)."""

    obs: torch.Tensor  # [N, D] last observation
    episode_start: torch.Tensor  # [N] bool
    state: RecurrentState  # recurrent state entering the next step (pre-mask)


@dataclass
class EpisodeStats:
    """Finished-episode returns and lengths seen during a rollout."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


def obs_tensor(obs: Any, device: torch.device) -> torch.Tensor:
    """VecEnv observations (Box spaces) → ``[N, D]`` float32 tensor."""
    return torch.as_tensor(np.asarray(obs, dtype=np.float32), device=device).reshape(len(obs), -1)


def env_actions(actions: torch.Tensor, space: spaces.Space[Any]) -> np.ndarray:
    """Policy actions → what the env receives (Box actions clipped to the bounds, like SB3)."""
    a: np.ndarray = actions.cpu().numpy()
    if isinstance(space, spaces.Box):
        return np.asarray(np.clip(a.reshape(len(a), *space.shape), space.low, space.high))
    return a


def collect_rollout(
    policy: RecurrentActorCritic,
    venv: VecEnv,
    carry: CollectorState,
    n_steps: int,
    chunk_len: int,
    generator: torch.Generator,
) -> tuple[Rollout, CollectorState, EpisodeStats]:
    """Run ``n_steps`` steps of every env; returns the rollout and the new carry-over state."""
    device = carry.obs.device
    N, D = carry.obs.shape
    space = venv.action_space
    obs_buf = torch.empty(n_steps, N, D, device=device)
    obs_buf[0] = carry.obs
    act_buf: list[torch.Tensor] = []
    logp_buf = torch.empty(n_steps, N, device=device)
    starts = np.empty((n_steps, N), dtype=bool)
    rewards = np.empty((n_steps, N), dtype=np.float32)
    dones = np.empty((n_steps, N), dtype=bool)
    truncs = np.zeros((n_steps, N), dtype=bool)
    costs = np.full((n_steps, N), np.nan, dtype=np.float32)  # NaN: not reported
    n_bad_costs = 0  # reported but not a finite number
    critic_inputs: list[torch.Tensor] = []  # ActStep.critic_input (when the critics read it)
    final_obs: list[np.ndarray] = []
    final_idx: list[tuple[int, int]] = []
    final_pi: list[LSTMState] = []
    pi_chunks: list[LSTMState] = []
    episodes = EpisodeStats()

    obs, pi_state = carry.obs, carry.state.pi
    # episode starts as NumPy: resets are decided without tensor ops (R-ALG-15)
    ep_start: np.ndarray = carry.episode_start.cpu().numpy().astype(bool)
    with torch.inference_mode():
        actor = policy.rollout_actor()  # weights taken once for the whole rollout
        for t in range(n_steps):
            if t % chunk_len == 0:
                pi_chunks.append(pi_state)
            step = actor.act(obs, pi_state, ep_start, generator=generator)
            next_obs, rew, done, infos = venv.step(env_actions(step.actions, space))
            act_buf.append(step.actions)
            logp_buf[t] = step.log_prob
            starts[t] = ep_start
            rewards[t] = rew
            dones[t] = done
            if step.critic_input is not None:
                critic_inputs.append(step.critic_input)
            for i in (int(j) for j in np.flatnonzero(done)):
                info = infos[i]
                if info.get("TimeLimit.truncated", False):
                    truncs[t, i] = True
                    final_obs.append(np.asarray(info["terminal_observation"], np.float32))
                    final_idx.append((t, int(i)))
                    final_pi.append(step.pi_state.select(slice(i, i + 1)))  # post-step state
                if "episode" in info:
                    episodes.returns.append(float(info["episode"]["r"]))
                    episodes.lengths.append(int(info["episode"]["l"]))
            for i, info in enumerate(infos):
                c = info.get("reward_costs_fraction")
                if c is not None:
                    costs[t, i] = _finite_or_nan(c)
                    n_bad_costs += int(math.isnan(costs[t, i]))
            if t + 1 < n_steps:  # the next observation straight into the buffer
                obs_buf[t + 1] = torch.as_tensor(np.asarray(next_obs, np.float32).reshape(N, D))
                obs = obs_buf[t + 1]
            else:
                obs = obs_tensor(next_obs, device)
            ep_start = np.asarray(done, dtype=bool)
            pi_state = step.pi_state

    done_t = torch.as_tensor(dones, device=device)
    last_start = torch.as_tensor(ep_start, device=device)
    trunc_t = torch.as_tensor(truncs, device=device)
    rollout = Rollout(
        obs=obs_buf,
        actions=torch.stack(act_buf),
        log_probs=logp_buf,
        rewards=torch.as_tensor(rewards, device=device),
        terminated=done_t & ~trunc_t,
        truncated=trunc_t,
        episode_starts=torch.as_tensor(starts, device=device),
        start_state=carry.state,
        pi_chunk_states=pi_chunks,
        final_obs=obs_tensor(np.stack(final_obs), device)
        if final_obs
        else torch.empty(0, D, device=device),
        final_index=torch.tensor(final_idx, dtype=torch.long).reshape(-1, 2),
        final_pi_state=cat_states(final_pi) if final_pi else None,
        actor_latent=torch.stack(critic_inputs) if critic_inputs else None,
        last_obs=obs,
        last_episode_start=last_start,
        last_pi_state=pi_state,
        costs_fraction=torch.as_tensor(costs, device=device),
        costs_nonfinite=n_bad_costs,
    )
    new_carry = CollectorState(obs, last_start, RecurrentState(pi_state, carry.state.vf))
    return rollout, new_carry, episodes


def _finite_or_nan(value: object) -> float:
    """``info["reward_costs_fraction"]`` is accepted only if finite (audit finding #11)."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan
