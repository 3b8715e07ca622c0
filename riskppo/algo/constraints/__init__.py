"""Constraints as plug-ins: the one place they are registered (:data:`CONSTRAINTS`).

A constraint is one file (:mod:`~riskppo.algo.constraints.base` says what it implements, as
OmniSafe's ``cppo_pid.py`` is one file) whose ``build(cfg)`` returns it when the config turns it
on, else None. Built in: the CVaR constraint (``risk.cvar_limit``,
:mod:`~riskppo.algo.constraints.cvar`) and the standard-deviation constraint
(``risk.std_limit``, :mod:`~riskppo.algo.constraints.std`). One constraint at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from riskppo.algo.constraints.base import (
    Constraint,
    ConstraintInput,
    ConstraintState,
    ConstraintStep,
    Lagrangian,
    multiplier_step,
)
from riskppo.algo.constraints.cvar import CVaRConstraint
from riskppo.algo.constraints.std import StdConstraint
from riskppo.config import Config, ConfigError

__all__ = [
    "CONSTRAINTS",
    "Constraint",
    "ConstraintInput",
    "ConstraintState",
    "ConstraintStep",
    "Lagrangian",
    "constraint_for",
    "multiplier_step",
    "needs_risk_head",
]

CONSTRAINTS: dict[str, Callable[[Config], Constraint[Any] | None]] = {
    "cvar": CVaRConstraint.build,
    "std": StdConstraint.build,
}
"""Each constraint's ``build(cfg)``: the constraint when ``cfg`` turns it on, else None."""


def constraint_for(cfg: Config) -> Constraint[Any] | None:
    """The constraint ``cfg`` turns on (None: none). ``ConfigError`` for more than one."""
    on = {name: c for name, build in CONSTRAINTS.items() if (c := build(cfg)) is not None}
    if len(on) > 1:
        raise ConfigError(f"one constraint at a time: the config turns on {sorted(on)}")
    return next(iter(on.values()), None)


def needs_risk_head(cfg: Config) -> bool:
    """Whether the policy of ``cfg`` needs a risk head (its constraint reads one)."""
    c = constraint_for(cfg)
    return c is not None and c.risk_head
