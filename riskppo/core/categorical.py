"""Categorical return distributions on a fixed, evenly spaced support (design §1.2).

Shapes: ``B`` samples (batch), ``N`` atoms of the support ``v_min..v_max``, ``K`` levels or
locations. Values are in the critic's (normalised) return units. The C51 projection of the
distributional Bellman target, the two-hot projection of scalar targets, and the mean and
quantiles of a categorical distribution. Re-exported by :mod:`riskppo.core.distributional`,
whose categorical value clipping moves mass with :func:`_project`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from riskppo.core._checks import check_finite, check_ndim, check_probs_atoms, check_support

__all__ = [
    "categorical_mean",
    "categorical_projection",
    "categorical_to_quantiles",
    "scalar_to_categorical",
]


def _project(locations: Tensor, weights: Tensor, atoms: Tensor) -> Tensor:
    """Distribute mass ``weights`` at ``locations`` onto the support ``atoms`` (C51 projection).

    ``locations``/``weights``: ``[B, K]``; ``atoms``: ``[N]`` evenly spaced. Locations outside the
    support are clipped to the end atoms; mass at a location between two atoms is split linearly
    (so the mean is preserved inside the support). Differentiable in ``weights`` and, through the
    linear split, in ``locations``. Returns ``[B, N]``.
    """
    n = atoms.shape[0]
    v_min, v_max = atoms[0], atoms[-1]
    dz = (v_max - v_min) / (n - 1)
    b = ((torch.clamp(locations, v_min, v_max) - v_min) / dz).clamp(0.0, n - 1)  # [B, K]
    lower = b.floor()
    upper = b.ceil()
    # Exact-on-atom case (b integer, lower == upper): both linear weights are 0, so all the mass
    # goes to ``lower`` explicitly; otherwise the textbook split (Bellemare et al. 2017, Alg. 1).
    on_atom = (lower == upper).to(weights.dtype)
    w_lower = weights * (upper - b + on_atom)
    w_upper = weights * (b - lower)
    out = torch.zeros(locations.shape[0], n, dtype=weights.dtype, device=weights.device)
    out = out.scatter_add(1, lower.long(), w_lower)
    return out.scatter_add(1, upper.long(), w_upper)


def categorical_projection(
    next_probs: Tensor,
    rewards: Tensor,
    dones: Tensor,
    atoms: Tensor,
    gamma: float,
) -> Tensor:
    """C51 projection of the distributional Bellman target (Bellemare et al. 2017; design §1.2).

    Args:
        next_probs: ``[B, N]`` probabilities of the next-state return distribution.
        rewards: ``[B]`` rewards (value units); must be finite.
        dones: ``[B]`` bool or 0/1 float; where set the target is the reward alone.
        atoms: ``[N]`` evenly spaced support ``v_min..v_max``.
        gamma: discount factor.

    Returns:
        ``[B, N]`` target probabilities on ``atoms`` of ``Tz = r + γ(1 − done)·z``, with ``Tz``
        clipped to ``[v_min, v_max]``. Rows sum to the row sums of ``next_probs`` (1 for valid
        distributions). An atom landing exactly on a support point gets all its mass there.

    Raises:
        ValueError: on shape mismatch, a support that is not evenly spaced, or non-finite
            ``rewards``/``next_probs``.
    """
    fn = "categorical_projection"
    check_support(fn, atoms)
    check_ndim(fn, "next_probs", next_probs, 2)
    n_batch, n_atoms = next_probs.shape
    if n_atoms != atoms.shape[0]:
        raise ValueError(
            f"{fn}: next_probs [B, N]={tuple(next_probs.shape)} does not match "
            f"atoms [N]={tuple(atoms.shape)}"
        )
    for name, x in (("rewards", rewards), ("dones", dones)):
        if x.shape != (n_batch,):
            raise ValueError(f"{fn}: {name} must have shape [B]=({n_batch},), got {tuple(x.shape)}")
    check_finite(fn, "rewards", rewards)
    check_finite(fn, "next_probs", next_probs)
    dtype = next_probs.dtype
    not_done = 1.0 - dones.to(dtype)
    tz = rewards.to(dtype).unsqueeze(1) + gamma * not_done.unsqueeze(1) * atoms.to(dtype)  # [B, N]
    return _project(tz, next_probs, atoms.to(dtype))


def scalar_to_categorical(values: Tensor, atoms: Tensor) -> Tensor:
    """Two-hot projection of scalar targets onto the support (categorical critic on λ-returns).

    Args:
        values: ``[B]`` scalar targets (value units); must be finite.
        atoms: ``[N]`` evenly spaced support.

    Returns:
        ``[B, N]`` probabilities with mass on the (at most two) atoms around each value, clipped
        to the end atoms; the mean equals the value clipped to ``[v_min, v_max]``.
    """
    fn = "scalar_to_categorical"
    check_support(fn, atoms)
    check_ndim(fn, "values", values, 1)
    check_finite(fn, "values", values)
    loc = values.unsqueeze(1)
    return _project(loc, torch.ones_like(loc), atoms.to(values.dtype))


def categorical_mean(probs: Tensor, atoms: Tensor) -> Tensor:
    """Mean ``Σ_k p_k z_k``: probs ``[..., N]`` on atoms ``[N]`` → ``[...]`` (value units)."""
    check_probs_atoms("categorical_mean", probs, atoms)
    return (probs * atoms.to(probs.dtype)).sum(dim=-1)


def categorical_to_quantiles(probs: Tensor, atoms: Tensor, taus: Tensor) -> Tensor:
    """Step inverse CDF of categorical distributions at levels ``taus``.

    Args:
        probs: ``[B, N]`` probabilities on the increasing support ``atoms`` ``[N]``.
        taus: ``[K]`` levels in (0, 1].

    Returns:
        ``[B, K]``: for each level the smallest atom whose cumulative mass is ≥ τ (the last atom if
        rounding leaves the total mass just below τ). Piecewise constant, hence not useful for
        gradients; meant for reporting (``model.value_distribution``).
    """
    fn = "categorical_to_quantiles"
    check_ndim(fn, "probs", probs, 2)
    check_probs_atoms(fn, probs, atoms)
    check_ndim(fn, "taus", taus, 1)
    cdf = probs.detach().cumsum(dim=1).contiguous()  # [B, N]
    levels = taus.to(cdf.dtype).unsqueeze(0).expand(probs.shape[0], -1).contiguous()  # [B, K]
    idx = torch.searchsorted(cdf, levels, side="left").clamp(max=atoms.shape[0] - 1)
    return atoms.to(probs.dtype)[idx]
