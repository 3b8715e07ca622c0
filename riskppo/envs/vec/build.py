"""Building the vectorised environment: SB3 VecEnvs, a finite-input guard, VecNormalize.

Order of wrappers: ``VecEnv (Monitor per env) → VecFiniteGuard → VecNormalize(obs only)``, so a
NaN/inf from an env is caught before it can reach the normaliser statistics (R-REL-5). With
normalisation the guard is held inside the normaliser (:class:`FiniteVecNormalize`), so the chain
SB3 walks is its own; :func:`sb3_view` leaves an outer guard out of what ``get_env`` returns.

A reward that is not a number (``None``, an array, a string) or an observation of the wrong kind
(``None``, a string, the wrong shape, not numeric) is found inside each env (:class:`OutputCheck`,
also in ``SubprocVecEnv`` workers), passed on as NaN with a note in
the step's (or reset's) info, and raised by :class:`VecFiniteGuard` as an :class:`EnvOutputError`
naming the env index, the step and the field, whatever ``nonfinite_policy`` says. With
``vec_env: subproc``, ``env.step_timeout`` bounds how long one ``step()`` may take
(:class:`TimeoutSubprocVecEnv`).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecEnvWrapper,
    VecNormalize,
)

from riskppo.config import ConfigError, DataConfig, EnvConfig, RiskConfig
from riskppo.envs.kwargs_check import check_env_kwargs
from riskppo.envs.registration import env_kind, env_spec, register_envs, resolve_overlay
from riskppo.envs.vec.native import from_gym_vector, native_vec_env

EnvSpec = str | Callable[[], gym.Env] | VecEnv | VectorEnv


class NonFiniteInputError(RuntimeError):
    """An environment produced a NaN or infinite observation or reward."""


class EnvOutputError(RuntimeError):
    """An environment returned something of the wrong kind, or did not return in time."""


class ObservationError(EnvOutputError, ValueError):
    """An observation of the wrong kind (a ``ValueError`` too, as it was before it named the env
    index and step)."""


# Info key under which OutputCheck notes a bad output: (what, what to do).
BAD_OUTPUT_KEY = "riskppo/bad_output"


def describe(value: Any) -> str:
    """A short description of what an env returned, for an error message."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    return f"{value!r} ({type(value).__name__})"[:200]


class VecFiniteGuard(VecEnvWrapper):
    """Raise (or, with ``policy='skip'``, zero and count) non-finite observations and rewards.

    The error names the env index, the step counter and the field (R-REL-5).
    """

    def __init__(self, venv: VecEnv, policy: str = "raise") -> None:
        super().__init__(venv)
        self.policy = policy
        self.n_steps = 0
        self.n_skipped = 0

        # A bad observation is marked by NaN only in a float space; otherwise notes are read
        # on every step (OutputCheck).
        dtype = getattr(venv.observation_space, "dtype", None)
        self._read_notes = dtype is not None and np.dtype(dtype).kind != "f"

    def reset(self) -> Any:
        obs = self.venv.reset()
        reset_infos = getattr(self.venv, "reset_infos", None)
        if self._read_notes and reset_infos is not None:
            self._raise_noted(reset_infos)
        return self._check_obs(obs, "reset observation", reset_infos)

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.n_steps += 1
        if self._read_notes:
            self._raise_noted(infos, dones)
        obs = self._check_obs(obs, "observation", infos, dones)
        bad = ~np.isfinite(rewards)
        if bad.any():
            # OutputCheck turned a reward that is no number into NaN with a note: only then are
            # the infos read (not on every step). Never skipped: such a reward is a bug.
            self._raise_noted(infos, dones)
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
                self._raise_noted(infos, dones)
                info["terminal_observation"] = self._fix(np.asarray(term), "terminal observation")
        return obs, rewards, dones, infos

    def _raise_noted(self, infos: Sequence[dict[str, Any]], dones: Any = None) -> None:
        """Raise the first bad output noted by OutputCheck in ``infos`` (or,
        for an env that was just reset, in its reset info)."""
        reset_infos = getattr(self.venv, "reset_infos", None)
        for k, info in enumerate(infos):
            note = info.get(BAD_OUTPUT_KEY)
            if note is None and reset_infos is not None and (dones is None or dones[k]):
                note = reset_infos[k].get(BAD_OUTPUT_KEY)
            if note is not None:
                what, fix = note
                error = ObservationError if "'observation'" in what else EnvOutputError
                raise error(f"env {k} {what}, at vec step {self.n_steps}; {fix}")

    def _check_obs(
        self, obs: Any, field: str, infos: Sequence[dict[str, Any]] | None = None, dones: Any = None
    ) -> Any:
        flat = np.asarray(obs).reshape(len(obs), -1)
        finite = np.isfinite(flat)
        if finite.all():
            return obs
        if infos is not None:
            self._raise_noted(infos, dones)  # a bad observation (NaN-marked): never skipped
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


