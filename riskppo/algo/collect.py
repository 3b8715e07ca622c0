"""Rollout collection: one batched actor call per step for all envs (R-ALG-15).

Only the actor runs inside the step loop. The critics, which do not influence actions, are run
afterwards over the whole ``[T, N]`` rollout in one sequence pass (:func:`riskppo.algo.estimate`),
exactly as training replays them — faster, and the first-epoch values equal the rollout's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from riskppo.algo.buffer import Rollout, cat_states
from riskppo.envs.vec.tensors import env_actions, obs_tensor
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.nn.recurrent import LSTMState


@dataclass
class CollectorState:
    """What carries over from one rollout to the next (explicit, R-ALG-1)."""

    obs: torch.Tensor  # [N, D] last observation
    episode_start: torch.Tensor  # [N] bool
    state: RecurrentState  # recurrent state entering the next step (pre-mask)


class RolloutHooks(Protocol):
    """Called by :func:`collect_rollout` around and after every vec-env step (e.g. a Stable-
    Baselines3 callback, :mod:`riskppo.agent.sb3_compat`). ``step`` gets the step's data
    (``new_obs``, ``rewards``, ``dones``, ``infos``, the env's ``actions``, all ``[N, ...]``;
    ``n_steps``: steps of this rollout so far) and returns ``False`` to stop training at once
    (:class:`StopRollout`)."""

    def rollout_start(self) -> None: ...

    def step(self, data: dict[str, Any]) -> bool: ...

    def rollout_end(self) -> None: ...


class StopRollout(Exception):
    """A :class:`RolloutHooks` step asked to stop training: the rollout is abandoned."""


@dataclass
class EpisodeStats:
    """Finished-episode returns and lengths seen during a rollout."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


