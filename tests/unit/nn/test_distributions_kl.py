"""``kl_from`` of the action distributions against torch.distributions (an independent
reference), including differences too small for the naive float32 formula."""

from __future__ import annotations

import torch
from torch.distributions import Categorical, Normal, kl_divergence

from riskppo.nn.distributions import CategoricalDist, DiagGaussianDist, MultiCategoricalDist


def test_categorical_kl_matches_torch() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 5, generator=g), torch.randn(16, 5, generator=g)
    ours = CategoricalDist(b).kl_from(CategoricalDist(a))  # KL(a ‖ b)
    ref = kl_divergence(Categorical(logits=a), Categorical(logits=b))
    torch.testing.assert_close(ours, ref)


def test_multicategorical_kl_is_the_sum_of_parts() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(8, 7, generator=g), torch.randn(8, 7, generator=g)
    ours = MultiCategoricalDist(b, [3, 4]).kl_from(MultiCategoricalDist(a, [3, 4]))
    ref = sum(
        kl_divergence(Categorical(logits=x), Categorical(logits=y))
        for x, y in zip(a.split([3, 4], -1), b.split([3, 4], -1))
    )
    torch.testing.assert_close(ours, ref)


def test_gaussian_kl_matches_torch_and_keeps_tiny_differences() -> None:
    g = torch.Generator().manual_seed(2)
    m1, m2 = torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g)
    s1, s2 = torch.randn(8, 3, generator=g) * 0.3, torch.randn(8, 3, generator=g) * 0.3
    ours = DiagGaussianDist(m2, s2).kl_from(DiagGaussianDist(m1, s1))
    ref = kl_divergence(Normal(m1, s1.exp()), Normal(m2, s2.exp())).sum(-1)
    torch.testing.assert_close(ours, ref)
    # a mean difference of 1e-5 (σ = 1): KL = 5e-11 — lost to cancellation by 1 + t − 1
    mean = torch.zeros(4, 2)
    log_std = torch.zeros(2)
    tiny = DiagGaussianDist(mean + 1e-5, log_std).kl_from(DiagGaussianDist(mean, log_std))
    torch.testing.assert_close(tiny, torch.full((4,), 2 * 0.5 * 1e-10), rtol=1e-3, atol=0.0)