class FiniteVecNormalize(VecNormalize):
    """SB3's ``VecNormalize`` of observations over ``guard``'s env, stepping through ``guard``
    (a :class:`VecFiniteGuard`) so that a NaN/inf is caught before it reaches the statistics.

    The guard is held, not wrapped: the chain is ``VecNormalize → VecEnv`` as SB3 builds it, so
    SB3's ``sync_envs_normalization`` (``EvalCallback``) walks it like its own. ``reset`` and
    ``step_wait`` are SB3's ``VecNormalize.reset`` / ``step_wait`` with ``norm_reward=False``.
    """

    def __init__(self, guard: VecFiniteGuard, clip_obs: float) -> None:
        super().__init__(guard.venv, norm_obs=True, norm_reward=False, clip_obs=clip_obs)
        self.guard = guard

    def reset(self) -> Any:
        obs = self.guard.reset()
        self.old_obs = obs
        self.returns = np.zeros(self.num_envs)
        if self.training:
            self.obs_rms.update(obs)
        return self.normalize_obs(obs)

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.guard.step_wait()
        self.old_obs, self.old_reward = obs, rewards
        if self.training:
            self.obs_rms.update(obs)
            self._update_reward(rewards)
        for i in np.flatnonzero(dones):
            if "terminal_observation" in infos[i]:
                infos[i]["terminal_observation"] = self.normalize_obs(
                    infos[i]["terminal_observation"]
                )
        self.returns[dones] = 0
        return self.normalize_obs(obs), rewards, dones, infos

    def __getstate__(self) -> dict[str, Any]:
        """What ``save`` pickles: SB3's state, without the guard (it holds the env)."""
        state = super().__getstate__()
        state["guard_policy"] = state.pop("guard").policy
        return state

    def set_venv(self, venv: VecEnv) -> None:
        """After ``VecNormalize.load(path, venv)``: a fresh guard over ``venv``."""
        super().set_venv(venv)
        self.guard = VecFiniteGuard(venv, self.__dict__.pop("guard_policy", "raise"))


def sb3_view(venv: VecEnv) -> VecEnv:
    """``venv`` as SB3 would have built it: without an outer :class:`VecFiniteGuard`, so that
    SB3's comparisons of a model's env (``EvalCallback``) see the user's or SB3's own VecEnv."""
    return venv.venv if isinstance(venv, VecFiniteGuard) else venv


class InProcessVecEnv(DummyVecEnv):
    """SB3's ``DummyVecEnv`` without the per-step ``deepcopy`` of the info dicts and of the
    observation buffer.

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

    def _obs_from_buf(self) -> Any:
        # SB3 deep-copies the dict of observation buffers (≈ 15 µs); for a Box space (one buffer,
        # key None) that is the same as one array copy
        if self.keys == [None]:
            (buf,) = self.buf_obs.values()
            return buf.copy()
        return super()._obs_from_buf()


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


class OutputCheck(gym.Wrapper):
    """Catch outputs of the user's env that are not what its spaces declare (R-REL-5), directly
    around it (below SB3's ``Monitor``, which would fail on a reward that is no number with a
    bare ``TypeError``): a reward that is not a number, an observation that does not fit the
    declared Box (``None``, a string, the wrong shape, not numeric). Such an output is passed
    on as NaN (an observation in an integer space: zeros) with a note in the step's or reset's
    info, raised by :class:`VecFiniteGuard` naming the env index and the step (raising here
    would kill a ``SubprocVecEnv`` worker without a message, and a numpy error deep inside the
    VecEnv names nothing). One wrapper for both: a layer less on every env step.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(
                f"{env}: observation space must be a Box (flatten Dict spaces first), got {space}"
            )
        self._shape = tuple(space.shape)
        self._dtype = np.dtype(space.dtype)
        self._steps = 0  # steps since the last reset

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self._steps = 0
        return self._check_obs(obs, info, "reset()"), info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        if not isinstance(reward, float | int | np.floating | np.integer) or isinstance(
            reward, bool | np.bool_
        ):
            reward = self._check_reward(reward, info)
        return self._check_obs(obs, info, "step()"), reward, terminated, truncated, info

    def _check_obs(self, obs: Any, info: dict[str, Any], where: str) -> Any:
        # the common case first and cheaply: a numeric ndarray of the declared shape
        if isinstance(obs, np.ndarray) and obs.shape == self._shape and obs.dtype.kind in "fiub":
            return obs
        try:
            shape: tuple[int, ...] | None = np.shape(obs)
        except ValueError:  # a ragged sequence
            shape = None
        if shape == self._shape and np.asarray(obs).dtype.kind in "fiub":
            return obs
        if shape != self._shape:
            problem = (
                f"{where} returned an observation of shape {shape}, but its observation_space "
                f"has shape {self._shape}"
            )
        else:
            problem = f"{where} returned a non-numeric observation"
        at = "at reset" if where == "reset()" else f"at step {self._steps} of its episode"
        info[BAD_OUTPUT_KEY] = (
            f"({self.env.unwrapped}) {problem} (field 'observation': {describe(obs)}), {at}",
            f"{where} must return an observation that fits the env's observation_space "
            f"(numbers, shape {self._shape})",
        )
        return np.full(self._shape, np.nan if self._dtype.kind == "f" else 0, self._dtype)

    def _check_reward(self, reward: Any, info: dict[str, Any]) -> float:
        """A reward that is not a plain number: a one-element numeric array is taken as its
        value; anything else becomes NaN with a note in ``info``."""
        arr = np.asarray(reward) if isinstance(reward, np.ndarray | np.generic) else None
        if arr is not None and arr.size == 1 and arr.dtype.kind in "fiu":
            return float(arr.reshape(()))
        info[BAD_OUTPUT_KEY] = (
            f"({self.env.unwrapped}) returned a field 'reward' that is not a number: "
            f"{describe(reward)}, at step {self._steps} of its episode",
            "step() must return (obs, reward: float, terminated, truncated, info)",
        )
        return math.nan


