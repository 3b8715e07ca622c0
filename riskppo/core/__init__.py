"""Pure tensor math of riskppo (design §1.2): advantages, distributional critics, risk, PPO losses.

Every function is pure (no hidden state), documents its tensor shapes and units, and validates
shapes with a ``ValueError`` naming the argument. Names listed in design §1.4 are stable.
"""

from __future__ import annotations

from riskppo.core.advantages import AdvantageStats, gae, gae_reference, normalize_advantages
from riskppo.core.distributional import (
    VF_CLIP_MODES,
    TwinValueLoss,
    VfClipMode,
    categorical_mean,
    categorical_projection,
    categorical_to_quantiles,
    categorical_value_loss,
    clip_categorical,
    clip_quantiles,
    quantile_huber_loss,
    quantile_midpoints,
    quantile_value_loss,
    scalar_to_categorical,
    twin_categorical_value_loss,
    twin_quantile_value_loss,
    twin_value_loss,
)
from riskppo.core.lagrange import (
    PIDLagrangeState,
    cvar_violation,
    dual_cap,
    lagrange_step,
    lagrangian_advantage,
    pid_lagrange_step,
)
from riskppo.core.ppo import PolicyLossStats, awr_weights, kl_estimators, ppo_policy_loss
from riskppo.core.risk import (
    cvar_from_categorical,
    cvar_from_quantiles,
    empirical_cvar,
    sort_last,
    var_from_categorical,
    var_from_quantiles,
)
from riskppo.core.scaling import (
    RunningMoments,
    init_moments,
    popart_rescale,
    update_moments,
    value_target_scale,
)
from riskppo.core.schedules import (
    EntropyFloorState,
    EntropyScheduleConfig,
    EntropyScheduleState,
    entropy_coef_step,
    entropy_floor_step,
    ls_slope,
)
from riskppo.core.segments import SegmentInfo, cvar_advantage, segment_returns

__all__ = [
    "VF_CLIP_MODES",
    "AdvantageStats",
    "EntropyFloorState",
    "EntropyScheduleConfig",
    "EntropyScheduleState",
    "PIDLagrangeState",
    "PolicyLossStats",
    "RunningMoments",
    "SegmentInfo",
    "TwinValueLoss",
    "VfClipMode",
    "awr_weights",
    "categorical_mean",
    "categorical_projection",
    "categorical_to_quantiles",
    "categorical_value_loss",
    "clip_categorical",
    "clip_quantiles",
    "cvar_advantage",
    "cvar_from_categorical",
    "cvar_from_quantiles",
    "cvar_violation",
    "dual_cap",
    "empirical_cvar",
    "entropy_coef_step",
    "entropy_floor_step",
    "gae",
    "gae_reference",
    "init_moments",
    "kl_estimators",
    "lagrange_step",
    "lagrangian_advantage",
    "ls_slope",
    "normalize_advantages",
    "pid_lagrange_step",
    "popart_rescale",
    "ppo_policy_loss",
    "quantile_huber_loss",
    "quantile_midpoints",
    "quantile_value_loss",
    "scalar_to_categorical",
    "segment_returns",
    "sort_last",
    "twin_categorical_value_loss",
    "twin_quantile_value_loss",
    "twin_value_loss",
    "update_moments",
    "value_target_scale",
    "var_from_categorical",
    "var_from_quantiles",
]
