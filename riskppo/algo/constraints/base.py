"""What a constraint is to the training loop: max E[R] s.t. a risk measure of R within a limit,
by a Lagrangian (as OmniSafe's PPO-Lagrangian and CPPO-PID plug into PPO through their
multiplier update and advantage combination).

A :class:`Constraint` is generic over its own state ``S`` (a dataclass the training state holds
as ``TrainingState.risk`` and checkpoints whole) and plugs into one training iteration at
named points:

* :meth:`~Constraint.end_segments` when the envs are reset (every open segment ends, R-REL-4);
* :meth:`~Constraint.after_rollout` in the estimate step: its statistics of the rollout, the
  multiplier step and its logs (:class:`ConstraintStep`: its advantage, the per-step inputs of
  its loss terms, the PopArt rescales of its heads);
* :meth:`~Constraint.advantage` and :meth:`~Constraint.scale_return`: what the policy loss sees
  — the return advantage and the constraint's combined on bounded scales,
  ``(A + λ·Â_c)/(1+λ)`` (:func:`riskppo.core.lagrangian_advantage`), and any other return
  signal (the pathwise slopes) divided by ``1+λ`` alike;
* :meth:`~Constraint.loss_terms`: its auxiliary loss terms (e.g. the CVaR risk head's loss).

:class:`Lagrangian` has the shared parts (the combination, the multiplier step by projected dual
ascent or the PID Lagrangian of Stooke, Achiam & Abbeel 2020, the segment reset); a
constraint is one file registered in :mod:`riskppo.algo.constraints`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

import torch
from torch import Tensor

from riskppo import core
from riskppo.algo.losses import LossTerm
from riskppo.algo.returns import Rescale
from riskppo.config import Config, RiskConfig

__all__ = [
    "Constraint",
    "ConstraintInput",
    "ConstraintState",
    "ConstraintStep",
    "Lagrangian",
    "multiplier_step",
]


class ConstraintState(Protocol):
    """A constraint's state between rollouts (a dataclass: :mod:`riskppo.persist.codec` saves
    it whole and decodes it on the initial state)."""

    lam: float  # the Lagrange multiplier λ ≥ 0

    def check(self) -> None:
        """What types cannot say of a decoded checkpoint: ``ValueError`` naming the field."""
        ...


S = TypeVar("S", bound=ConstraintState)


@dataclass(frozen=True)
class ConstraintInput:
    """What a constraint reads of one rollout."""

    rewards: Tensor  # [T, N] raw env rewards
    dones: Tensor  # [T, N] bool: the episode ended with step t (terminated or truncated)
    # the risk head's outputs [T, N, K] (normalised), computed when called: only a constraint
    # with ``risk_head`` may call it
    head: Callable[[], Tensor]


@dataclass
class ConstraintStep(Generic[S]):
    """What one rollout contributes to a constraint."""

    state: S  # the constraint's state after this rollout
    lam: float  # λ after this rollout's update: the weight of the constraint in this update
    advantage: Tensor  # [T, N] the constraint's advantage, raw units (0: no signal)
    metrics: dict[str, float]  # logged as they are named (``risk/...``)
    # [T, N, ...] per-step inputs of its loss terms, by ChunkBatch.aux key
    batch: dict[str, Tensor] = field(default_factory=dict)
    rescales: tuple[Rescale, ...] = ()  # PopArt rescales of its heads, applied before the update


class Constraint(Protocol[S]):
    """The points where a constraint plugs into a training iteration (module docstring)."""

    @property
    def risk_head(self) -> bool:
        """Whether the policy needs a risk head (quantiles of the segment return-to-go)."""
        ...

    def initial_state(self, n_envs: int) -> S: ...

    def end_segments(self, state: S) -> S: ...

    def after_rollout(self, state: S, x: ConstraintInput) -> ConstraintStep[S]: ...

    def advantage(self, adv_norm: Tensor, step: ConstraintStep[S], per_env: bool) -> Tensor:
        """The advantage ``[T, N]`` the policy loss sees, from the normalised return one."""
        ...

    def scale_return(self, x: Tensor, step: ConstraintStep[S]) -> Tensor:
        """Another return signal (``[T, N]``) as the return's part of the advantage is scaled."""
        ...

    def loss_terms(self) -> tuple[LossTerm, ...]: ...


def multiplier_step(
    r: RiskConfig, lam: float, pid: core.PIDLagrangeState, violation: float
) -> tuple[float, core.PIDLagrangeState]:
    """λ after one (relative) violation measurement: dual ascent or PID (R-RISK-2, R-RISK-4),
    with the multiplier settings of the ``risk`` section."""
    if r.lambda_update == "pid":
        return core.pid_lagrange_step(
            pid,
            violation,
            kp=r.pid_kp,
            ki=r.pid_ki,
            kd=r.pid_kd,
            ema=r.pid_ema,
            lam_max=r.lambda_max,
            i_max=r.pid_i_max,
        )
    cap = core.dual_cap(r.lambda_max, r.dual_lambda_max)  # anti wind-up, as pid_i_max
    return core.lagrange_step(lam, violation, r.lambda_lr, cap), pid


def initial_pid(r: RiskConfig) -> core.PIDLagrangeState:
    """The PID integral starts where ``lambda_init`` puts it (λ = ki·I with no P/D signal)."""
    return core.PIDLagrangeState(integral=r.lambda_init / r.pid_ki if r.pid_ki > 0 else 0.0)


@dataclass(frozen=True)
class Lagrangian(Generic[S]):
    """The shared parts of a Lagrangian constraint over segments (module docstring); ``part``
    names its share of the advantage in the logs (``risk/adv_<part>_part_abs_mean``)."""

    cfg: Config
    part: ClassVar[str] = "constraint"
    risk_head: ClassVar[bool] = False

    def end_segments(self, state: S) -> S:
        """Every env's open segment ends: its accumulated return and length restart at 0 (for a
        state with ``acc`` and ``length`` per env)."""
        st: Any = state
        return cast(
            S,
            dataclasses.replace(
                st, acc=torch.zeros_like(st.acc), length=torch.zeros_like(st.length)
            ),
        )

    def advantage(self, adv_norm: Tensor, step: ConstraintStep[S], per_env: bool) -> Tensor:
        """R-RISK-4: ``(A + λ·Â_c)/(1+λ)``, Â_c on unit scale — λ cannot swamp the policy.
        Logs each part's mean magnitude in ``step.metrics``."""
        combined, unit = core.lagrangian_advantage(
            adv_norm, step.advantage, step.lam, per_env=per_env
        )
        weight = 1.0 + step.lam
        step.metrics["risk/adv_return_part_abs_mean"] = float(adv_norm.abs().mean() / weight)
        step.metrics[f"risk/adv_{self.part}_part_abs_mean"] = float(
            step.lam * unit.abs().mean() / weight
        )
        return combined

    def scale_return(self, x: Tensor, step: ConstraintStep[S]) -> Tensor:
        return x / (1.0 + step.lam)

    def loss_terms(self) -> tuple[LossTerm, ...]:
        return ()
