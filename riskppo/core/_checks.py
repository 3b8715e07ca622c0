"""Private validation helpers shared by the :mod:`riskppo.core` modules."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def check_finite(fn: str, name: str, x: Tensor) -> None:
    """Raise ``ValueError`` if the floating tensor ``x`` holds NaN or ±inf.

    The message names the calling function and the argument, e.g.
    ``"gae: rewards contains 3 non-finite values"``.
    """
    if not (x.is_floating_point() or x.is_complex()):
        return
    n_bad = int((~torch.isfinite(x)).sum().item())
    if n_bad:
        raise ValueError(f"{fn}: {name} contains {n_bad} non-finite values")


def check_ndim(fn: str, name: str, x: Tensor, ndim: int) -> None:
    """Raise ``ValueError`` unless ``x`` has exactly ``ndim`` dimensions."""
    if x.dim() != ndim:
        raise ValueError(f"{fn}: {name} must have {ndim} dimensions, got shape {tuple(x.shape)}")


def check_same_shape(fn: str, names: tuple[str, str], a: Tensor, b: Tensor) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have identical shapes."""
    if a.shape != b.shape:
        raise ValueError(
            f"{fn}: {names[0]} and {names[1]} must have the same shape, got "
            f"{names[0]}={tuple(a.shape)} and {names[1]}={tuple(b.shape)}"
        )


def check_alpha(fn: str, alpha: float) -> None:
    """Raise ``ValueError`` unless ``alpha`` lies in (0, 1] (design §1.2, R-RISK-1)."""
    if not (math.isfinite(alpha) and 0.0 < alpha <= 1.0):
        raise ValueError(f"{fn}: alpha must lie in (0, 1], got {alpha}")


def check_support(fn: str, atoms: Tensor) -> None:
    """Raise ``ValueError`` unless ``atoms`` is 1-D, strictly increasing and evenly spaced."""
    check_ndim(fn, "atoms", atoms, 1)
    n = atoms.shape[0]
    if n < 2:
        raise ValueError(f"{fn}: atoms must hold at least 2 atoms, got shape {tuple(atoms.shape)}")
    check_finite(fn, "atoms", atoms)
    diffs = (atoms[1:] - atoms[:-1]).double()
    dz = (atoms[-1] - atoms[0]).double() / (n - 1)
    if not bool((diffs > 0).all()):
        raise ValueError(f"{fn}: atoms must be strictly increasing")
    # float32 linspace is exact to a few ulps of the range; 1e-3 of a step is far above that.
    if not bool(((diffs - dz).abs() <= 1e-3 * dz).all()):
        raise ValueError(f"{fn}: atoms must be evenly spaced (e.g. torch.linspace)")


def check_probs_atoms(fn: str, probs: Tensor, atoms: Tensor) -> None:
    """Categorical distributions ``probs [..., N]`` on one support ``atoms [N]``."""
    check_ndim(fn, "atoms", atoms, 1)
    if probs.dim() < 1 or probs.shape[-1] != atoms.shape[0]:
        raise ValueError(
            f"{fn}: probs [..., N]={tuple(probs.shape)} does not match atoms [N]="
            f"{tuple(atoms.shape)}"
        )
