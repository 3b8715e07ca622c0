"""Teachers for ``bc.source: teacher`` (R-ALG-12): a trading baseline's action on the agent's own
bars, or a user callable of the bar index or of the raw observation, and the
:class:`TeacherRecorder` that labels the agent's observations with it (:mod:`riskppo.algo.bc`).

A module of its own because it needs the trading env (pandas): ``DistributionalPPO.attach_bc``
imports it only when a teacher is asked for, and it imports nothing from ``bc``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecNormalize

from riskppo.config import BCConfig, ConfigError
from riskppo.demos.types import Demonstrations
from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.trading.strategies import nearest_actions, strategy_exposures, strategy_signals
from riskppo.envs.vec.build import find_normalizer

__all__ = [
    "Teacher",
    "TeacherRecorder",
    "build_teacher",
    "callable_teacher",
    "strategy_teacher",
    "teacher_recorder",
    "trading_env",
]

Teacher = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``(obs [N, D] raw float32, bars [N] int64 (−1: unknown)) -> env actions [N, *A]``."""


def strategy_teacher(env: TradingEnv, name: str) -> Teacher:
    """The action that makes ``env`` hold baseline ``name``'s exposure at each bar
    (:func:`~riskppo.envs.trading.strategies.strategy_signals`): a per-bar lookup, vectorised."""
    table = nearest_actions(env, strategy_signals(env, strategy_exposures(env, name)))

    def teacher(obs: np.ndarray, bars: np.ndarray) -> np.ndarray:
        if bool((bars < 0).any()):
            raise RuntimeError(f"bc.teacher={name!r} needs info['bar'] from the trading env")
        return table[bars]

    return teacher


def callable_teacher(
    fn: Callable[[Any], Any], by: Literal["bar", "obs"], env: TradingEnv | None
) -> Teacher:
    """A user function ``bar -> target`` or ``raw observation [D] -> target`` as a teacher.

    On the trading env the target is the env's action target, as for a backtest policy (the
    position without sizing, the signal with ``sizing="vol_target"``), mapped to the nearest
    allowed action; on another env it is the action itself.
    """

    def teacher(obs: np.ndarray, bars: np.ndarray) -> np.ndarray:
        keys = [int(b) for b in bars] if by == "bar" else list(obs)
        targets = [fn(k) for k in keys]
        if env is not None:
            return nearest_actions(env, np.asarray(targets, dtype=np.float64))
        return np.stack([np.asarray(t) for t in targets])

    return teacher


def trading_env(venv: VecEnv) -> TradingEnv | None:
    """The first env of ``venv`` if it is a :class:`TradingEnv` (a copy with subprocesses)."""
    env = base_env(venv).get_attr("unwrapped", [0])[0]
    return env if isinstance(env, TradingEnv) else None


def build_teacher(
    venv: VecEnv, cfg: BCConfig, fn: Callable[[Any], Any] | None, by: Literal["bar", "obs"]
) -> Teacher:
    """The teacher of ``bc.source: teacher``: the user's callable ``fn`` (of the bar or the raw
    observation, ``by``), else the trading baseline ``cfg.teacher``."""
    env = trading_env(venv)
    if fn is not None:
        return callable_teacher(fn, by, env)
    assert cfg.teacher is not None  # attach_bc calls this with a callable or a baseline name
    if env is None:
        raise ConfigError(
            f"bc.teacher={cfg.teacher!r} is a trading baseline: it needs the trading env "
            "(env.id riskppo/Trading-v0)"
        )
    return strategy_teacher(env, cfg.teacher)


def base_env(venv: VecEnv) -> VecEnv:
    """``venv`` without its :class:`VecEnvWrapper` layers."""
    while isinstance(venv, VecEnvWrapper):
        venv = venv.venv
    return venv


class TeacherRecorder(VecEnvWrapper):
    """Labels every observation the vec env returns with ``teacher``'s action.

    Keeps the last ``capacity`` steps: raw observations ``[N, D]`` (before obs normalisation),
    episode starts ``[N]`` and teacher actions ``[N, *A]``. The bar of each observation is
    ``info["bar"]`` (after an automatic reset: the reset info's).
    """

    def __init__(self, venv: VecEnv, teacher: Teacher, capacity: int) -> None:
        super().__init__(venv)
        self.teacher = teacher
        self._rows: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque(maxlen=capacity)
        self._normalizer: VecNormalize | None = find_normalizer(venv)

    def reset(self) -> Any:
        # a reset starts the kept window afresh: what the teacher source holds after a
        # checkpoint boundary (where the envs are reset, R-REL-4) is the same in a resumed run
        self._rows.clear()
        obs = self.venv.reset()
        infos = base_env(self.venv).reset_infos
        self._record(obs, np.ones(self.num_envs, dtype=bool), infos)
        return obs

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        resets = base_env(self.venv).reset_infos
        now = [resets[i] if dones[i] else infos[i] for i in range(self.num_envs)]
        self._record(obs, np.asarray(dones, dtype=bool), now)
        return obs, rewards, dones, infos

    def _record(self, obs: Any, starts: np.ndarray, infos: list[dict[str, Any]]) -> None:
        raw = self._normalizer.get_original_obs() if self._normalizer is not None else obs
        raw = np.asarray(raw, dtype=np.float32).reshape(self.num_envs, -1)
        bars = np.fromiter((int(i.get("bar", -1)) for i in infos), np.int64, self.num_envs)
        actions = np.asarray(self.teacher(raw, bars))
        self._rows.append((raw, starts.copy(), actions))

    def latest_labels(self) -> np.ndarray:
        """The teacher's actions ``[N, *A]`` for the observations just returned."""
        return self._rows[-1][2]

    def recorded(self) -> Demonstrations | None:
        """The kept steps as ``[T, N, ...]`` demonstrations (``None`` before the first reset)."""
        if not self._rows:
            return None
        obs, starts, actions = (np.stack(x) for x in zip(*self._rows))
        return Demonstrations(
            torch.as_tensor(obs), torch.as_tensor(actions), torch.as_tensor(starts)
        )


def _recorder(venv: VecEnv, teacher: Teacher, capacity: int) -> TeacherRecorder:
    """``venv`` itself if it is already a recorder (teacher replaced), else a new wrapper."""
    if isinstance(venv, TeacherRecorder):
        venv.teacher = teacher
        return venv
    return TeacherRecorder(venv, teacher, capacity)


def teacher_recorder(
    venv: VecEnv,
    cfg: BCConfig,
    capacity: int,
    fn: Callable[[Any], Any] | None = None,
    by: Literal["bar", "obs"] = "bar",
) -> TeacherRecorder:
    """``venv`` wrapped in (or, already wrapped, re-pointed to) a recorder of the teacher
    :func:`build_teacher` makes, keeping the last ``capacity`` steps."""
    return _recorder(venv, build_teacher(venv, cfg, fn, by), capacity)
