"""Optimizers and gradient scaling (design §4): UPGD, AdaptiveUPGD, the Variance Gradient Scaler
and the optimizer registry."""

from __future__ import annotations

from riskppo.optim.registry import OPTIMIZERS, build_optimizer
from riskppo.optim.upgd import UPGD, AdaptiveUPGD
from riskppo.optim.vgs import VarianceGradientScaler, vgs_factor

__all__ = [
    "OPTIMIZERS",
    "UPGD",
    "AdaptiveUPGD",
    "VarianceGradientScaler",
    "build_optimizer",
    "vgs_factor",
]
