"""Building the vectorised environment: SB3 VecEnvs, a finite-input guard, VecNormalize.

Order of wrappers: ``VecEnv (Monitor per env) → VecFiniteGuard → VecNormalize(obs only)``, so a
NaN/inf from an env is caught before it can reach the normaliser statistics (R-REL-5).

A reward that is not a number (``None``, an array, a string) is found inside each env
(:class:`RewardCheck`, also in ``SubprocVecEnv`` workers), passed on as NaN with a note in
the step's info, and raised by :class:`VecFiniteGuard` as an :class:`EnvOutputError` naming the
env index, the step and the field, whatever ``nonfinite_policy`` says. With ``vec_env: subproc``,
``env.step_timeout`` bounds how long one ``step()`` may take (:class:`TimeoutSubprocVecEnv`).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecEnvWrapper,
    VecNormalize,
)

from riskppo.config import DataConfig, EnvConfig
from riskppo.envs.factory import data_kwargs
from riskppo.envs.registration import TRADING_ID, register_envs

EnvSpec = str | Callable[[], gym.Env] | VecEnv


class NonFiniteInputError(RuntimeError):
    """An environment produced a NaN or infinite observation or reward."""


class EnvOutputError(RuntimeError):
    """An environment returned something of the wrong kind, or did not return in time."""


BAD_OUTPUT_KEY = "riskppo/bad_output"  # info key set by RewardCheck for a bad reward


class VecFiniteGuard(VecEnvWrapper):
    """Raise (or, with ``policy='skip'``, zero and count) non-finite observations and rewards.

    The error names the env index, the step counter and the field (R-REL-5).
    """

    def __init__(self, venv: VecEnv, policy: str = "raise") -> None:
        super().__init__(venv)
        self.policy = policy
        self.n_steps = 0
        self.n_skipped = 0

    def reset(self) -> Any:
        obs = self.venv.reset()
        return self._check_obs(obs, "reset observation")

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.n_steps += 1
        obs = self._check_obs(obs, "observation")
        bad = ~np.isfinite(rewards)
        if bad.any():
            # RewardCheck turned a reward that is no number into NaN with a note: only then are
            # the infos read (not on every step). Never skipped: such a reward is a bug.
            for k in np.flatnonzero(bad).tolist():
                if BAD_OUTPUT_KEY in infos[k]:
                    raise EnvOutputError(
                        f"env {k} {infos[k][BAD_OUTPUT_KEY]} at vec step {self.n_steps}; step() "
                        "must return (obs, reward: float, terminated, truncated, info)"
                    )
            if self.policy == "raise":
                i = int(np.flatnonzero(bad)[0])
                raise NonFiniteInputError(
                    f"env {i} returned a non-finite reward ({rewards[i]}) at vec step "
                    f"{self.n_steps}; set env.nonfinite_policy='skip' to zero it instead"
                )
            rewards = np.where(bad, 0.0, rewards)
            self.n_skipped += int(bad.sum())
        for info in infos:
            term = info.get("terminal_observation")
            if term is not None and not np.all(np.isfinite(term)):
                info["terminal_observation"] = self._fix(np.asarray(term), "terminal observation")
        return obs, rewards, dones, infos

    def _check_obs(self, obs: Any, field: str) -> Any:
        flat = np.asarray(obs).reshape(len(obs), -1)
        finite = np.isfinite(flat)
        if finite.all():
            return obs
        if self.policy == "raise":
            i, j = (int(v) for v in np.argwhere(~finite)[0])
            raise NonFiniteInputError(
                f"env {i} returned a non-finite {field} (element {j} = {flat[i, j]}) at vec step "
                f"{self.n_steps}; set env.nonfinite_policy='skip' to zero it instead"
            )
        self.n_skipped += int((~finite).any(axis=1).sum())
        return np.where(np.isfinite(obs), obs, 0.0).astype(obs.dtype)

    def _fix(self, obs: np.ndarray, field: str) -> np.ndarray:
        return self._check_obs(obs[None], field)[0]


class InProcessVecEnv(DummyVecEnv):
    """SB3's ``DummyVecEnv`` without the per-step ``deepcopy`` of the info dicts.

    Every env returns a fresh ``info`` dict per step, and the trainer reads them within the step,
    so a shallow copy of the list is enough; the deep copy (terminal observations included) costs
    ≈ 25–35 µs per step of 8 CartPole or Pendulum envs, ≈ 10% of the step. Otherwise identical.
    """

    def step_wait(self) -> Any:
        for i, env in enumerate(self.envs):
            obs, self.buf_rews[i], terminated, truncated, info = env.step(self.actions[i])
            self.buf_dones[i] = terminated or truncated
            info["TimeLimit.truncated"] = truncated and not terminated
            if self.buf_dones[i]:
                info["terminal_observation"] = obs
                obs, self.reset_infos[i] = env.reset()
            self.buf_infos[i] = info
            self._save_obs(i, obs)
        infos = list(self.buf_infos)
        return self._obs_from_buf(), np.copy(self.buf_rews), np.copy(self.buf_dones), infos


class TimeoutSubprocVecEnv(SubprocVecEnv):
    """``SubprocVecEnv`` whose ``step`` gives up after ``step_timeout`` seconds.

    A worker that has not answered by then is named in an :class:`EnvOutputError`, and every
    worker is terminated (the vec env is closed: the run stops). ``reset`` is not bounded.
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        start_method: str | None = None,
        *,
        step_timeout: float,
    ) -> None:
        super().__init__(env_fns, start_method)
        self.step_timeout = step_timeout
        self.n_steps = 0

    def step_wait(self) -> Any:
        self.n_steps += 1
        deadline = time.monotonic() + self.step_timeout
        for i, remote in enumerate(self.remotes):
            if not remote.poll(max(0.0, deadline - time.monotonic())):
                self._terminate()
                raise EnvOutputError(
                    f"env {i} did not return from step() within env.step_timeout="
                    f"{self.step_timeout:g} s at vec step {self.n_steps} (a hanging env); its "
                    "worker processes were stopped; fix the env or raise env.step_timeout"
                )
        return super().step_wait()

    def _terminate(self) -> None:
        for process in self.processes:
            if isinstance(process, mp.process.BaseProcess) and process.is_alive():
                process.kill()
        for process in self.processes:
            process.join(timeout=10)
        for remote in self.remotes:
            remote.close()
        self.waiting = False
        self.closed = True


