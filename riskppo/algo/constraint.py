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

The training loop reaches the constraint only through a :class:`Constraint`, at three named
points (as OmniSafe's PPO-Lagrangian and CPPO-PID plug into PPO through their multiplier update
and advantage combination): :meth:`~Constraint.end_segments` when the envs are reset,
:meth:`~Constraint.after_rollout` in the estimate step (segments, CVaR estimates and the
multiplier step) and :meth:`~Constraint.advantage` for the advantage the policy loss sees.
:class:`CVaRConstraint` is this module's constraint, :class:`NoConstraint` the no-op of a run
without ``risk.cvar_limit``. Both are stateless: the state is the training state's
:class:`RiskState` (``TrainingState.risk``), checkpointed with it.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from riskppo import core
from riskppo.algo.returns import ReturnScaling, initial_scaling, update_scaling
from riskppo.config import Config, RiskConfig


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


def initial_risk_state(cfg: Config, n_envs: int) -> RiskState:
    # The PID integral starts where λ_init puts it (λ = ki·I with no P/D signal yet).
    ki = cfg.risk.pid_ki
    integral = cfg.risk.lambda_init / ki if ki > 0 else 0.0
    return RiskState(
        lam=cfg.risk.lambda_init,
        acc=torch.zeros(n_envs, dtype=torch.float64),
        length=torch.zeros(n_envs, dtype=torch.long),
        scaling=initial_scaling(cfg),
        recent=deque(maxlen=cfg.risk.cvar_window),
        pid=core.PIDLagrangeState(integral=integral),
    )


@dataclass
class RiskEstimate:
    """What one rollout contributes to the constraint."""

    a_cvar: Tensor  # [T, N] CVaR advantage A_cvar, raw return units (0: no signal)
    lam: float  # λ after this rollout's update: the weight of the CVaR part in this update
    targets: Tensor  # [T, N] normalised segment return-to-go targets (NaN: segment unfinished)
    state: RiskState
    metrics: dict[str, float]


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
    return RiskEstimate(a_cvar, lam, scaling.to_norm(y).float(), new_state, metrics)


def multiplier_step(
    r: RiskConfig, lam: float, pid: core.PIDLagrangeState, violation: float
) -> tuple[float, core.PIDLagrangeState]:
    """λ after one violation measurement: dual ascent or PID (R-RISK-2, R-RISK-4)."""
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


RiskHead = Callable[[], Tensor]
"""The risk head's outputs over the rollout, ``[T, N, K]`` (normalised), computed when called:
only a constraint reads them (a run without one has no risk head)."""


class Constraint(Protocol):
    """The points where a constraint plugs into one training iteration (module docstring).
    ``state``: the training state's ``risk`` (None without a constraint)."""

    def end_segments(self, state: RiskState | None) -> RiskState | None:
        """The state after every env was reset: every open segment ends (R-REL-4)."""
        ...

    def after_rollout(
        self, state: RiskState | None, rewards: Tensor, dones: Tensor, head: RiskHead
    ) -> RiskEstimate | None:
        """One rollout's part (``rewards``, ``dones`` ``[T, N]``), its multiplier step included;
        None: no constraint."""
        ...

    def advantage(self, adv_norm: Tensor, est: RiskEstimate | None, per_env: bool) -> Tensor:
        """The advantage ``[T, N]`` the policy loss sees, from the normalised return one."""
        ...


@dataclass(frozen=True)
class NoConstraint:
    """A run without a constraint: every point is a no-op."""

    def end_segments(self, state: RiskState | None) -> RiskState | None:
        return state

    def after_rollout(
        self, state: RiskState | None, rewards: Tensor, dones: Tensor, head: RiskHead
    ) -> RiskEstimate | None:
        return None

    def advantage(self, adv_norm: Tensor, est: RiskEstimate | None, per_env: bool) -> Tensor:
        return adv_norm


@dataclass(frozen=True)
class CVaRConstraint:
    """``CVaR_α(R) ≥ risk.cvar_limit`` by a Lagrangian (module docstring)."""

    cfg: Config

    def end_segments(self, state: RiskState | None) -> RiskState | None:
        assert state is not None, "the CVaR constraint needs the training state's risk part"
        return dataclasses.replace(
            state, acc=torch.zeros_like(state.acc), length=torch.zeros_like(state.length)
        )

    def after_rollout(
        self, state: RiskState | None, rewards: Tensor, dones: Tensor, head: RiskHead
    ) -> RiskEstimate | None:
        assert state is not None, "the CVaR constraint needs the training state's risk part"
        return risk_estimate(self.cfg, state, rewards, dones, head())

    def advantage(self, adv_norm: Tensor, est: RiskEstimate | None, per_env: bool) -> Tensor:
        """R-RISK-4: ``(A + λ·Â_cvar)/(1+λ)``, Â_cvar on unit scale — λ cannot swamp the policy.
        Logs each part's mean magnitude in ``est.metrics``."""
        assert est is not None
        combined, a_cvar_unit = core.lagrangian_advantage(
            adv_norm, est.a_cvar, est.lam, per_env=per_env
        )
        weight = 1.0 + est.lam
        est.metrics["risk/adv_return_part_abs_mean"] = float(adv_norm.abs().mean() / weight)
        est.metrics["risk/adv_cvar_part_abs_mean"] = float(
            est.lam * a_cvar_unit.abs().mean() / weight
        )
        return combined


def constraint_for(cfg: Config, state: RiskState | None) -> Constraint:
    """The constraint of a training state: the CVaR one where it has a risk part."""
    return NoConstraint() if state is None else CVaRConstraint(cfg)
