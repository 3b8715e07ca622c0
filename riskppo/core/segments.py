"""Segment returns and the CVaR policy-gradient advantage (R-RISK-2).

A *segment* is an episode, or — for long or continuing tasks such as trading — a run of at most
``horizon`` consecutive steps inside an episode. The constraint is on the distribution of the
(undiscounted, raw-unit) segment return ``R``.

CVaR policy gradient (Rockafellar–Uryasev form; Tamar et al. 2015; CPPO, Ying et al. 2022): with
``ν`` the current VaR_α estimate, ``∇ CVaR_α(R) = E[∇log p(τ) · min(R − ν, 0) / α]``, so every
step of a segment gets the extra advantage ``min(R − ν, 0) / α``. A state-dependent baseline keeps
the estimator unbiased and lowers its variance: the shortfall predicted at step ``t`` from the
return accumulated so far in the segment plus the risk head's quantiles of the segment
return-to-go, ``b_t = mean_j min(acc_t + q_j(s_t) − ν, 0) / α``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from riskppo.core._checks import check_alpha

__all__ = ["SegmentInfo", "cvar_advantage", "segment_returns"]


class SegmentInfo(NamedTuple):
    """Per-step segment bookkeeping of a ``[T, N]`` rollout (raw reward units).

    Attributes:
        acc_before: ``[T, N]`` return accumulated in the segment before step ``t``'s reward.
        seg_return: ``[T, N]`` return of the segment step ``t`` belongs to; NaN where that segment
            has not ended by the end of the rollout.
        starts: ``[T, N]`` bool, step ``t`` is the first step of its segment.
        ends: ``[T, N]`` bool, the segment ends with step ``t``.
        acc_after: ``[N]`` accumulated return of the open segment after the last step.
        len_after: ``[N]`` its length in steps.
    """

    acc_before: Tensor
    seg_return: Tensor
    starts: Tensor
    ends: Tensor
    acc_after: Tensor
    len_after: Tensor


def segment_returns(
    rewards: Tensor,
    dones: Tensor,
    horizon: int | None,
    acc0: Tensor,
    len0: Tensor,
) -> SegmentInfo:
    """Split a rollout into segments and give every step its segment's return.

    Args:
        rewards: ``[T, N]`` raw rewards.
        dones: ``[T, N]`` episode ended with step ``t`` (terminated or truncated).
        horizon: segment length cap in steps; ``None`` = whole episodes.
        acc0, len0: ``[N]`` accumulated return and length of each env's open segment before the
            rollout (segments carry over between rollouts).
    """
    if rewards.shape != dones.shape or rewards.dim() != 2:
        raise ValueError(
            f"segment_returns: rewards {tuple(rewards.shape)} and dones {tuple(dones.shape)} "
            "must both be [T, N]"
        )
    if horizon is not None and horizon < 1:
        raise ValueError(f"segment_returns: horizon must be >= 1 or None, got {horizon}")
    T = rewards.shape[0]
    r = rewards.double()
    nan = torch.full_like(r[0], float("nan"))
    acc = acc0.double().clone()
    length = len0.clone().long()
    acc_before = torch.empty_like(r)
    end_value = torch.empty_like(r)
    starts = torch.empty(dones.shape, dtype=torch.bool, device=dones.device)
    ends = torch.empty_like(starts)
    for t in range(T):
        starts[t] = length == 0
        acc_before[t] = acc
        acc = acc + r[t]
        length = length + 1
        end = dones[t].bool()
        if horizon is not None:
            end = end | (length >= horizon)
        ends[t] = end
        end_value[t] = torch.where(end, acc, nan)
        acc = torch.where(end, torch.zeros_like(acc), acc)
        length = torch.where(end, torch.zeros_like(length), length)
    # Propagate each segment's final return backwards over its steps.
    seg_return = torch.empty_like(r)
    current = nan
    for t in range(T - 1, -1, -1):
        current = torch.where(ends[t], end_value[t], current)
        seg_return[t] = current
        current = torch.where(starts[t], nan, current)
    return SegmentInfo(acc_before, seg_return, starts, ends, acc, length)


def cvar_advantage(
    info: SegmentInfo,
    rtg_quantiles: Tensor,
    nu: float,
    alpha: float,
) -> Tensor:
    """The CVaR policy-gradient advantage with the distributional baseline, ``[T, N]`` (raw units).

    ``A_cvar_t = min(R − ν, 0)/α − b_t`` on steps whose segment ended inside the rollout, 0
    elsewhere, with ``b_t = mean_j min(acc_t + q_j(s_t) − ν, 0)/α`` and ``rtg_quantiles``
    ``[T, N, K]`` the predicted quantiles of the segment return-to-go at ``s_t``.
    """
    check_alpha("cvar_advantage", alpha)
    if rtg_quantiles.shape[:2] != info.seg_return.shape:
        raise ValueError(
            f"cvar_advantage: rtg_quantiles {tuple(rtg_quantiles.shape)} must be [T, N, K] with "
            f"[T, N] = {tuple(info.seg_return.shape)}"
        )
    complete = torch.isfinite(info.seg_return)
    shortfall = torch.clamp(torch.nan_to_num(info.seg_return) - nu, max=0.0) / alpha
    predicted = info.acc_before.unsqueeze(-1) + rtg_quantiles.double()
    baseline = torch.clamp(predicted - nu, max=0.0).mean(-1) / alpha
    return torch.where(complete, shortfall - baseline, torch.zeros_like(shortfall))