class ObservationCheck(gym.Wrapper):
    """Refuse observations whose shape does not match the declared space (R-REL-5).

    Without it a wrong shape surfaces as a numpy broadcasting error deep inside the VecEnv.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(
                f"{env}: observation space must be a Box (flatten Dict spaces first), got {space}"
            )
        self._shape = tuple(space.shape)

    def _check(self, obs: Any, where: str) -> Any:
        # the common case first and cheaply: a numeric ndarray of the declared shape
        if isinstance(obs, np.ndarray) and obs.shape == self._shape and obs.dtype.kind in "fiub":
            return obs
        shape = np.shape(obs)
        if shape != self._shape:
            raise ValueError(
                f"{self.env}: {where} returned an observation of shape {shape}, but its "
                f"observation_space has shape {self._shape}"
            )
        if not np.issubdtype(np.asarray(obs).dtype, np.number):
            raise ValueError(f"{self.env}: {where} returned a non-numeric observation")
        return obs

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        return self._check(obs, "reset()"), info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._check(obs, "step()"), reward, terminated, truncated, info


class RewardCheck(gym.Wrapper):
    """Catch a reward that is not a number (R-REL-5), directly around the user's env (below
    SB3's ``Monitor``, which would fail on it with a bare ``TypeError``)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._steps = 0  # steps since the last reset

    def reset(self, **kwargs: Any) -> Any:
        self._steps = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        if not isinstance(reward, float | int | np.floating | np.integer) or isinstance(
            reward, bool | np.bool_
        ):
            reward = self._check_reward(reward, info)
        return obs, reward, terminated, truncated, info

    def _check_reward(self, reward: Any, info: dict[str, Any]) -> float:
        """A reward that is not a plain number: a one-element numeric array is taken as its
        value; anything else becomes NaN with a note in ``info`` for :class:`VecFiniteGuard`
        (raising here would kill a ``SubprocVecEnv`` worker without a message)."""
        arr = np.asarray(reward) if isinstance(reward, np.ndarray | np.generic) else None
        if arr is not None and arr.size == 1 and arr.dtype.kind in "fiu":
            return float(arr.reshape(()))
        kind = (
            f"an array of shape {arr.shape} and dtype {arr.dtype}"
            if arr is not None
            else f"{reward!r} ({type(reward).__name__})"[:200]
        )
        info[BAD_OUTPUT_KEY] = (
            f"({self.env}) returned a field 'reward' that is not a number: {kind}, at step "
            f"{self._steps} of its episode,"
        )
        return math.nan


