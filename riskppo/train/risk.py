"""The CVaR constraint (R-RISK-2): max E[R] s.t. CVaR_α(R) ≥ limit, by a Lagrangian.

Per rollout (see ``docs/risk.md``):

1. split the rollout into segments (episodes, or ``cvar_horizon``-step windows) and give each
   step its segment's return (:func:`riskppo.core.segments.segment_returns`);
2. the risk head predicts quantiles of the segment return-to-go; pooled over the rollout's
   segment-start states they give the predicted distribution of ``R``, its VaR ``ν`` and CVaR
   (``core.cvar_from_quantiles`` — the quantity the dual update and ``risk/cvar_pred`` read);
3. every step of a finished segment gets ``λ·A_cvar`` added to its advantage
   (:func:`riskppo.core.segments.cvar_advantage`, with the distributional baseline);
4. projected dual ascent on the relative violation ``(limit − CVaR_pred) / max(|limit|, σ)``
   (σ: spread of segment returns), so ``lambda_lr`` does not depend on the return scale.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch
from torch import Tensor

from riskppo import core
from riskppo.config import Config
from riskppo.train.scaling import ReturnScaling, initial_scaling, update_scaling


@dataclass
class RiskState:
    """Carried between rollouts: λ, open segments, the risk head's return scaling."""

    lam: float
    acc: Tensor  # [N] return accumulated in each env's open segment
    length: Tensor  # [N] its length
    scaling: ReturnScaling  # normalisation of the risk head (segment return-to-go, PopArt)
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=500))


def initial_risk_state(cfg: Config, n_envs: int) -> RiskState:
    return RiskState(
        lam=cfg.risk.lambda_init,
        acc=torch.zeros(n_envs, dtype=torch.float64),
        length=torch.zeros(n_envs, dtype=torch.long),
        scaling=initial_scaling(cfg),
    )


@dataclass
class RiskEstimate:
    """What one rollout contributes to the constraint."""

    extra_advantage: Tensor  # [T, N] λ·A_cvar, raw return units
    targets: Tensor  # [T, N] normalised segment return-to-go targets (NaN: segment unfinished)
    state: RiskState
    metrics: dict[str, float]


def risk_estimate(
    cfg: Config,
    state: RiskState,
    rewards: Tensor,
    dones: Tensor,
    risk_out: Tensor,
    risk_layer: torch.nn.Linear,
) -> RiskEstimate:
    """One rollout of the constraint. ``risk_out`` ``[T, N, K]``: the risk head (normalised)."""
    r = cfg.risk
    alpha = r.cvar_alpha
    info = core.segment_returns(rewards, dones, r.cvar_horizon, state.acc, state.length)
    q_rtg = state.scaling.to_raw(risk_out.double().sort(dim=-1).values)  # [T, N, K] raw units
    # Predicted distribution of R: pooled quantiles at the segment-start states (acc = 0).
    pooled = q_rtg[info.starts].reshape(-1)
    if pooled.numel() == 0:
        pooled = q_rtg.reshape(-1)
    cvar_pred, nu = core.empirical_cvar(pooled, alpha)
    a_cvar = core.cvar_advantage(info, q_rtg, float(nu), alpha)
    extra = state.lam * a_cvar
    finished = info.seg_return[info.ends & torch.isfinite(info.seg_return)]
    recent = deque(state.recent, maxlen=state.recent.maxlen)
    recent.extend(float(x) for x in finished)
    violation = 0.0
    lam = state.lam
    if r.cvar_limit is not None:
        # Relative violation: in units of the limit, or of the segment-return spread when the
        # limit is near 0, so lambda_lr means the same for returns of any scale.
        moments = state.scaling.moments
        spread = float(moments.var.sqrt()) if moments.count > 1 else 1.0
        violation = (r.cvar_limit - float(cvar_pred)) / max(abs(r.cvar_limit), spread, 1e-8)
        lam = core.lagrange_step(state.lam, violation, r.lambda_lr, r.lambda_max)
    # Risk-head targets: segment return-to-go, y_t = R − acc_t, on finished segments only;
    # statistics updated (and the head PopArt-rescaled) exactly as for the value critics.
    y = info.seg_return - info.acc_before
    scaling, _ = update_scaling(cfg, state.scaling, y[torch.isfinite(y)], [risk_layer], True)
    new_state = RiskState(lam, info.acc_after, info.len_after, scaling, recent)
    metrics = {
        "risk/lambda": lam,
        "risk/cvar_violation": violation,
        "risk/cvar_pred_segment": float(cvar_pred),
        "risk/var": float(nu),
        "risk/cvar_adv_abs_mean": float(a_cvar.abs().mean()),
        "risk/segments_finished": float(finished.numel()),
    }
    if len(recent) >= 2:
        emp, _ = core.empirical_cvar(torch.tensor(list(recent), dtype=torch.float64), alpha)
        metrics["risk/cvar_empirical_segment"] = float(emp)
    return RiskEstimate(extra, scaling.to_norm(y).float(), new_state, metrics)
