"""Generalised advantage estimation and advantage normalisation (design §1.2, R-ALG-6, R-ALG-7).

All rollout tensors are time-major ``[T, N]``: ``T`` steps of ``N`` parallel environments.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from riskppo.core._checks import check_finite, check_ndim

__all__ = ["AdvantageStats", "gae", "gae_reference", "normalize_advantages"]


def _check_gae_inputs(
    fn: str,
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
) -> None:
    check_ndim(fn, "rewards", rewards, 2)
    named = {
        "values": values,
        "next_values": next_values,
        "terminated": terminated,
        "truncated": truncated,
    }
    for name, x in named.items():
        if x.shape != rewards.shape:
            raise ValueError(
                f"{fn}: {name} must have the shape of rewards [T, N]={tuple(rewards.shape)}, "
                f"got {tuple(x.shape)}"
            )
    for name, x in (("rewards", rewards), *named.items()):
        check_finite(fn, name, x)


def _as_done(fn: str, name: str, x: Tensor, dtype: torch.dtype) -> Tensor:
    """Bool or 0/1 float flags -> float tensor of ``dtype`` (1.0 where set)."""
    if x.dtype == torch.bool:
        return x.to(dtype)
    flags = x.to(dtype)
    if not bool(((flags == 0) | (flags == 1)).all()):
        raise ValueError(f"{fn}: {name} must be bool or hold only 0/1 values")
    return flags


def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation with time-limit bootstrap (Schulman et al. 2016).

    Args:
        rewards: ``[T, N]`` reward of step ``t`` in env ``n`` (reward units).
        values: ``[T, N]`` critic value of the observation *before* step ``t``.
        next_values: ``[T, N]`` critic value of the observation that followed step ``t``. For a
            truncated step this must be the value of the true final observation (evaluated with
            the env's post-step recurrent state, R-ALG-6), never of the reset observation.
        terminated: ``[T, N]`` bool or 0/1 float, true terminal transition (no bootstrap).
        truncated: ``[T, N]`` bool or 0/1 float, time-limit truncation (bootstrap from
            ``next_values`` but cut the advantage recursion).
        gamma: discount factor in [0, 1].
        lam: GAE λ in [0, 1].

    Returns:
        ``(advantages, returns)``, both ``[T, N]`` in the dtype of ``rewards``, with
        ``δ_t = r_t + γ(1 − term_t)·next_values_t − values_t``,
        ``A_t = δ_t + γλ(1 − done_t)·A_{t+1}`` (``done = term ∨ trunc``) and
        ``returns = A + values`` (the TD(λ) targets).

    Raises:
        ValueError: on a shape mismatch or a non-finite input, naming the tensor.

    The loop runs over ``T`` only; every step is vectorised over the ``N`` environments.
    """
    fn = "gae"
    _check_gae_inputs(fn, rewards, values, next_values, terminated, truncated)
    _check_discounts(fn, gamma, lam)
    dtype = rewards.dtype
    term = _as_done(fn, "terminated", terminated, dtype)
    done = torch.clamp(term + _as_done(fn, "truncated", truncated, dtype), max=1.0)
    # All δ_t at once; only the recursion needs the loop.
    deltas = rewards + gamma * (1.0 - term) * next_values - values
    carry = gamma * lam * (1.0 - done)  # [T, N] factor multiplying A_{t+1}
    advantages = torch.empty_like(deltas)
    # One op per step, written in place: A_t = δ_t + carry_t · A_{t+1} (A_T = 0); the per-step
    # views are made once up front (a view costs about as much as a small op).
    adv_t, delta_t, carry_t = (x.unbind(0) for x in (advantages, deltas, carry))
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = torch.addcmul(delta_t[t], carry_t[t], last, out=adv_t[t])
    return advantages, advantages + values