class RewardChecked:
    """An env factory whose envs are wrapped in :class:`RewardCheck` (picklable for
    ``SubprocVecEnv``)."""

    def __init__(self, factory: Callable[..., gym.Env]) -> None:
        self.factory = factory

    def __call__(self, **kwargs: Any) -> gym.Env:
        return RewardCheck(self.factory(**kwargs))


class MakeFromId:
    """``gym.make(env_id, **kwargs)`` as a factory, so SB3's ``make_vec_env`` calls it like a
    user's factory instead of making the env from the id itself.

    Given an id, ``make_vec_env`` asks for ``render_mode="rgb_array"`` and retries without it
    when the constructor raises ``TypeError``. riskppo renders nothing, so it passes no
    ``render_mode`` at all: the env gets its own default (``None`` for Gymnasium's envs), and an
    env whose constructor takes no ``render_mode`` is made like any other. A ``render_mode`` in
    ``env.kwargs`` is passed on as given.

    It carries the id's registered ``EnvSpec``, so ``SubprocVecEnv`` workers (fresh processes,
    where riskppo's or a user's ids are not registered) make the same env.
    """

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self.spec = gym.spec(env_id)

    def __call__(self, **kwargs: Any) -> gym.Env:
        return gym.make(self.spec, **kwargs)


def env_kwargs(env: EnvSpec, cfg: EnvConfig, data: DataConfig | None, part: str) -> dict[str, Any]:
    """Keyword arguments for the env factory; the trading env also gets its data and split."""
    kwargs = dict(cfg.kwargs)
    if env == TRADING_ID and data is not None:
        kwargs.update(data_kwargs(data), part=part)
    return kwargs


def build_vec_env(
    env: EnvSpec,
    cfg: EnvConfig,
    seed: int,
    data: DataConfig | None = None,
    *,
    part: str = "train",
    n_envs: int | None = None,
) -> VecEnv:
    """Make a VecEnv from an id, a factory or a ready VecEnv (seeded per env).

    ``part`` selects the train / val / test period of the trading env (ignored elsewhere).
    """
    if isinstance(env, VecEnv):
        venv: VecEnv = env
    else:
        register_envs()
        vec_cls: type[DummyVecEnv] | type[SubprocVecEnv] = (
            SubprocVecEnv if cfg.vec_env == "subproc" else InProcessVecEnv
        )
        vec_kwargs: dict[str, Any] | None = None
        if cfg.vec_env == "subproc" and cfg.step_timeout is not None:
            vec_cls, vec_kwargs = TimeoutSubprocVecEnv, {"step_timeout": cfg.step_timeout}
        venv = make_vec_env(
            RewardChecked(MakeFromId(env) if isinstance(env, str) else env),
            n_envs=n_envs or cfg.n_envs,
            seed=seed,
            vec_env_cls=vec_cls,
            vec_env_kwargs=vec_kwargs,
            env_kwargs=env_kwargs(env, cfg, data, part) or None,
            wrapper_class=ObservationCheck,
        )
    venv = VecFiniteGuard(venv, cfg.nonfinite_policy)
    if cfg.normalize_obs:
        venv = VecNormalize(venv, norm_obs=True, norm_reward=False, clip_obs=cfg.clip_obs)
    return venv


def find_normalizer(venv: VecEnv) -> VecNormalize | None:
    while isinstance(venv, VecEnvWrapper):
        if isinstance(venv, VecNormalize):
            return venv
        venv = venv.venv
    return None
