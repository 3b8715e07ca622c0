"""The CVaR constraint (R-RISK-2, R-RISK-4): max E[R] s.t. CVaR_α(R) ≥ limit, by a Lagrangian.

Per rollout (see ``docs/risk.md``, "Which CVaR each consumer reads"):

1. split the rollout into segments (episodes, or ``cvar_horizon``-step windows) and give each
   step its segment's return (:func:`riskppo.core.segments.segment_returns`);
2. the **empirical** CVaR and VaR of the last ``cvar_window`` finished segments are the
   trustworthy estimate of the constraint: the multiplier update reads that CVaR (as
   PPO-Lagrangian reads the empirical episode cost) and ``ν`` is that VaR — so λ cannot wind up
   on a risk head that has not learned yet. Until ``cvar_min_segments`` segments have finished,
   λ holds and ``ν`` comes from the risk head;
3. the risk head predicts quantiles of the segment return-to-go; pooled over the rollout's
   segment-start states they give the *predicted* CVaR (``core.cvar_from_quantiles``,
   differentiable, monitored with its error against the empirical one), and per step they give
   the baseline of the CVaR advantage (:func:`riskppo.core.segments.cvar_advantage`);
4. λ moves by projected dual ascent or the PID Lagrangian on the relative violation
   ``(limit − CVaR_emp) / max(|limit|, σ)`` (σ: spread of segment returns), so the gains do not
   depend on the return scale. The estimate step combines ``A`` and ``A_cvar`` with
   :func:`riskppo.core.lagrangian_advantage`.

:class:`CVaRConstraint` plugs this into the training loop
(:mod:`riskppo.algo.constraints.base`); :class:`RiskHeadTerm` is the risk head's loss, a term
of the critic's part of the minibatch loss. The state is :class:`RiskState`
(``TrainingState.risk``), checkpointed with the training state.
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
from riskppo.algo.losses import LossTerm, TermInput, risk_head_loss
from riskppo.algo.returns import (
    Rescale,
    ReturnScaling,
    check_scaling,
    initial_scaling,
    rescales_outputs,
    update_scaling,
)
from riskppo.config import Config

__all__ = [
    "RISK_TARGETS",
    "CVaRConstraint",
    "RiskEstimate",
    "RiskHeadTerm",
    "RiskState",
    "initial_risk_state",
    "multiplier_step",
    "risk_estimate",
]

RISK_TARGETS = "risk_targets"
"""``ChunkBatch.aux`` key of the risk head's targets ``[L, B]`` (NaN: segment unfinished)."""


@dataclass
class RiskState:
    """Carried between rollouts: λ and its controller, open segments, the risk head's scaling,
    the returns of recently finished segments."""

    lam: float
    acc: Tensor  # [N] return accumulated in each env's open segment
    length: Tensor  # [N] its length
    scaling: ReturnScaling  # normalisation of the risk head (segment return-to-go, PopArt)
    recent: deque[float]  # returns of the last ``risk.cvar_window`` finished segments
    pid: core.PIDLagrangeState  # the PID Lagrangian's state (unused with lambda_update: dual)

    def check(self) -> None:
        """λ finite and ≥ 0, segment lengths ≥ 0, the head's scaling valid (R-REL-3)."""
        check_scaling("risk/scaling", self.scaling)
        if self.lam < 0 or not math.isfinite(self.lam):
            raise ValueError(f"risk/lam must be a finite number >= 0, not {self.lam}")
        if bool((self.length < 0).any()):
            raise ValueError("risk/length has negative segment lengths")


def initial_risk_state(cfg: Config, n_envs: int) -> RiskState:
    return RiskState(
        lam=cfg.risk.lambda_init,
        acc=torch.zeros(n_envs, dtype=torch.float64),
        length=torch.zeros(n_envs, dtype=torch.long),
        scaling=initial_scaling(cfg),
        recent=deque(maxlen=cfg.risk.cvar_window),
        pid=initial_pid(cfg.risk),
    )


RiskEstimate = ConstraintStep[RiskState]
"""What one rollout contributes to the CVaR constraint: ``advantage`` is the CVaR advantage
A_cvar (raw return units), ``batch[RISK_TARGETS]`` the risk head's normalised segment
return-to-go targets ``[T, N]`` (NaN: segment unfinished)."""


