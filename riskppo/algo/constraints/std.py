"""The standard-deviation constraint: max E[R] s.t. std(R) ≤ ``risk.std_limit``, by a Lagrangian
— the mean–variance criterion as a constraint (Tamar, Di Castro & Mannor 2012, "Policy
gradients with variance related risk criteria"; Prashanth & Ghavamzadeh 2013).

``R`` is a segment's return, as for the CVaR constraint: an episode, or a ``risk.cvar_horizon``
-step window (:func:`riskppo.core.segment_returns`). Per rollout:

1. the empirical mean ``μ`` and standard deviation ``σ`` of the last ``risk.cvar_window``
   finished segments are the estimate of the constraint; until ``risk.cvar_min_segments`` have
   finished, λ holds and there is no signal;
2. λ moves by projected dual ascent or the PID Lagrangian (``risk.lambda_update`` and its
   settings) on the relative violation ``(σ − limit) / limit``;
3. the policy gradient of the variance is a score-function one,
   ``∇Var(R) = E[((R − μ)² − σ²) ∇log p(τ)]`` (``σ²``: a baseline), so every step of a segment
   that finished in this rollout gets the cost advantage ``A_std = −((R − μ)² − σ²)`` (0 on
   unfinished segments); the policy sees ``(A + λ·Â_std)/(1+λ)`` as with CVaR (R-RISK-4).

Gradients of σ and of σ² point the same way; the combination's unit scale for ``Â_std`` makes
the factor ``1/(2σ)`` between them irrelevant. No risk head: the estimate is empirical.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from riskppo import core
from riskppo.algo.constraints.base import (
    ConstraintInput,
    ConstraintStep,
    Lagrangian,
    initial_pid,
    multiplier_step,
)
from riskppo.config import Config

__all__ = ["StdConstraint", "StdState", "std_advantage"]


@dataclass
class StdState:
    """Carried between rollouts: λ and its controller, open segments, recent segment returns."""

    lam: float
    acc: Tensor  # [N] float64 return accumulated in each env's open segment
    length: Tensor  # [N] long its length
    recent: deque[float]  # returns of the last ``risk.cvar_window`` finished segments
    pid: core.PIDLagrangeState  # the PID Lagrangian's state (unused with lambda_update: dual)

    def check(self) -> None:
        """λ finite and ≥ 0, segment lengths ≥ 0 (R-REL-3)."""
        if self.lam < 0 or not math.isfinite(self.lam):
            raise ValueError(f"risk/lam must be a finite number >= 0, not {self.lam}")
        if bool((self.length < 0).any()):
            raise ValueError("risk/length has negative segment lengths")


def std_advantage(seg_return: Tensor, mean: float, var: float) -> Tensor:
    """``−((R − μ)² − σ²)`` per step ``[T, N]`` of the segment returns ``R`` (NaN: unfinished,
    whose steps get 0): the negative score-function weight of the variance's gradient."""
    done = torch.isfinite(seg_return)
    r = torch.where(done, seg_return, torch.zeros_like(seg_return))
    return torch.where(done, var - (r - mean) ** 2, torch.zeros_like(r))


@dataclass(frozen=True)
class StdConstraint(Lagrangian[StdState]):
    """``std(R) ≤ risk.std_limit`` by a Lagrangian (module docstring)."""

    part: ClassVar[str] = "std"

    def initial_state(self, n_envs: int) -> StdState:
        return StdState(
            lam=self.cfg.risk.lambda_init,
            acc=torch.zeros(n_envs, dtype=torch.float64),
            length=torch.zeros(n_envs, dtype=torch.long),
            recent=deque(maxlen=self.cfg.risk.cvar_window),
            pid=initial_pid(self.cfg.risk),
        )

    def after_rollout(self, state: StdState, x: ConstraintInput) -> ConstraintStep[StdState]:
        r = self.cfg.risk
        assert r.std_limit is not None
        dev = x.rewards.device
        info = core.segment_returns(
            x.rewards, x.dones, r.cvar_horizon, state.acc.to(dev), state.length.to(dev)
        )
        finished = info.seg_return[info.ends & torch.isfinite(info.seg_return)]
        recent = deque(state.recent, maxlen=r.cvar_window)
        recent.extend(finished.tolist())
        metrics = {"risk/segments_finished": float(finished.numel())}
        lam, pid = state.lam, state.pid
        adv = torch.zeros_like(info.seg_return)
        if len(recent) >= max(r.cvar_min_segments, 2):
            returns = torch.tensor(list(recent), dtype=torch.float64)
            mean, var = float(returns.mean()), float(returns.var(correction=0))
            std = math.sqrt(var)
            violation = (std - r.std_limit) / r.std_limit
            lam, pid = multiplier_step(r, lam, pid, violation)
            adv = std_advantage(info.seg_return, mean, var)
            metrics.update({"risk/std_empirical_segment": std, "risk/std_violation": violation})
        metrics.update({"risk/lambda": lam, "risk/std_adv_abs_mean": float(adv.abs().mean())})
        if r.lambda_update == "pid":
            metrics.update({"risk/pid_p": pid.p, "risk/pid_i": pid.i, "risk/pid_d": pid.d})
        new = StdState(lam, info.acc_after.cpu(), info.len_after.cpu(), recent, pid)
        return ConstraintStep(new, lam, adv.to(x.rewards.dtype), metrics)

    @staticmethod
    def build(cfg: Config) -> StdConstraint | None:
        """The constraint of ``cfg``: on when ``risk.std_limit`` is set."""
        return StdConstraint(cfg) if cfg.risk.std_limit is not None else None
