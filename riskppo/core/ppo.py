"""PPO policy loss, KL estimators and AWR behaviour-cloning weights (design §1.2, R-ALG-9/11/12)."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from riskppo.core._checks import check_same_shape

__all__ = ["PolicyLossStats", "awr_weights", "kl_estimators", "ppo_policy_loss"]

# |log r| above this is counted as "large" in the stats (design §1.2).
LARGE_LOG_RATIO = 10.0


class PolicyLossStats(NamedTuple):
    """Diagnostics of one :func:`ppo_policy_loss` call; every field a detached 0-dim tensor.

    Attributes:
        clip_fraction: fraction of samples with ``|r − 1| > clip_range`` (``train/clip_fraction``).
        clamp_fraction: fraction of samples whose finite log-ratio exceeded ``±log_ratio_clip``
            and was clamped (``train/log_ratio_clamp_frac``; R-ALG-9 alert above 1%).
        n_large_log_ratio: int64 count of finite ``|log r| > 10``.
        approx_kl_k1: ``mean(old − new)`` over the finite log-ratios (``train/approx_kl_k1``).
        approx_kl_k3: ``mean((r − 1) − log r)`` over the finite log-ratios (``train/approx_kl_k3``).
        n_nonfinite: int64 count of non-finite log-ratios (the loss is then non-finite and the
            trainer skips the batch, ``error/log_ratio_nonfinite``, R-ALG-9).
    """

    clip_fraction: Tensor
    clamp_fraction: Tensor
    n_large_log_ratio: Tensor
    approx_kl_k1: Tensor
    approx_kl_k3: Tensor
    n_nonfinite: Tensor


def kl_estimators(log_prob: Tensor, old_log_prob: Tensor) -> tuple[Tensor, Tensor]:
    """Sample estimators of ``KL(π_old ‖ π_new)`` from actions drawn by ``π_old`` (Schulman 2020).

    Args:
        log_prob: ``[...]`` log π_new(a|s) (nats).
        old_log_prob: ``[...]`` log π_old(a|s), same shape.

    Returns:
        ``(k1, k3)`` 0-dim: ``k1 = mean(old − new)`` (unbiased, high variance, can be negative) and
        ``k3 = mean((r − 1) − log r)`` with ``log r = new − old`` (unbiased, ≥ 0, low variance).
        Computed in float64 (cast back) so that ``exp(log r)`` does not overflow float32.
    """
    check_same_shape("kl_estimators", ("log_prob", "old_log_prob"), log_prob, old_log_prob)
    log_ratio = log_prob.double() - old_log_prob.double()
    k1 = (-log_ratio).mean()
    k3 = (torch.expm1(log_ratio) - log_ratio).mean()  # expm1: exact near r = 1
    return k1.to(log_prob.dtype), k3.to(log_prob.dtype)


def ppo_policy_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    adv: Tensor,
    clip_range: float,
    log_ratio_clip: float = 20.0,
) -> tuple[Tensor, PolicyLossStats]:
    """Clipped PPO surrogate (Schulman et al. 2017) with a guarded ratio (design §1.2, R-ALG-9).

    Args:
        log_prob: ``[B]`` (any shape) log-probabilities of the taken actions under the current
            policy (nats, with gradient).
        old_log_prob: same shape, at rollout time (treated as constant).
        adv: same shape, advantages (normalised once per rollout, R-ALG-7; constant).
        clip_range: ε > 0 of the ratio clip ``[1 − ε, 1 + ε]``.
        log_ratio_clip: finite log-ratios are clamped to ``±log_ratio_clip`` before ``exp`` so the
            ratio cannot overflow.

    Returns:
        ``(loss, stats)``: ``loss = −mean(min(r·A, clip(r, 1−ε, 1+ε)·A))`` (0-dim) and
        :class:`PolicyLossStats`. Non-finite log-ratios are **not** clamped away: they are counted
        in ``stats.n_nonfinite`` and make the loss NaN, so the caller can skip the batch.

    Raises:
        ValueError: on a shape mismatch or non-positive ``clip_range``/``log_ratio_clip``.
    """
    fn = "ppo_policy_loss"
    check_same_shape(fn, ("log_prob", "old_log_prob"), log_prob, old_log_prob)
    check_same_shape(fn, ("log_prob", "adv"), log_prob, adv)
    if not (math.isfinite(clip_range) and clip_range > 0.0):
        raise ValueError(f"{fn}: clip_range must be > 0, got {clip_range}")
    if not log_ratio_clip > 0.0:
        raise ValueError(f"{fn}: log_ratio_clip must be > 0, got {log_ratio_clip}")
    adv = adv.detach()
    log_ratio = log_prob - old_log_prob.detach()
    finite = torch.isfinite(log_ratio)
    # Clamp finite values only; NaN/±inf pass through so the loss shows them (R-ALG-9).
    guarded = torch.where(finite, log_ratio.clamp(-log_ratio_clip, log_ratio_clip), log_ratio)
    ratio = torch.exp(guarded)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1.0 - clip_range, 1.0 + clip_range) * adv)
    # R-ALG-9: any non-finite log-ratio makes the loss NaN (exp(−inf) = 0 alone would hide it).
    nan = torch.full((), math.nan, dtype=surrogate.dtype, device=surrogate.device)
    loss = torch.where(finite.all(), -surrogate.mean(), nan)

    with torch.no_grad():
        # Masked sums instead of boolean indexing: no host-device sync on accelerators.
        lr_fin = torch.where(finite, log_ratio.detach(), torch.zeros_like(log_ratio)).double()
        n_fin = finite.sum()
        numel = max(log_ratio.numel(), 1)
        dtype = log_prob.dtype
        stats = PolicyLossStats(
            clip_fraction=(((ratio - 1.0).abs() > clip_range).sum() / numel).to(dtype),
            clamp_fraction=((lr_fin.abs() > log_ratio_clip).sum() / numel).to(dtype),
            n_large_log_ratio=(lr_fin.abs() > LARGE_LOG_RATIO).sum(),
            approx_kl_k1=((-lr_fin).sum() / n_fin).to(dtype),
            approx_kl_k3=((torch.expm1(lr_fin) - lr_fin).sum() / n_fin).to(dtype),
            n_nonfinite=log_ratio.numel() - n_fin,
        )
    return loss, stats


def awr_weights(adv: Tensor, beta: float = 5.0, max_weight: float = 100.0) -> Tensor:
    """Advantage-weighted regression weights ``exp(min(A/β, log max_weight))`` (R-ALG-12).

    The exponent is clamped **before** ``exp`` (audit fix #4), so huge advantages give exactly
    ``max_weight`` and never overflow. Args: ``adv`` ``[...]`` advantages, ``beta > 0``
    temperature, ``max_weight > 0`` cap. Returns detached weights of the shape of ``adv``.
    """
    if not (math.isfinite(beta) and beta > 0.0):
        raise ValueError(f"awr_weights: beta must be > 0, got {beta}")
    if not (math.isfinite(max_weight) and max_weight > 0.0):
        raise ValueError(f"awr_weights: max_weight must be > 0, got {max_weight}")
    exponent = (adv.detach() / beta).clamp(max=math.log(max_weight))
    return torch.exp(exponent)
