"""Return statistics and the critics' normalisation with PopArt (R-ALG-8); the reward
moments the Sharpe utility remembers across rollouts.

Shared by the value critics (λ-returns) and the CVaR risk head (segment return-to-go).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from riskppo import core
from riskppo.config import Config
from riskppo.core.scaling import RunningMoments

_NONNEG = {"min": 0}


@dataclass
class ReturnScaling:
    """Return statistics and the critic's normalisation: ``v_raw = v_norm / scale + mean``."""

    moments: RunningMoments
    scale: float
    mean: float

    def to_raw(self, x: Tensor) -> Tensor:
        return x / self.scale + self.mean

    def to_norm(self, x: Tensor) -> Tensor:
        return (x - self.mean) * self.scale


def initial_scaling(cfg: Config) -> ReturnScaling:
    scale, _ = core.value_target_scale(
        1.0, ret_clip=cfg.critic.ret_clip, std_floor=cfg.critic.std_floor, cap=cfg.critic.scale_cap
    )
    return ReturnScaling(core.init_moments(), scale, 0.0)


def update_scaling(
    cfg: Config, scaling: ReturnScaling, returns: Tensor
) -> tuple[ReturnScaling, float]:
    """Update return statistics with this rollout (before its targets are normalised, R-ALG-8).

    Returns the new scaling and the uncapped scale (for ``warn/excessive_return_scaling``). Pure:
    the critics that follow the new scaling are rescaled by :func:`apply_rescale`, an explicit
    step of the training loop.
    """
    moments = core.update_moments(scaling.moments, returns.reshape(-1))
    std = float(moments.var.sqrt())
    scale, uncapped = core.value_target_scale(
        std, ret_clip=cfg.critic.ret_clip, std_floor=cfg.critic.std_floor, cap=cfg.critic.scale_cap
    )
    return ReturnScaling(moments, scale, float(moments.mean)), uncapped


def rescales_outputs(cfg: Config, old: ReturnScaling) -> bool:
    """Whether outputs trained under ``old`` statistics are PopArt-rescaled when they change:
    always, except the first update with ``critic.popart_first: fresh`` — before it the outputs
    have learned nothing, under a placeholder scale that can be far from the data's."""
    return cfg.critic.popart_first == "preserve" or bool(old.moments.count > 0)


@dataclass(frozen=True)
class Rescale:
    """PopArt (van Hasselt et al. 2016): the output layers of ``target`` must move from the
    ``old`` normalisation to the ``new`` one with unchanged de-normalised outputs."""

    target: Literal["critics", "risk_head"]
    old: ReturnScaling
    new: ReturnScaling


def apply_rescale(layers: list[nn.Linear], r: Rescale) -> None:
    """Rescale ``layers`` (the output layers of ``r.target``) in place, ``old`` → ``new``."""
    with torch.no_grad():
        for layer in layers:
            w, b = core.popart_rescale(
                layer.weight, layer.bias, r.old.mean, r.old.scale, r.new.mean, r.new.scale
            )
            layer.weight.copy_(w)
            layer.bias.copy_(b)


@dataclass(frozen=True)
class RewardMoments:
    """Exponential moving averages of the rollouts' mean reward ``A`` and mean square ``B``
    (the differential Sharpe ratio's moments, Moody & Saffell 2001), updated once per rollout;
    ``rollouts``: how many went in (0: none yet)."""

    mean: float = 0.0
    mean_square: float = field(default=0.0, metadata=_NONNEG)
    rollouts: int = field(default=0, metadata=_NONNEG)

    @property
    def aversion(self) -> float:
        """The Sharpe utility's risk aversion ``max(A, 0) / B`` (0 while ``B`` is 0): the
        weight ``1 − aversion · R`` of a step's slope falls with its reward."""
        return max(self.mean, 0.0) / self.mean_square if self.mean_square > 0 else 0.0


def update_reward_moments(moments: RewardMoments, rewards: Tensor, rate: float) -> RewardMoments:
    """``A ← (1 − η) A + η mean R``, ``B ← (1 − η) B + η mean R²`` with ``η = rate`` over one
    rollout's rewards ``R`` (any shape, pooled); the first rollout sets them (``η = 1``), so
    ``rate = 1`` keeps each rollout's own moments."""
    eta = 1.0 if moments.rollouts == 0 else rate
    r = rewards.double()
    mean, square = float(r.mean()), float(r.pow(2).mean())
    return RewardMoments(
        (1 - eta) * moments.mean + eta * mean,
        (1 - eta) * moments.mean_square + eta * square,
        moments.rollouts + 1,
    )


def check_scaling(name: str, sc: ReturnScaling) -> None:
    """What types cannot say of a decoded scaling (R-REL-3): variances and counts ≥ 0, scale
    finite and > 0, mean finite. ``ValueError`` naming it."""
    m = sc.moments
    if bool((m.var < 0).any()) or bool((m.count < 0).any()):
        raise ValueError(f"{name}/moments: negative variance or count")
    if not (math.isfinite(sc.scale) and sc.scale > 0 and math.isfinite(sc.mean)):
        raise ValueError(f"{name}: scale must be finite and > 0, mean finite")
