"""Optimizer registry (R-OPT-1: ``optimizer: upgd | adaptive_upgd | adam | adamw | sgd``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from riskppo.optim.upgd import UPGD, AdaptiveUPGD

__all__ = ["OPTIMIZERS", "build_optimizer"]

#: name → optimizer class. Every entry is called as ``cls(params, lr=..., weight_decay=..., **kw)``.
#: Note the torch semantics of ``weight_decay``: L2 added to the gradient for ``adam``/``sgd``,
#: decoupled for ``adamw``, decoupled multiplicative θ·(1 − lr·λ) for the UPGD family.
OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": torch.optim.SGD,
    "upgd": UPGD,
    "adaptive_upgd": AdaptiveUPGD,
}


def build_optimizer(
    name: str,
    params: ParamsT,
    *,
    lr: float,
    weight_decay: float = 0.0,
    **kwargs: Any,
) -> torch.optim.Optimizer:
    """Build the optimizer registered as ``name``; extra keywords go to its constructor.

    E.g. ``build_optimizer("adam", model.parameters(), lr=3e-4, eps=1e-5)`` or
    ``build_optimizer("upgd", params, lr=1e-3, beta_utility=0.999, sigma=1e-3, seed=0)``.

    Raises:
        ValueError: ``name`` is not registered (the message lists the valid names), or the
            optimizer rejects a hyper-parameter value.
        TypeError: a keyword the optimizer does not accept.
    """
    try:
        factory = OPTIMIZERS[name]
    except (KeyError, TypeError):
        valid = ", ".join(sorted(OPTIMIZERS))
        raise ValueError(f"unknown optimizer {name!r}; valid names: {valid}") from None
    return factory(params, lr=lr, weight_decay=weight_decay, **kwargs)