def risk_estimate(
    cfg: Config,
    state: RiskState,
    rewards: Tensor,
    dones: Tensor,
    risk_out: Tensor,
) -> RiskEstimate:
    """One rollout of the constraint. ``risk_out`` ``[T, N, K]``: the risk head (normalised)."""
    r = cfg.risk
    alpha = r.cvar_alpha
    dev = rewards.device  # open segments are kept on the CPU (checkpointed), computed on the device
    info = core.segment_returns(
        rewards, dones, r.cvar_horizon, state.acc.to(dev), state.length.to(dev)
    )
    q_rtg = state.scaling.to_raw(risk_out.double().sort(dim=-1).values)  # [T, N, K] raw units
    # Predicted distribution of R: pooled quantiles at the segment-start states (acc = 0).
    pooled = q_rtg[info.starts].reshape(-1)
    if pooled.numel() == 0:  # no segment starts here: every step continues an open segment
        pooled = (info.acc_before.unsqueeze(-1) + q_rtg).reshape(-1)
    cvar_pred, nu_pred = core.empirical_cvar(pooled, alpha)
    finished = info.seg_return[info.ends & torch.isfinite(info.seg_return)]
    recent = deque(state.recent, maxlen=r.cvar_window)
    recent.extend(finished.tolist())
    metrics = {
        "risk/cvar_pred_segment": float(cvar_pred),
        "risk/segments_finished": float(finished.numel()),
    }
    lam, pid, nu = state.lam, state.pid, float(nu_pred)
    if len(recent) >= r.cvar_min_segments:
        cvar_emp, nu_emp = core.empirical_cvar(torch.tensor(list(recent)), alpha)
        nu = float(nu_emp)
        metrics["risk/cvar_empirical_segment"] = float(cvar_emp)
        metrics["risk/cvar_pred_error"] = float(cvar_pred) - float(cvar_emp)
        if r.cvar_limit is not None:
            # Relative violation: in units of the target, or of the segment-return spread when
            # the target is near 0, so the gains mean the same for returns of any scale.
            target = r.cvar_limit / r.cvar_margin  # margin 1: the limit itself, bit for bit
            moments = state.scaling.moments
            spread = float(moments.var.sqrt()) if moments.count > 1 else 1.0
            violation = (target - float(cvar_emp)) / max(abs(target), spread, 1e-8)
            lam, pid = multiplier_step(r, state.lam, pid, violation)
            metrics["risk/cvar_violation"] = violation
    a_cvar = core.cvar_advantage(info, q_rtg, nu, alpha)
    # Risk-head targets: segment return-to-go, y_t = R − acc_t, on finished segments only;
    # statistics updated exactly as for the value critics (the loop PopArt-rescales the head).
    y = info.seg_return - info.acc_before
    scaling, _ = update_scaling(cfg, state.scaling, y[torch.isfinite(y)])
    new_state = RiskState(lam, info.acc_after.cpu(), info.len_after.cpu(), scaling, recent, pid)
    metrics.update(
        {
            "risk/lambda": lam,
            "risk/var": nu,
            "risk/cvar_adv_abs_mean": float(a_cvar.abs().mean()),
        }
    )
    if r.lambda_update == "pid":
        metrics.update({"risk/pid_p": pid.p, "risk/pid_i": pid.i, "risk/pid_d": pid.d})
    targets = {RISK_TARGETS: scaling.to_norm(y).float()}
    return RiskEstimate(new_state, lam, a_cvar, metrics, targets)


class RiskHeadTerm(LossTerm):
    """The risk head's quantile loss against the segment return-to-go targets
    (:func:`~riskppo.algo.losses.risk_head_loss`), in the critic's part of the loss (weighted by
    ``vf_coef``, logged in ``value_loss``); a masked mean when traced (no host sync)."""

    name = "risk_head"
    part = "critic"

    def compute(self, x: TermInput) -> tuple[Tensor, dict[str, Tensor]] | None:
        targets = x.mb.aux.get(RISK_TARGETS)
        if targets is None:
            return None
        q = x.policy.risk_output(x.fwd.out).reshape(-1, x.fwd.out.shape[-1])
        return risk_head_loss(q, targets, x.cfg.critic.kappa, masked=x.traced), {}


_RISK_HEAD_TERM = RiskHeadTerm()


@dataclass(frozen=True)
class CVaRConstraint(Lagrangian[RiskState]):
    """``CVaR_α(R) ≥ risk.cvar_limit`` by a Lagrangian (module docstring)."""

    part: ClassVar[str] = "cvar"
    risk_head: ClassVar[bool] = True

    def initial_state(self, n_envs: int) -> RiskState:
        return initial_risk_state(self.cfg, n_envs)

    def after_rollout(self, state: RiskState, x: ConstraintInput) -> RiskEstimate:
        step = risk_estimate(self.cfg, state, x.rewards, x.dones, x.head())
        if rescales_outputs(self.cfg, state.scaling):  # the head follows its statistics (PopArt)
            step.rescales = (Rescale("risk_head", state.scaling, step.state.scaling),)
        return step

    def loss_terms(self) -> tuple[LossTerm, ...]:
        return (_RISK_HEAD_TERM,)

    @staticmethod
    def build(cfg: Config) -> CVaRConstraint | None:
        """The constraint of ``cfg``: on when ``risk.cvar_limit`` is set."""
        return CVaRConstraint(cfg) if cfg.risk.cvar_limit is not None else None