class OutputChecked:
    """An env factory whose envs are wrapped in :class:`OutputCheck` (picklable for
    ``SubprocVecEnv``)."""

    def __init__(self, factory: Callable[..., gym.Env]) -> None:
        self.factory = factory

    def __call__(self, **kwargs: Any) -> gym.Env:
        return OutputCheck(self.factory(**kwargs))


class WorkerIgnoresCtrlC:
    """An env factory for ``SubprocVecEnv`` workers that ignore SIGINT. Ctrl-C in a terminal
    reaches every process of the group, and a worker it ends breaks the main process's pipe
    mid-rollout; the main process alone decides when to stop (:mod:`riskppo.runs.interrupt`)
    and closes its workers."""

    def __init__(self, factory: Callable[..., gym.Env]) -> None:
        self.factory = factory

    def __call__(self, **kwargs: Any) -> gym.Env:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # runs in the worker process
        return self.factory(**kwargs)


class MakeFromId:
    """``gym.make(env_id, **kwargs)`` as a factory, so SB3's ``make_vec_env`` calls it like a
    user's factory instead of making the env from the id itself.

    Given an id, ``make_vec_env`` asks for ``render_mode="rgb_array"`` and retries without it
    when the constructor raises ``TypeError``. riskppo renders nothing, so it passes no
    ``render_mode`` at all: the env gets its own default (``None`` for Gymnasium's envs), and an
    env whose constructor takes no ``render_mode`` is made like any other. A ``render_mode`` in
    ``env.kwargs`` is passed on as given.

    It carries the id's registered ``EnvSpec``, so ``SubprocVecEnv`` workers (fresh processes,
    where riskppo's or a user's ids are not registered) make the same env. A ``module:Name``
    id imports ``module`` first (:func:`~riskppo.envs.registration.env_spec`).
    """

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self.spec = env_spec(env_id)

    def __call__(self, **kwargs: Any) -> gym.Env:
        return gym.make(self.spec, **kwargs)


