"""Teachers for ``bc.source: teacher`` (R-ALG-12): a trading baseline's action on the agent's own
bars, or a user callable of the bar index or of the raw observation (:mod:`riskppo.train.bc`).

A module of its own because it needs the trading env (pandas): :func:`riskppo.train.bc.attach_bc`
imports it only when a teacher is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from riskppo.config import BCConfig, ConfigError
from riskppo.envs.strategies import nearest_actions, strategy_exposures, strategy_signals
from riskppo.envs.trading import TradingEnv
from riskppo.train.bc import Teacher, base_env

__all__ = ["build_teacher", "callable_teacher", "strategy_teacher", "trading_env"]


def strategy_teacher(env: TradingEnv, name: str) -> Teacher:
    """The action that makes ``env`` hold baseline ``name``'s exposure at each bar
    (:func:`~riskppo.envs.strategies.strategy_signals`): a per-bar lookup, vectorised."""
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
