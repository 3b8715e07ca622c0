"""Alert rules (R-MON): pure functions of one iteration's :class:`UpdateLog` and the thresholds.

Each rule returns the alerts it raises (usually none); :func:`alerts` runs them all. The monitor
turns an alert into a ``warn/<name>`` scalar, one log line the first time, and a summary line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from riskppo.algo.log import UpdateLog
from riskppo.config import MonitorConfig

__all__ = ["RULES", "Alert", "alerts"]


@dataclass(frozen=True)
class Alert:
    name: str  # logged as warn/<name>
    message: str


Rule = Callable[[UpdateLog, MonitorConfig], list[Alert]]


def log_ratio_clamp(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    frac = m.losses.log_ratio_clamp_frac if m.losses else 0.0
    if frac <= t.log_ratio_clamp_frac:
        return []
    return [
        Alert(
            "log_ratio_clamp",
            f"log-ratio clamp fraction {frac:.3f} > {t.log_ratio_clamp_frac} (policy moved far "
            "from the behaviour policy; lower lr)",
        )
    ]


def grad_norm_pre_clip(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    """An exploding gradient: a clip group's pre-clip norm (actor, critic, risk head; the total
    where a log has none) above ``monitor.grad_norm_pre_clip``. The quantile critics' and the risk
    head's norms are routinely 10-130 on the default trading run (the quantile Huber loss bounds
    each output's gradient; the norm scales with the network), the actor's below 1: clipping
    handles those, and only a norm far above them means diverging weights."""
    if m.losses is None:
        return []
    norms = m.losses.clip_norms or {"all parameters": m.losses.grad_norm_pre_clip}
    name, norm = max(norms.items(), key=lambda kv: kv[1])
    if norm <= t.grad_norm_pre_clip:
        return []
    return [
        Alert(
            "grad_norm_pre_clip",
            f"pre-clip gradient norm of the {name} {norm:.3g} > {t.grad_norm_pre_clip:g}: "
            "diverging weights or an unscaled loss (each step is still clipped to "
            "ppo.max_grad_norm); lower ppo.learning_rate, or check the reward scale "
            "(critic.scale_cap, env.kwargs.reward_scale)",
        )
    ]


def critic_grad_imbalance(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    ratio = m.critics_grad_ratio()
    if ratio is None or t.critics_grad_ratio_low <= ratio <= t.critics_grad_ratio_high:
        return []
    return [
        Alert(
            "critic_grad_imbalance",
            f"twin-critic gradient ratio {ratio:.3g} outside "
            f"[{t.critics_grad_ratio_low}, {t.critics_grad_ratio_high}]",
        )
    ]


def critic_grad_vanishing(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    norms = m.losses.critic_grad_norms() if m.losses else {}
    return [
        Alert("critic_grad_vanishing", f"{k}_grad_norm = {v:.2e} (vanishing critic gradient)")
        for k, v in sorted(norms.items())
        if v < t.critic_grad_vanishing
    ]


def entropy_collapse(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    if m.losses is None:
        return []
    if m.discrete and m.losses.entropy < t.entropy_discrete:
        return [
            Alert(
                "entropy_collapse",
                f"mean policy entropy {m.losses.entropy:.4f} < {t.entropy_discrete}",
            )
        ]
    per_dim = m.entropy_per_dim
    if not m.discrete and per_dim is not None and per_dim < t.entropy_continuous_per_dim:
        return [
            Alert(
                "entropy_collapse",
                f"per-dimension entropy {per_dim:.3f} < {t.entropy_continuous_per_dim}",
            )
        ]
    return []


def loss_out_of_range(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    if m.losses is None:
        return []
    values = {
        "loss": m.losses.loss,
        "policy_loss": m.losses.policy_loss,
        "value_loss": m.losses.value_loss,
    }
    return [
        Alert("loss_out_of_range", f"{k} = {v:.4g} (NaN or > {t.loss_max})")
        for k, v in values.items()
        if not math.isfinite(v) or abs(v) > t.loss_max
    ]


def bc_loss_ratio(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    ratio = m.losses.optional.get("bc_loss_ratio", 0.0) if m.losses else 0.0
    if ratio <= t.bc_loss_ratio:
        return []
    return [
        Alert(
            "bc_loss_ratio",
            f"behaviour-cloning loss is {ratio:.2f} of the total (> {t.bc_loss_ratio})",
        )
    ]


def advantage_outliers(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    if m.estimate.adv_max_abs <= t.adv_max_abs:
        return []
    return [
        Alert(
            "advantage_outliers",
            f"max |normalised advantage| {m.estimate.adv_max_abs:.1f} > {t.adv_max_abs}",
        )
    ]


def excessive_return_scaling(m: UpdateLog, t: MonitorConfig, cap: float) -> list[Alert]:
    if m.estimate.uncapped_scale <= cap:
        return []
    return [
        Alert(
            "excessive_return_scaling",
            f"uncapped value-target scale {m.estimate.uncapped_scale:.3g} > cap {cap} (returns "
            "have a tiny spread)",
        )
    ]


def entropy_floor_binding(m: UpdateLog, t: MonitorConfig) -> list[Alert]:
    f = m.entropy_floor
    if f is None or f.below < t.entropy_floor_binding_updates:
        return []
    return [
        Alert(
            "entropy_floor_binding",
            f"mean entropy below the floor {f.target:.3f} for {f.below} updates (coefficient "
            f"{f.coef:.3g})",
        )
    ]


RULES: tuple[Rule, ...] = (
    log_ratio_clamp,
    grad_norm_pre_clip,
    critic_grad_imbalance,
    critic_grad_vanishing,
    entropy_collapse,
    loss_out_of_range,
    bc_loss_ratio,
    advantage_outliers,
    entropy_floor_binding,
)


def alerts(m: UpdateLog, t: MonitorConfig, scale_cap: float) -> list[Alert]:
    """Every alert the rules raise for ``m`` (``scale_cap``: ``critic.scale_cap``)."""
    found = [a for rule in RULES for a in rule(m, t)]
    return found + excessive_return_scaling(m, t, scale_cap)
