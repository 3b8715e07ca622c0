"""Action distributions and the heads that produce them (R-ALG-1, R-ALG-2).

Light-weight replacements of ``torch.distributions`` (no argument validation on the hot path,
sampling from an explicit ``torch.Generator`` so runs are reproducible and resumable).

Entropy contract (R-ALG-2): ``entropy()`` returns one value per sample, shape ``[B]``; the
dimensions of a Box action (and the components of a MultiDiscrete action) are summed exactly once.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

_LOG_2PI_E_HALF = 0.5 * math.log(2 * math.pi * math.e)


def _gen_device(generator: torch.Generator | None) -> torch.device | None:
    """Random numbers are drawn where the generator lives (the trainer's generators are CPU
    generators, so runs and checkpoints are the same on any device) and then moved."""
    return generator.device if generator is not None else None


def categorical_uniforms(
    rows: tuple[int, ...],
    generator: torch.Generator | None,
    dtype: torch.dtype,
    device: torch.device,
) -> Tensor:
    """The uniforms :meth:`CategoricalDist.sample` draws for logits of shape ``[*rows, n]``: one
    per row, ``[*rows, 1]`` (the C rollout step, :mod:`riskppo.nn.actor_step`, draws the same)."""
    u = torch.rand((*rows, 1), generator=generator, dtype=dtype, device=_gen_device(generator))
    return u.to(device)


def gaussian_noise(
    shape: tuple[int, ...],
    generator: torch.Generator | None,
    dtype: torch.dtype,
    device: torch.device,
) -> Tensor:
    """The standard normals :meth:`DiagGaussianDist.sample` draws for a mean of ``shape`` (the
    C rollout step, :mod:`riskppo.nn.actor_step`, draws the same)."""
    noise = torch.randn(shape, generator=generator, dtype=dtype, device=_gen_device(generator))
    return noise.to(device)


class ActionDistribution(Protocol):
    def log_prob(self, actions: Tensor) -> Tensor: ...  # [B]
    def entropy(self) -> Tensor: ...  # [B]
    def sample(self, generator: torch.Generator | None) -> Tensor: ...
    def mode(self) -> Tensor: ...
    def kl_from(self, other: Any) -> Tensor: ...  # KL(other ‖ self), [B]


class CategoricalDist:
    """Categorical over ``n`` actions from logits ``[B, n]``; actions ``[B]`` (int64)."""

    def __init__(self, logits: Tensor) -> None:
        self.logits = torch.log_softmax(logits, dim=-1)

    def log_prob(self, actions: Tensor) -> Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> Tensor:
        p = self.logits.exp()
        return -(p * self.logits).sum(-1)

    def sample(self, generator: torch.Generator | None) -> Tensor:
        # Inverse-CDF sampling: one uniform per row (cheaper than torch.multinomial).
        cdf = self.logits.exp().cumsum(-1)
        u = categorical_uniforms(cdf.shape[:-1], generator, cdf.dtype, cdf.device) * cdf[..., -1:]
        return torch.searchsorted(cdf, u).clamp_(max=cdf.shape[-1] - 1).squeeze(-1)

    def mode(self) -> Tensor:
        return self.logits.argmax(-1)

    def kl_from(self, other: CategoricalDist) -> Tensor:
        """KL(other ‖ self) per sample ``[B]``."""
        return (other.logits.exp() * (other.logits - self.logits)).sum(-1)


class MultiCategoricalDist:
    """Independent categoricals; logits ``[B, sum(nvec)]``, actions ``[B, len(nvec)]``."""

    def __init__(self, logits: Tensor, nvec: list[int]) -> None:
        self.parts = [CategoricalDist(x) for x in torch.split(logits, nvec, dim=-1)]

    def log_prob(self, actions: Tensor) -> Tensor:
        return torch.stack([d.log_prob(actions[:, i]) for i, d in enumerate(self.parts)]).sum(0)

    def entropy(self) -> Tensor:
        return torch.stack([d.entropy() for d in self.parts]).sum(0)

    def sample(self, generator: torch.Generator | None) -> Tensor:
        return torch.stack([d.sample(generator) for d in self.parts], dim=-1)

    def mode(self) -> Tensor:
        return torch.stack([d.mode() for d in self.parts], dim=-1)

    def kl_from(self, other: MultiCategoricalDist) -> Tensor:
        return torch.stack([d.kl_from(o) for d, o in zip(self.parts, other.parts)]).sum(0)


class DiagGaussianDist:
    """Diagonal Gaussian: ``mean`` ``[B, D]``, ``log_std`` ``[B, D]`` or ``[D]``.

    Actions are ``[B, D]``.
    """

    def __init__(self, mean: Tensor, log_std: Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    def log_prob(self, actions: Tensor) -> Tensor:
        z = (actions - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> Tensor:
        # Per-dim entropy 0.5·log(2πe) + log σ, summed once over dims (R-ALG-2).
        return (self.log_std + _LOG_2PI_E_HALF).sum(-1)

    def sample(self, generator: torch.Generator | None) -> Tensor:
        noise = gaussian_noise(self.mean.shape, generator, self.mean.dtype, self.mean.device)
        return self.mean + noise * self.log_std.exp()

    def mode(self) -> Tensor:
        return self.mean

    def kl_from(self, other: DiagGaussianDist) -> Tensor:
        # 0.5·(σ₁²/σ₂² − 1 − log σ₁²/σ₂² + (μ₁−μ₂)²/σ₂²), with expm1 so that a tiny mean
        # difference is not lost to float32 cancellation in (1 + t − 1)
        d = 2 * (other.log_std - self.log_std)
        t = ((other.mean - self.mean) * torch.exp(-self.log_std)).pow(2)
        return 0.5 * (torch.expm1(d) - d + t).sum(-1)


class ActionHead(nn.Module):
    """Maps latent features ``[B, F]`` to an action distribution for a Gymnasium action space."""

    def __init__(
        self,
        space: spaces.Space,
        latent_dim: int,
        *,
        log_std_init: float = 0.0,
        state_dependent_std: bool = False,
    ) -> None:
        super().__init__()
        self.space = space
        self.state_dependent_std = state_dependent_std
        self.log_std: nn.Parameter | None = None
        self.log_std_layer: nn.Linear | None = None
        if isinstance(space, spaces.Discrete):
            self.kind = "discrete"
            self.nvec = [int(space.n)]
            self.net = nn.Linear(latent_dim, int(space.n))
        elif isinstance(space, spaces.MultiDiscrete):
            self.kind = "multidiscrete"
            self.nvec = [int(n) for n in np.asarray(space.nvec).ravel()]
            self.net = nn.Linear(latent_dim, sum(self.nvec))
        elif isinstance(space, spaces.Box):
            self.kind = "box"
            dim = int(np.prod(space.shape))
            self.net = nn.Linear(latent_dim, dim)
            if state_dependent_std:
                self.log_std_layer = nn.Linear(latent_dim, dim)
                nn.init.zeros_(self.log_std_layer.weight)
                nn.init.constant_(self.log_std_layer.bias, log_std_init)
            else:
                self.log_std = nn.Parameter(torch.full((dim,), float(log_std_init)))
        else:
            raise ValueError(
                f"unsupported action space {space!r}: use Discrete, MultiDiscrete or Box"
            )

    def forward(self, latent: Tensor) -> ActionDistribution:
        return self.distribution(self.net(latent), latent)

    def distribution(self, out: Tensor, latent: Tensor) -> ActionDistribution:
        """The distribution from the output layer's ``out`` (``net(latent)``) and ``latent``."""
        if self.kind == "discrete":
            return CategoricalDist(out)
        if self.kind == "multidiscrete":
            return MultiCategoricalDist(out, self.nvec)
        if self.log_std_layer is not None:
            log_std = self.log_std_layer(latent).clamp(-20.0, 2.0)
        else:
            assert self.log_std is not None
            log_std = self.log_std
        return DiagGaussianDist(out, log_std)

    def action_dtype(self) -> torch.dtype:
        return torch.float32 if self.kind == "box" else torch.int64


def max_entropy(space: spaces.Space) -> float:
    """The largest entropy (nats) of an action distribution on ``space`` (R-ALG-10 floor).

    Discrete ``n``: ``log n`` (uniform); MultiDiscrete: ``Σ log n_i``; Box with finite bounds:
    ``Σ log(high − low)``, the entropy of the uniform distribution on the box (a Gaussian policy
    can exceed it before clipping; a floor as a fraction of it is still well defined).

    Raises:
        ValueError: for a Box with an infinite bound, or an unsupported space.
    """
    if isinstance(space, spaces.Discrete):
        return math.log(int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return float(np.log(np.asarray(space.nvec, dtype=np.float64)).sum())
    if isinstance(space, spaces.Box):
        width = np.asarray(space.high, np.float64) - np.asarray(space.low, np.float64)
        if not np.all(np.isfinite(width)):
            raise ValueError(
                "ppo.target_entropy_frac needs a Box action space with finite bounds; "
                "set an absolute ppo.target_entropy instead"
            )
        return float(np.log(width).sum())
    raise ValueError(f"unsupported action space {space!r}: use Discrete, MultiDiscrete or Box")
