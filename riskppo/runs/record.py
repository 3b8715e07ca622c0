"""Recording demonstration files (``riskppo record``): a baseline strategy or a trained run
acting in the trading env's train split, written as safetensors (:mod:`riskppo.demos.files`).

The demonstrator **acts**: its actions drive the env, so the recorded observations (the held
position included) are its own trajectory. Recorded per step: the raw observation (before obs
normalisation), the action, the episode start, and the discounted return-to-go (``ppo.gamma``)
to the end of the episode or of the recording.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv

from riskppo.agent import DistributionalPPO
from riskppo.config import Config
from riskppo.demos.files import Demonstrations, save_demonstrations
from riskppo.envs.registration import market_kind
from riskppo.envs.teacher import TeacherRecorder, strategy_teacher, trading_env
from riskppo.envs.vec.build import build_vec_env

__all__ = ["record_run", "record_strategy", "returns_to_go", "write_demonstrations"]

Actor = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``(policy obs [N, D], episode starts [N], teacher actions [N, *A]) -> env actions``."""


def returns_to_go(rewards: np.ndarray, dones: np.ndarray, gamma: float) -> np.ndarray:
    """``[T, N]`` discounted return-to-go, cut where ``dones[t]`` ends an episode after step t."""
    out = np.zeros_like(rewards, dtype=np.float64)
    acc = np.zeros(rewards.shape[1])
    for t in range(len(rewards) - 1, -1, -1):
        acc = rewards[t] + gamma * acc * (1.0 - dones[t])
        out[t] = acc
    return out.astype(np.float32)


def _record(
    venv: VecEnv, recorder: TeacherRecorder, act: Actor, n_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Step ``venv`` (wrapped by ``recorder``) ``n_steps`` times with ``act``; returns the
    rewards and dones ``[T, N]``."""
    obs = recorder.reset()
    rewards = np.zeros((n_steps, venv.num_envs), dtype=np.float32)
    dones = np.zeros((n_steps, venv.num_envs), dtype=bool)
    starts = np.ones(venv.num_envs, dtype=bool)
    for t in range(n_steps):
        teacher_actions = recorder.latest_labels()
        obs, rewards[t], dones[t], _ = recorder.step(act(obs, starts, teacher_actions))
        starts = np.asarray(dones[t])
    return rewards, dones


def _demonstrations(
    recorder: TeacherRecorder,
    actions: list[np.ndarray] | None,
    rewards: np.ndarray,
    dones: np.ndarray,
    gamma: float,
) -> Demonstrations:
    """The recorded steps (the last observation, never acted on, dropped)."""
    rec = recorder.recorded()
    assert rec is not None
    T = len(rewards)
    acts = rec.actions[:T] if actions is None else torch.as_tensor(np.stack(actions))
    return Demonstrations(
        rec.observations[:T],
        acts,
        rec.episode_starts[:T],
        torch.as_tensor(returns_to_go(rewards, dones, gamma)),
    )


def record_strategy(cfg: Config, strategy: str, n_steps: int) -> Demonstrations:
    """Demonstrations of baseline ``strategy`` on ``cfg``'s trading env (train split,
    ``env.n_envs`` envs with the config's random starts), ``n_steps`` steps each."""
    market_kind(cfg.env.id, "riskppo record --strategy", single_asset=True)
    venv = build_vec_env(cfg.env.id, cfg.env, cfg.seed, cfg.data, part="train", risk=cfg.risk)
    try:
        env = trading_env(venv)
        assert env is not None
        recorder = TeacherRecorder(venv, strategy_teacher(env, strategy), n_steps + 1)
        rewards, dones = _record(venv, recorder, lambda o, s, a: a, n_steps)
        return _demonstrations(recorder, None, rewards, dones, cfg.ppo.gamma)
    finally:
        venv.close()


def record_run(checkpoint: Path, n_steps: int, n_envs: int = 1) -> Demonstrations:
    """Demonstrations of a trained run's deterministic policy (its checkpoint) on its env's
    train split (for trading: the whole split from its start, ``n_envs`` identical copies)."""
    model = DistributionalPPO.load(checkpoint, rebuild_env=False)
    venv = model.make_eval_env(part="train", n_envs=n_envs)
    actions: list[np.ndarray] = []
    state: Any = None

    def act(obs: np.ndarray, starts: np.ndarray, _: np.ndarray) -> np.ndarray:
        nonlocal state
        a, state = model.predict(obs, state, episode_start=starts, deterministic=True)
        actions.append(np.asarray(a))
        return a

    try:
        recorder = TeacherRecorder(venv, _no_label, n_steps + 1)
        rewards, dones = _record(venv, recorder, act, n_steps)
        return _demonstrations(recorder, actions, rewards, dones, model.config.ppo.gamma)
    finally:
        venv.close()


def _no_label(obs: np.ndarray, bars: np.ndarray) -> np.ndarray:
    return np.zeros(len(obs), dtype=np.float32)


def write_demonstrations(path: Path, demos: Demonstrations, source: str) -> Path:
    """Save ``demos`` with ``source`` in the file's metadata; return the path."""
    T, N = demos.shape
    return save_demonstrations(path, demos, {"source": source, "steps": str(T), "seqs": str(N)})