class OneEnv:
    """A ``gym.Env`` instance as the factory of a one-env VecEnv (an instance cannot be copied
    into several envs: :func:`env_factory`)."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env

    def __call__(self, **kwargs: Any) -> gym.Env:
        if kwargs:
            raise ConfigError(
                f"env.kwargs {sorted(kwargs)} cannot be applied to an env that is already made; "
                "pass them to gym.make, or pass the env id or a factory"
            )
        return self.env


def env_factory(env: str | Callable[[], gym.Env] | gym.Env, n_envs: int) -> Callable[..., gym.Env]:
    """What makes each of the ``n_envs`` envs: ``gym.make`` for an id, the user's factory, or a
    ``gym.Env`` instance itself (only for ``n_envs=1``; otherwise one line saying what to pass)."""
    if isinstance(env, str):
        return MakeFromId(env)
    if isinstance(env, gym.Env):
        if n_envs != 1:
            made = env.spec.id if env.spec is not None else "..."
            raise ConfigError(
                f"env: a {type(env).__name__} instance is one environment and cannot be copied "
                f"into n_envs={n_envs}; pass n_envs=1 to train on it, or a factory "
                f"(env=lambda: gym.make({made!r})) or the env id for {n_envs} envs"
            )
        return OneEnv(env)
    return env


def env_kwargs(
    env: EnvSpec | gym.Env,
    cfg: EnvConfig,
    data: DataConfig | None,
    part: str,
    risk: RiskConfig | None = None,
    frame: Any = None,
) -> dict[str, Any]:
    """Keyword arguments for the env factory; the trading env also gets its data and split (and
    ``frame``, a user's DataFrame of bars, instead of the data's file), and a risk ``overlay``
    its limit from ``risk`` (see ``registration.resolve_overlay``). An id's ``env.kwargs`` are
    checked against its constructor (:func:`check_env_kwargs`)."""
    if isinstance(env, str):
        check_env_kwargs(env, cfg.kwargs)
    kwargs = resolve_overlay(cfg.kwargs, risk)
    kind = env_kind(env)
    if kind is not None and data is not None:  # a bar env: its data section's keywords
        kwargs.update(kind.data_kwargs(data), part=part)
        if frame is not None:  # a single-asset kind's bars (DistributionalPPO(df=...))
            kwargs["frame"] = frame
    return kwargs


def build_vec_env(
    env: EnvSpec | gym.Env,
    cfg: EnvConfig,
    seed: int,
    data: DataConfig | None = None,
    *,
    part: str = "train",
    n_envs: int | None = None,
    risk: RiskConfig | None = None,
    frame: Any = None,
) -> VecEnv:
    """Make a VecEnv from an id, a factory, a ``gym.Env`` instance (one env) or a ready VecEnv
    (seeded per env).

    ``part`` selects the train / val / test period of the trading env (ignored elsewhere);
    ``risk`` completes a trading env's ``overlay`` and ``frame`` (a pandas DataFrame of bars)
    replaces its data file (see :func:`env_kwargs`).
    """
    n = n_envs or cfg.n_envs
    if isinstance(env, VecEnv):
        venv: VecEnv = env
    elif (native := _native_vec_env(env, cfg, n, seed, data, part, risk, frame)) is not None:
        venv = native
    else:
        assert not isinstance(env, VectorEnv)  # _native_vec_env took it
        register_envs()
        vec_cls: type[DummyVecEnv] | type[SubprocVecEnv] = (
            SubprocVecEnv if cfg.vec_env == "subproc" else InProcessVecEnv
        )
        vec_kwargs: dict[str, Any] | None = None
        if cfg.vec_env == "subproc" and cfg.step_timeout is not None:
            vec_cls, vec_kwargs = TimeoutSubprocVecEnv, {"step_timeout": cfg.step_timeout}
        factory: Callable[..., gym.Env] = OutputChecked(env_factory(env, n))
        if cfg.vec_env == "subproc":
            factory = WorkerIgnoresCtrlC(factory)
        venv = make_vec_env(
            factory,
            n_envs=n,
            seed=seed,
            vec_env_cls=vec_cls,
            vec_env_kwargs=vec_kwargs,
            env_kwargs=env_kwargs(env, cfg, data, part, risk, frame) or None,
        )
    guard = VecFiniteGuard(venv, cfg.nonfinite_policy)
    if cfg.normalize_obs:
        return FiniteVecNormalize(guard, cfg.clip_obs)
    return guard


def _native_vec_env(
    env: str | Callable[[], gym.Env] | gym.Env | VectorEnv,
    cfg: EnvConfig,
    n: int,
    seed: int,
    data: DataConfig | None,
    part: str,
    risk: RiskConfig | None,
    frame: Any = None,
) -> VecEnv | None:
    """A Gymnasium vector env as a VecEnv, or the env's natively vectorised form for ``n`` envs
    (``env.vectorized``, in-process only; :func:`~riskppo.envs.vec.native.native_vec_env`),
    seeded; ``None`` where ``n`` separate envs are to be made."""
    venv: VecEnv | None = None
    if isinstance(env, VectorEnv):
        venv = from_gym_vector(env)
    elif cfg.vectorized and cfg.vec_env == "dummy" and isinstance(env, str) and n > 1:
        venv = native_vec_env(env, n, env_kwargs(env, cfg, data, part, risk, frame))
    if venv is not None:
        venv.seed(seed)
    return venv


def find_normalizer(venv: VecEnv) -> VecNormalize | None:
    while isinstance(venv, VecEnvWrapper):
        if isinstance(venv, VecNormalize):
            return venv
        venv = venv.venv
    return None
