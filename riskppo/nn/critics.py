"""What a critic head's raw output means (R-ALG-3): quantiles, categorical atoms, or a scalar.

All outputs are in *normalised* return units (R-ALG-8); de-normalisation is the trainer's job.
A registry (``CRITICS``) maps the config's ``critic.kind`` to the class.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from riskppo import core
from riskppo.config import CriticConfig


class Critic(Protocol):
    n_out: int
    supports_popart: bool

    def mean(self, out: Tensor) -> Tensor: ...  # [...]
    def quantiles(self, out: Tensor, taus: Tensor) -> Tensor: ...  # [..., len(taus)]
    def old_prediction(self, out: Tensor) -> Tensor: ...  # what value clipping compares to
    def value_loss(
        self, out: Tensor, old: Tensor, target: Tensor, clip: float | None, mode: str
    ) -> tuple[Tensor, Tensor]: ...


class QuantileCritic:
    """``Nq`` quantiles at the midpoint levels; quantile Huber loss (Dabney et al. 2018)."""

    supports_popart = True

    def __init__(self, cfg: CriticConfig) -> None:
        self.n_out = cfg.n_quantiles
        self.kappa = cfg.kappa
        self.taus = core.quantile_midpoints(cfg.n_quantiles)

    def mean(self, out: Tensor) -> Tensor:
        return out.mean(-1)

    def quantiles(self, out: Tensor, taus: Tensor) -> Tensor:
        q = core.sort_last(out)
        if taus.shape[0] == self.n_out and torch.allclose(taus, self.taus.to(taus)):
            return q
        idx = (taus * self.n_out).clamp(max=self.n_out - 1e-6).long()
        return q[..., idx]

    def old_prediction(self, out: Tensor) -> Tensor:
        return out

    def value_loss(
        self, out: Tensor, old: Tensor, target: Tensor, clip: float | None, mode: str
    ) -> tuple[Tensor, Tensor]:
        return core.quantile_value_loss(
            out, old, target, taus=self.taus.to(out), kappa=self.kappa, clip=clip, mode=mode
        )


class CategoricalCritic:
    """``N`` atom logits on a fixed support; two-hot λ-return targets; CE / log N (R-ALG-3)."""

    supports_popart = False

    def __init__(self, cfg: CriticConfig) -> None:
        self.n_out = cfg.n_atoms
        self.atoms = torch.linspace(cfg.v_min, cfg.v_max, cfg.n_atoms)

    def mean(self, out: Tensor) -> Tensor:
        return core.categorical_mean(out.softmax(-1), self.atoms.to(out))

    def quantiles(self, out: Tensor, taus: Tensor) -> Tensor:
        probs = out.softmax(-1)
        flat = probs.reshape(-1, self.n_out)
        q = core.categorical_to_quantiles(flat, self.atoms.to(out), taus.to(out))
        return q.reshape(*probs.shape[:-1], taus.shape[0])

    def old_prediction(self, out: Tensor) -> Tensor:
        return out.softmax(-1)

    def value_loss(
        self, out: Tensor, old: Tensor, target: Tensor, clip: float | None, mode: str
    ) -> tuple[Tensor, Tensor]:
        atoms = self.atoms.to(out)
        target_probs = core.scalar_to_categorical(target, atoms)
        return core.categorical_value_loss(out, old, target_probs, atoms, clip=clip, mode=mode)


class ScalarCritic:
    """A plain scalar value head with MSE (the baseline for the distributional overhead)."""

    supports_popart = True
    n_out = 1

    def __init__(self, cfg: CriticConfig) -> None:
        del cfg

    def mean(self, out: Tensor) -> Tensor:
        return out[..., 0]

    def quantiles(self, out: Tensor, taus: Tensor) -> Tensor:
        return out[..., :1].expand(*out.shape[:-1], taus.shape[0])

    def old_prediction(self, out: Tensor) -> Tensor:
        return out

    def value_loss(
        self, out: Tensor, old: Tensor, target: Tensor, clip: float | None, mode: str
    ) -> tuple[Tensor, Tensor]:
        # SB3-style value clipping: element-wise max of squared errors, unclipped target (R-ALG-5).
        pred = out[..., 0]
        loss = (pred - target).pow(2)
        if clip is None or mode == "none":
            return loss.mean(), torch.zeros((), device=out.device)
        old_v = old[..., 0]
        clipped = old_v + (pred - old_v).clamp(-clip, clip)
        loss_c = (clipped - target).pow(2)
        touched = ((pred - old_v).abs() > clip).float().mean()
        return torch.maximum(loss, loss_c).mean(), touched


CRITICS: dict[str, type[QuantileCritic] | type[CategoricalCritic] | type[ScalarCritic]] = {
    "quantile": QuantileCritic,
    "categorical": CategoricalCritic,
    "scalar": ScalarCritic,
}


def build_critic(cfg: CriticConfig) -> Critic:
    return CRITICS[cfg.kind](cfg)
