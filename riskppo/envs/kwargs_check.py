"""``env.kwargs`` checked against the env's constructor before any env is made, so a typo is one
line naming the key and the closest valid one, not a ``TypeError`` from inside ``gym.make``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from riskppo.config import ConfigError, suggest
from riskppo.envs.registration import MASKED_IDS, env_kind, named_parameters, register_envs

# Keywords gym.make takes itself (Gymnasium's ``make``), whatever the env's constructor takes.
_MAKE_KWARGS = frozenset({"max_episode_steps", "disable_env_checker", "render_mode"})


def check_env_kwargs(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for the first key of ``kwargs`` (``env.kwargs``) that the
    constructor of registered ``env_id`` does not take. Nothing is checked for an id Gymnasium
    does not know yet or a constructor that takes ``**kwargs``."""
    accepted = accepted_kwargs(env_id)
    if accepted is None:
        return
    for key in kwargs:
        if key == "signals" and env_kind(env_id) is not None:
            raise ConfigError(
                "env.kwargs.signals: set data.signals instead (the columns are read with the data)"
            )
        if key not in accepted:
            hint = suggest(key, sorted(accepted - _MAKE_KWARGS), ("env", "kwargs"))
            raise ConfigError(f"env.kwargs.{key}: {env_id} takes no argument {key!r}; {hint}")


def accepted_kwargs(env_id: str) -> frozenset[str] | None:
    """The keyword arguments ``gym.make(env_id, ...)`` accepts, or ``None`` if unknown."""
    register_envs()  # riskppo's own ids, also when nothing has made one yet in this process
    try:
        spec = gym.spec(env_id)
        creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else None
    except (gym.error.Error, ImportError, AttributeError, ValueError):
        return None
    kind = env_kind(env_id)
    if kind is not None:  # its factory passes its **env_kwargs on to the env class
        return kind.accepted_kwargs() | _MAKE_KWARGS
    if env_id in MASKED_IDS:  # make_masked passes its **kwargs on to gym.make(base_id)
        return accepted_kwargs(MASKED_IDS[env_id])
    if creator is None or _takes_any(creator):
        return None
    return named_parameters(creator) | _MAKE_KWARGS


def _takes_any(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return True
    return not params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