def gae_reference(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Plain per-env, per-step Python-float reference for :func:`gae` (design §11).

    Same arguments, shapes and result as :func:`gae`; deliberately written as the textbook double
    loop with no vectorisation, so that the fast version can be tested against it. Slow: use it
    only in tests and for debugging.
    """
    fn = "gae_reference"
    _check_gae_inputs(fn, rewards, values, next_values, terminated, truncated)
    _check_discounts(fn, gamma, lam)
    n_steps, n_envs = rewards.shape
    r = rewards.double().tolist()
    v = values.double().tolist()
    nv = next_values.double().tolist()
    term = terminated.double().tolist()
    trunc = truncated.double().tolist()
    adv = [[0.0] * n_envs for _ in range(n_steps)]
    for env in range(n_envs):
        next_adv = 0.0
        for t in reversed(range(n_steps)):
            is_term = term[t][env] != 0.0
            is_done = is_term or trunc[t][env] != 0.0
            bootstrap = 0.0 if is_term else nv[t][env]
            delta = r[t][env] + gamma * bootstrap - v[t][env]
            if is_done:
                next_adv = 0.0
            next_adv = delta + gamma * lam * next_adv
            adv[t][env] = next_adv
    advantages = torch.tensor(adv, dtype=torch.float64).to(rewards.dtype)
    advantages = advantages.to(rewards.device)
    return advantages, advantages + values


def _check_discounts(fn: str, gamma: float, lam: float) -> None:
    for name, x in (("gamma", gamma), ("lam", lam)):
        if not (math.isfinite(x) and 0.0 <= x <= 1.0):
            raise ValueError(f"{fn}: {name} must lie in [0, 1], got {x}")


class AdvantageStats(NamedTuple):
    """Statistics of one advantage normalisation (logged as ``train/advantages_norm_*``).

    Attributes:
        mean: mean of the raw advantages over all elements (float64 arithmetic).
        std: sample std (ddof=1) of the raw advantages over all elements; 0.0 for one element.
        max_abs: max |A| of the *normalised* advantages (R-ALG-7 alert when > 20).
        floor_hit: True when std < ``min_std`` so the advantages were centred only (for
            ``per_env``: in at least one column).
    """

    mean: float
    std: float
    max_abs: float
    floor_hit: bool


def normalize_advantages(
    adv: Tensor,
    *,
    per_env: bool = False,
    eps: float = 1e-8,
    min_std: float = 1e-6,
) -> tuple[Tensor, AdvantageStats]:
    """Normalise advantages once per rollout (design §1.2, R-ALG-7).

    Args:
        adv: advantages, any shape; ``[T, N]`` (time-major) when ``per_env``.
        per_env: normalise each env column of ``[T, N]`` separately instead of over all elements.
        eps: added to the std before dividing.
        min_std: std floor; if the std (of the whole tensor, or of a column when ``per_env``) is
            below it, that data is centred only, not divided — equal advantages never blow up.

    Returns:
        ``(normalised, stats)``: ``(adv − mean) / (std + eps)`` in the dtype and shape of ``adv``
        (statistics computed in float64 with ddof=1), and :class:`AdvantageStats`.
        A single element (or a column of one step when ``per_env``) is centred only.

    Raises:
        ValueError: on empty or non-finite input, or ``per_env`` with ``adv`` not ``[T, N]``.
    """
    fn = "normalize_advantages"
    if adv.numel() == 0:
        raise ValueError(f"{fn}: adv is empty, shape {tuple(adv.shape)}")
    check_finite(fn, "adv", adv)
    if eps < 0 or min_std < 0:
        raise ValueError(f"{fn}: eps and min_std must be >= 0, got eps={eps}, min_std={min_std}")
    x = adv.double()
    total_mean = float(x.mean())
    total_std = float(x.std(correction=1)) if x.numel() > 1 else 0.0
    if per_env:
        check_ndim(fn, "adv (per_env=True expects [T, N])", adv, 2)
        mean = x.mean(dim=0, keepdim=True)  # [1, N]
        one_step = x.shape[0] == 1
        std = torch.zeros_like(mean) if one_step else x.std(dim=0, correction=1, keepdim=True)
    else:
        mean = x.mean()
        std = x.std(correction=1) if x.numel() > 1 else torch.zeros_like(mean)
    floored = std < min_std
    # R-ALG-7: below the floor centre only (divide by 1), never by a tiny std.
    denom = torch.where(floored, torch.ones_like(std), std + eps)
    out = (x - mean) / denom
    stats = AdvantageStats(
        mean=total_mean,
        std=total_std,
        max_abs=float(out.abs().max()),
        floor_hit=bool(floored.any()),
    )
    return out.to(adv.dtype), stats