@dataclass
class _Buffers:
    """What one rollout stores step by step, time-major ``[T, N, ...]``."""

    obs: torch.Tensor  # [T, N, D]
    obs_np: np.ndarray | None  # ``obs`` as a NumPy array on the CPU (None on another device)
    starts: np.ndarray  # [T, N] bool
    rewards: np.ndarray  # [T, N]
    dones: np.ndarray  # [T, N] bool
    truncs: np.ndarray  # [T, N] bool
    costs: np.ndarray  # [T, N] info["reward_costs_fraction"]; NaN: not reported or invalid
    # [2, T, N] info["reward_slope"], info["reward_slope_prev"] ([2, T, N, A] for an action of
    # A > 1 numbers); NaN: none
    slopes: np.ndarray
    actions: list[torch.Tensor] = field(default_factory=list)
    log_probs: list[torch.Tensor] = field(default_factory=list)  # T of [N]
    critic_inputs: list[torch.Tensor] = field(default_factory=list)  # ActStep.critic_input
    final_obs: list[np.ndarray] = field(default_factory=list)  # true final obs of truncations
    final_idx: list[tuple[int, int]] = field(default_factory=list)
    final_pi: list[LSTMState] = field(default_factory=list)  # post-step actor state of those
    pi_chunks: list[LSTMState] = field(default_factory=list)  # actor state entering each chunk
    n_bad_costs: int = 0  # costs reported but not a finite number
    episodes: EpisodeStats = field(default_factory=EpisodeStats)

    @classmethod
    def allocate(
        cls, n_steps: int, n: int, d: int, device: torch.device, n_actions: int = 1
    ) -> _Buffers:
        shape = (n_steps, n)
        per_action = () if n_actions == 1 else (n_actions,)
        obs = torch.empty(n_steps, n, d, device=device)
        return cls(
            obs=obs,
            obs_np=obs.numpy() if obs.device.type == "cpu" else None,
            starts=np.empty(shape, dtype=bool),
            rewards=np.empty(shape, dtype=np.float32),
            dones=np.empty(shape, dtype=bool),
            truncs=np.zeros(shape, dtype=bool),
            costs=np.full(shape, np.nan, dtype=np.float32),
            slopes=np.full((2, *shape, *per_action), np.nan, dtype=np.float64),
        )

    def write_obs(self, t: int, obs: Any) -> None:
        """The VecEnv's observations of step ``t`` into ``obs[t]``: on the CPU one NumPy
        assignment into the tensor's memory (the float32 cast included), else a copy."""
        if self.obs_np is not None:
            self.obs_np[t] = np.reshape(obs, self.obs_np.shape[1:])
        else:
            self.obs[t] = obs_tensor(obs, self.obs.device)

    def record_infos(
        self, t: int, done: np.ndarray, infos: list[dict[str, Any]], pi_state: LSTMState
    ) -> None:
        """Truncations (true final observation, post-step actor state), finished episodes and
        reported costs of step ``t``."""
        for i in (int(j) for j in np.flatnonzero(done)):
            info = infos[i]
            if info.get("TimeLimit.truncated", False):
                self.truncs[t, i] = True
                self.final_obs.append(np.asarray(info["terminal_observation"], np.float32))
                self.final_idx.append((t, i))
                self.final_pi.append(pi_state.select(slice(i, i + 1)))  # post-step state
            if "episode" in info:
                self.episodes.returns.append(float(info["episode"]["r"]))
                self.episodes.lengths.append(int(info["episode"]["l"]))
        for i, info in enumerate(infos):
            c = info.get("reward_costs_fraction")
            if c is not None:
                self.costs[t, i] = _finite_or_nan(c)
                self.n_bad_costs += int(math.isnan(self.costs[t, i]))
            g = info.get("reward_slope")
            if g is not None:
                self.slopes[0, t, i] = _slope_or_nan(g, self.slopes.shape[3:])
                self.slopes[1, t, i] = _slope_or_nan(
                    info.get("reward_slope_prev", 0.0), self.slopes.shape[3:]
                )

    def reward_slopes(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``([T, N], [T, N])`` (``[T, N, A]`` each for an action of ``A > 1`` numbers):
        ``∂(return)/∂a_t`` of each decision — this step's slope plus the
        next step's slope with respect to it (``reward_slope_prev``, 0 where a new episode
        starts), the whole derivative of the episode's return for an env whose reward depends on
        the last two actions — and that next step's part alone (0 at the rollout's last step: the
        next one is not seen yet). None where the env reports none; a missing or non-finite
        report counts as 0."""
        now, prev = self.slopes
        if np.isnan(now).all():
            return None
        nxt = np.zeros_like(now)
        nxt[:-1] = np.nan_to_num(prev[1:], nan=0.0)
        total = np.nan_to_num(now, nan=0.0) + nxt
        return (
            torch.as_tensor(total, dtype=torch.float32, device=device),
            torch.as_tensor(nxt, dtype=torch.float32, device=device),
        )

    def rollout(
        self,
        carry: CollectorState,
        last_obs: torch.Tensor,
        last_start: torch.Tensor,
        last_pi: LSTMState,
    ) -> Rollout:
        """The stored steps as a :class:`Rollout`, with the state after the last step."""
        device, d = last_obs.device, last_obs.shape[1]
        slopes = self.reward_slopes(device)
        done_t = torch.as_tensor(self.dones, device=device)
        trunc_t = torch.as_tensor(self.truncs, device=device)
        final_obs = (
            obs_tensor(np.stack(self.final_obs), device)
            if self.final_obs
            else torch.empty(0, d, device=device)
        )
        return Rollout(
            obs=self.obs,
            actions=torch.stack(self.actions),
            log_probs=torch.stack(self.log_probs),
            rewards=torch.as_tensor(self.rewards, device=device),
            terminated=done_t & ~trunc_t,
            truncated=trunc_t,
            episode_starts=torch.as_tensor(self.starts, device=device),
            start_state=carry.state,
            pi_chunk_states=self.pi_chunks,
            final_obs=final_obs,
            final_index=torch.tensor(self.final_idx, dtype=torch.long).reshape(-1, 2),
            final_pi_state=cat_states(self.final_pi) if self.final_pi else None,
            actor_latent=torch.stack(self.critic_inputs) if self.critic_inputs else None,
            last_obs=last_obs,
            last_episode_start=last_start,
            last_pi_state=last_pi,
            costs_fraction=torch.as_tensor(self.costs, device=device),
            costs_nonfinite=self.n_bad_costs,
            reward_slopes=slopes[0] if slopes is not None else None,
            reward_slopes_next=slopes[1] if slopes is not None else None,
        )


def collect_rollout(
    policy: RecurrentActorCritic,
    venv: VecEnv,
    carry: CollectorState,
    n_steps: int,
    chunk_len: int,
    generator: torch.Generator,
    hooks: RolloutHooks | None = None,
) -> tuple[Rollout, CollectorState, EpisodeStats]:
    """Run ``n_steps`` steps of every env; returns the rollout and the new carry-over state.

    ``hooks`` (optional) are called around the rollout and after every step; a step hook that
    returns ``False`` raises :class:`StopRollout` (the env is then mid-episode: reset it)."""
    device = carry.obs.device
    N, D = carry.obs.shape
    space = venv.action_space
    n_actions = int(np.prod(space.shape)) if isinstance(space, spaces.Box) else 1
    buf = _Buffers.allocate(n_steps, N, D, device, n_actions)
    buf.obs[0] = carry.obs
    obs, pi_state = carry.obs, carry.state.pi
    # episode starts as NumPy: resets are decided without tensor ops (R-ALG-15)
    ep_start: np.ndarray = carry.episode_start.cpu().numpy().astype(bool)
    if hooks is not None:
        hooks.rollout_start()
    with torch.inference_mode():
        actor = policy.rollout_actor()  # weights taken once for the whole rollout
        for t in range(n_steps):
            if t % chunk_len == 0:
                buf.pi_chunks.append(pi_state)
            step = actor.act(obs, pi_state, ep_start, generator=generator)
            actions = env_actions(step.actions, space)
            next_obs, rew, done, infos = venv.step(actions)
            buf.actions.append(step.actions)
            buf.log_probs.append(step.log_prob)
            buf.starts[t] = ep_start
            buf.rewards[t] = rew
            buf.dones[t] = done
            if step.critic_input is not None:
                buf.critic_inputs.append(step.critic_input)
            buf.record_infos(t, done, infos, step.pi_state)
            if hooks is not None:
                data = {"new_obs": next_obs, "rewards": rew, "dones": done, "infos": infos}
                if not hooks.step({**data, "actions": actions, "n_steps": t + 1}):
                    raise StopRollout
            if t + 1 < n_steps:  # the next observation straight into the buffer
                buf.write_obs(t + 1, next_obs)
                obs = buf.obs[t + 1]
            else:
                obs = obs_tensor(next_obs, device)
            ep_start = np.asarray(done, dtype=bool)
            pi_state = step.pi_state
    if hooks is not None:
        hooks.rollout_end()
    last_start = torch.as_tensor(ep_start, device=device)
    rollout = buf.rollout(carry, obs, last_start, pi_state)
    new_carry = CollectorState(obs, last_start, RecurrentState(pi_state, carry.state.vf))
    return rollout, new_carry, buf.episodes


def _slope_or_nan(value: object, shape: tuple[int, ...]) -> float | np.ndarray:
    """A reported reward slope: a finite number (``shape`` ``()``) or ``shape`` finite numbers,
    else NaN (counted as no report)."""
    if not shape:
        return _finite_or_nan(value)
    try:
        v = np.asarray(value, dtype=np.float64).reshape(shape)
    except (TypeError, ValueError):
        return math.nan
    return v if np.isfinite(v).all() else math.nan


def _finite_or_nan(value: object) -> float:
    """``info["reward_costs_fraction"]`` is accepted only if finite (design §5)."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan
