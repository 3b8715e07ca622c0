"""Distributional critic math: quantile and categorical losses, projections, value clipping.

The categorical projections, mean and quantiles live in :mod:`riskppo.core.categorical` and are
re-exported here.

Shapes: ``B`` samples (batch), ``Nq`` predicted quantiles, ``Nt`` target samples, ``N`` atoms of
a fixed, evenly spaced categorical support. Values are in the critic's (normalised) return units.

Value clipping (R-ALG-5, docs/clipping.md): the loss is the mean over samples of the element-wise
``max(L(pred_b, target_b), L(clipped_b, target_b))`` where ``clipped`` is the prediction held near
the critic's *own* old prediction and ``target`` is the *unclipped* target in both terms (audit
finding #4). With twin critics each critic is clipped against its own old prediction and the two
losses are averaged (R-ALG-4): see :func:`twin_quantile_value_loss` and
:func:`twin_categorical_value_loss`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from riskppo.core._checks import check_ndim, check_probs_atoms, check_same_shape, check_support
from riskppo.core.categorical import (
    _project,
    categorical_mean,
    categorical_projection,
    categorical_to_quantiles,
    scalar_to_categorical,
)

__all__ = [
    "VF_CLIP_MODES",
    "TwinValueLoss",
    "VfClipMode",
    "categorical_mean",
    "categorical_projection",
    "categorical_to_quantiles",
    "categorical_value_loss",
    "clip_categorical",
    "clip_quantiles",
    "quantile_huber_loss",
    "quantile_midpoints",
    "quantile_value_loss",
    "scalar_to_categorical",
    "twin_categorical_value_loss",
    "twin_quantile_value_loss",
    "twin_value_loss",
]

VfClipMode = Literal["none", "mean_only", "mean_and_variance", "per_quantile"]
VF_CLIP_MODES: tuple[str, ...] = ("none", "mean_only", "mean_and_variance", "per_quantile")

# Floor for probabilities inside log() of the *clipped* categorical term only: a shifted and
# re-projected distribution can put exactly zero mass on an atom (R-ALG-5 categorical clipping).
_PROB_FLOOR = 1e-8
# Spreads below this (in value units) are treated as zero: no rescaling of a point mass.
_MIN_SPREAD = 1e-12


# --------------------------------------------------------------------------------------------
# Quantile critic
# --------------------------------------------------------------------------------------------


def quantile_midpoints(
    n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> Tensor:
    """Quantile levels ``τ_i = (2i − 1) / (2n)``, ``i = 1..n``, as a ``[n]`` tensor.

    These are the minimisers' levels of the quantile regression loss (Dabney et al. 2018, QR-DQN).
    """
    if n < 1:
        raise ValueError(f"quantile_midpoints: n must be >= 1, got {n}")
    return (torch.arange(n, dtype=torch.float64, device=device) + 0.5).div(n).to(dtype)


def quantile_huber_loss(
    pred: Tensor,
    target: Tensor,
    taus: Tensor | None = None,
    kappa: float = 1.0,
) -> Tensor:
    """Quantile Huber loss per sample (Dabney et al. 2018, eq. 10; design §1.2).

    Args:
        pred: ``[B, Nq]`` predicted quantiles (value units).
        target: ``[B, Nt]`` target samples (value units); treated as a constant.
        taus: ``[Nq]`` or ``[B, Nq]`` quantile levels of ``pred``; default
            :func:`quantile_midpoints` ``(2i − 1)/(2Nq)``.
        kappa: Huber threshold κ ≥ 0; ``kappa=0`` gives the pure quantile (pinball) loss.

    Returns:
        ``[B]``: ``Σ_i mean_j |τ_i − 1{δ_ij < 0}| · L_κ(δ_ij) / κ`` with
        ``δ_ij = target_j − pred_i`` and ``L_κ`` the Huber loss (``0.5δ²`` for ``|δ| ≤ κ``,
        else ``κ(|δ| − κ/2)``);
        for ``κ = 0`` the term ``L_κ/κ`` is replaced by ``|δ|``.

    Raises:
        ValueError: on a shape mismatch or ``kappa < 0``.
    """
    fn = "quantile_huber_loss"
    _check_huber_args(fn, pred, target, kappa)
    n_q = pred.shape[1]
    if taus is None:
        taus = quantile_midpoints(n_q, dtype=pred.dtype, device=pred.device)
    if taus.shape not in ((n_q,), (pred.shape[0], n_q)):
        raise ValueError(
            f"{fn}: taus must have shape [Nq]=({n_q},) or [B, Nq]={tuple(pred.shape)}, "
            f"got {tuple(taus.shape)}"
        )
    b, n_t = pred.shape[0], target.shape[1]
    tau = taus.to(pred.dtype).expand_as(pred)  # [B, Nq]
    if n_t == 1:  # one target sample (a λ-return): [B, Nq] throughout, no mean over Nt
        p, t = pred, target.detach().expand(b, n_q)
    else:  # views, no copies: [B, Nq, Nt]
        tau = tau.unsqueeze(-1)
        p = pred.unsqueeze(-1).expand(b, n_q, n_t)
        t = target.detach().unsqueeze(1).expand(b, n_q, n_t)
    # |τ_i − 1{δ_ij < 0}| with δ_ij = t_j − p_i: 1 − τ_i where the target lies below the quantile.
    weight = torch.where(t < p.detach(), 1.0 - tau, tau)
    # Fused elementwise kernels (one autograd node each): L_κ(δ) / κ, or |δ| for κ = 0.
    if kappa == 0.0:
        huber = F.l1_loss(p, t, reduction="none")
    else:
        huber = F.huber_loss(p, t, reduction="none", delta=kappa)
        if kappa != 1.0:
            huber = huber / kappa
    per_pair = weight * huber
    return (per_pair if n_t == 1 else per_pair.mean(dim=2)).sum(dim=1)


def _check_huber_args(fn: str, pred: Tensor, target: Tensor, kappa: float) -> None:
    """``pred`` ``[B, Nq]`` and ``target`` ``[B, Nt]`` share ``B``; ``kappa`` is finite, ≥ 0."""
    check_ndim(fn, "pred", pred, 2)
    check_ndim(fn, "target", target, 2)
    if target.shape[0] != pred.shape[0]:
        raise ValueError(
            f"{fn}: pred [B, Nq]={tuple(pred.shape)} and target [B, Nt]={tuple(target.shape)} "
            "must have the same batch size B"
        )
    if not (math.isfinite(kappa) and kappa >= 0.0):
        raise ValueError(f"{fn}: kappa must be >= 0, got {kappa}")


def _check_clip(fn: str, clip: float | None, mode: str) -> bool:
    """Validate (clip, mode); return True when clipping is active."""
    if mode not in VF_CLIP_MODES:
        raise ValueError(f"{fn}: mode must be one of {VF_CLIP_MODES}, got {mode!r}")
    if clip is None or mode == "none":
        return False
    if not (math.isfinite(clip) and clip >= 0.0):
        raise ValueError(f"{fn}: clip must be a finite number >= 0, got {clip}")
    return True


def _clamp_around(x: Tensor, center: Tensor, clip: float) -> Tensor:
    return center + torch.clamp(x - center, -clip, clip)


def clip_quantiles(pred: Tensor, old_pred: Tensor, clip: float, mode: str) -> tuple[Tensor, Tensor]:
    """Hold a predicted quantile distribution near the old prediction (R-ALG-5).

    Args:
        pred: ``[B, Nq]`` current predicted quantiles (value units).
        old_pred: ``[B, Nq]`` the same critic's prediction at rollout time (treated as constant).
        clip: clip range in value units (≥ 0).
        mode: one of

            * ``"none"``: no clipping.
            * ``"mean_only"``: shift the whole distribution by a constant so that its mean (the
              average of the quantiles) stays within ``old_mean ± clip``. **Does not constrain
              the variance/shape**: the spread may change freely.
            * ``"mean_and_variance"``: the mean as above, and additionally scale the deviations
              around the mean so that the spread (population std over the quantiles) stays within
              ``[max(old_std − clip, 0), old_std + clip]``. A point-mass prediction (std 0) cannot
              be scaled and keeps its zero spread.
            * ``"per_quantile"``: ``old + clamp(pred − old, −clip, clip)`` per quantile.

    Returns:
        ``(clipped, touched)``: ``clipped`` ``[B, Nq]`` equals ``pred`` exactly for samples the
        clip did not touch (gradient flows through ``pred``; for touched samples it still flows
        through the unclamped parts, e.g. the shape under ``mean_only``) and ``touched`` ``[B]``
        bool marks the samples where the clip changed the prediction.
    """
    fn = "clip_quantiles"
    check_ndim(fn, "pred", pred, 2)
    check_same_shape(fn, ("pred", "old_pred"), pred, old_pred)
    no_touch = torch.zeros(pred.shape[0], dtype=torch.bool, device=pred.device)
    if not _check_clip(fn, clip, mode):
        return pred, no_touch
    old = old_pred.detach().to(pred.dtype)
    if mode == "per_quantile":
        clipped = _clamp_around(pred, old, clip)
        return clipped, (pred - old).abs().gt(clip).any(dim=1)
    mean = pred.mean(dim=1, keepdim=True)  # [B, 1]
    old_mean = old.mean(dim=1, keepdim=True)
    new_mean = _clamp_around(mean, old_mean, clip)
    touched = (mean - old_mean).abs().gt(clip).squeeze(1)  # [B]
    dev = pred - mean  # [B, Nq] deviations; their mean is 0, so adding new_mean sets the mean
    if mode == "mean_and_variance":
        var = dev.pow(2).mean(dim=1, keepdim=True)
        std = var.clamp_min(_MIN_SPREAD**2).sqrt()  # clamp keeps the sqrt gradient finite at 0
        old_std = (old - old_mean).pow(2).mean(dim=1, keepdim=True).sqrt()
        lo = (old_std - clip).clamp_min(0.0)
        hi = old_std + clip
        new_std = torch.minimum(torch.maximum(std, lo), hi)
        spread_touched = ((std < lo) | (std > hi)) & (var > _MIN_SPREAD**2)
        scale = torch.where(spread_touched, new_std / std, torch.ones_like(std))
        dev = dev * scale
        touched = touched | spread_touched.squeeze(1)
    clipped = torch.where(touched.unsqueeze(1), new_mean + dev, pred)
    return clipped, touched


def _as_target_samples(fn: str, target: Tensor, batch: int) -> Tensor:
    """``[B]`` or ``[B, Nt]`` targets -> ``[B, Nt]`` (detached)."""
    if target.dim() == 1:
        target = target.unsqueeze(1)
    if target.dim() != 2 or target.shape[0] != batch:
        raise ValueError(
            f"{fn}: target must have shape [B] or [B, Nt] with B={batch}, got {tuple(target.shape)}"
        )
    return target.detach()


def quantile_value_loss(
    pred: Tensor,
    old_pred: Tensor,
    target: Tensor,
    *,
    taus: Tensor | None = None,
    kappa: float = 1.0,
    clip: float | None,
    mode: str,
) -> tuple[Tensor, Tensor]:
    """Quantile-critic value loss with optional value clipping (R-ALG-3, R-ALG-5).

    Args:
        pred: ``[B, Nq]`` one critic's predicted quantiles (normalised value units).
        old_pred: ``[B, Nq]`` **this same critic's** prediction at rollout time (with twin critics
            call once per critic with its own old prediction and average: R-ALG-4, or use
            :func:`twin_quantile_value_loss`).
        target: ``[B]`` scalar targets (e.g. λ-returns) or ``[B, Nt]`` target samples; the
            *unclipped* target, used for both terms; never modified (it is detached).
        taus, kappa: see :func:`quantile_huber_loss`.
        clip: clip range in value units, or ``None`` for no clipping.
        mode: see :func:`clip_quantiles`.

    Returns:
        ``(loss, clip_fraction)``, both 0-dim: ``loss = mean_b max(L(pred_b), L(clipped_b))``
        element-wise per sample (docs/clipping.md) and ``clip_fraction`` the (detached) fraction
        of samples the clip touched (``train/vf_clip_fraction``); 0 when not clipping.
    """
    fn = "quantile_value_loss"
    check_ndim(fn, "pred", pred, 2)
    check_same_shape(fn, ("pred", "old_pred"), pred, old_pred)
    tgt = _as_target_samples(fn, target, pred.shape[0])
    unclipped = quantile_huber_loss(pred, tgt, taus, kappa)  # [B]
    if not _check_clip(fn, clip, mode):
        return unclipped.mean(), torch.zeros((), dtype=pred.dtype, device=pred.device)
    assert clip is not None  # narrowed by _check_clip
    clipped_pred, touched = clip_quantiles(pred, old_pred, clip, mode)
    clipped = quantile_huber_loss(clipped_pred, tgt, taus, kappa)  # same unclipped target
    loss = torch.maximum(unclipped, clipped).mean()  # element-wise max, then mean (R-ALG-5)
    return loss, touched.to(pred.dtype).mean()


# --------------------------------------------------------------------------------------------
# Categorical critic
# --------------------------------------------------------------------------------------------


def _spread(probs: Tensor, atoms: Tensor, mean: Tensor) -> Tensor:
    """Population variance of categorical distributions: ``[B, N]`` → ``[B, 1]``."""
    return (probs * (atoms - mean).pow(2)).sum(dim=1, keepdim=True)


def clip_categorical(
    probs: Tensor, old_probs: Tensor, atoms: Tensor, clip: float, mode: str
) -> tuple[Tensor, Tensor]:
    """Hold a predicted categorical distribution near the old one by moving its atoms (R-ALG-5).

    The predicted mass ``probs`` is placed at moved locations and re-projected onto the fixed
    support (:func:`categorical_projection`'s linear split), which is differentiable in the
    probabilities:

    * ``"mean_only"``: locations ``z + (new_mean − mean)`` with the mean clamped to
      ``old_mean ± clip``. Does not constrain the variance (the re-projection itself adds at most
      ``Δz²/4`` of interpolation variance).
    * ``"mean_and_variance"``: locations ``new_mean + (z − mean)·new_std/std`` with the std
      clamped to ``[max(old_std − clip, 0), old_std + clip]`` as well.
    * ``"per_quantile"``: not defined for categorical critics; raises ``ValueError``.

    Mass moved beyond the support is clipped to the end atoms, so near ``v_min``/``v_max`` the
    clipped mean can fall short of ``new_mean`` (by the clipped mass times its overshoot).

    Args:
        probs: ``[B, N]`` current predicted probabilities.
        old_probs: ``[B, N]`` the same critic's probabilities at rollout time (constant).
        atoms: ``[N]`` evenly spaced support (value units).
        clip: clip range in value units (≥ 0).
        mode: ``"none" | "mean_only" | "mean_and_variance"``.

    Returns:
        ``(clipped_probs [B, N], touched [B] bool)``; untouched rows equal ``probs`` exactly.
    """
    fn = "clip_categorical"
    check_ndim(fn, "probs", probs, 2)
    check_same_shape(fn, ("probs", "old_probs"), probs, old_probs)
    check_probs_atoms(fn, probs, atoms)
    if mode == "per_quantile":
        raise ValueError("per_quantile clipping is only defined for quantile critics")
    no_touch = torch.zeros(probs.shape[0], dtype=torch.bool, device=probs.device)
    if not _check_clip(fn, clip, mode):
        return probs, no_touch
    check_support(fn, atoms)
    z = atoms.to(probs.dtype)
    old = old_probs.detach().to(probs.dtype)
    mean = (probs * z).sum(dim=1, keepdim=True)  # [B, 1]
    old_mean = (old * z).sum(dim=1, keepdim=True)
    new_mean = _clamp_around(mean, old_mean, clip)
    touched = (mean - old_mean).abs().gt(clip).squeeze(1)
    dev = z - mean  # [B, N] atom offsets from the predicted mean
    if mode == "mean_and_variance":
        var = _spread(probs, z, mean)
        std = var.clamp_min(_MIN_SPREAD**2).sqrt()
        old_std = _spread(old, z, old_mean).sqrt()
        lo = (old_std - clip).clamp_min(0.0)
        hi = old_std + clip
        new_std = torch.minimum(torch.maximum(std, lo), hi)
        spread_touched = ((std < lo) | (std > hi)) & (var > _MIN_SPREAD**2)
        dev = dev * torch.where(spread_touched, new_std / std, torch.ones_like(std))
        touched = touched | spread_touched.squeeze(1)
    moved = _project(new_mean + dev, probs, z)
    return torch.where(touched.unsqueeze(1), moved, probs), touched


def categorical_value_loss(
    logits: Tensor,
    old_probs: Tensor,
    target_probs: Tensor,
    atoms: Tensor,
    *,
    clip: float | None,
    mode: str,
) -> tuple[Tensor, Tensor]:
    """Categorical-critic value loss with optional value clipping (R-ALG-3, R-ALG-5).

    Args:
        logits: ``[B, N]`` one critic's predicted logits.
        old_probs: ``[B, N]`` **this same critic's** probabilities at rollout time (twin critics:
            once per critic with its own old prediction, then average — R-ALG-4, or use
            :func:`twin_categorical_value_loss`).
        target_probs: ``[B, N]`` target distribution on ``atoms`` (e.g. from
            :func:`categorical_projection` or :func:`scalar_to_categorical`); the *unclipped*
            target used for both terms, never modified (detached).
        atoms: ``[N]`` evenly spaced support.
        clip: clip range in value units, or ``None``.
        mode: ``"none" | "mean_only" | "mean_and_variance"`` (see :func:`clip_categorical`);
            ``"per_quantile"`` raises ``ValueError``.

    Returns:
        ``(loss, clip_fraction)`` 0-dim. Per sample the cross-entropy ``−Σ_k t_k log p_k / log N``
        (divided by log N so ``vf_coef`` transfers across atom counts, R-ALG-3); the loss is the
        mean over samples of the element-wise max of the unclipped and clipped cross-entropies.
        In the clipped term probabilities are floored at 1e-8 inside the log, because a moved
        distribution can leave an atom with no mass.
    """
    fn = "categorical_value_loss"
    check_ndim(fn, "logits", logits, 2)
    check_same_shape(fn, ("logits", "old_probs"), logits, old_probs)
    check_same_shape(fn, ("logits", "target_probs"), logits, target_probs)
    check_probs_atoms(fn, logits, atoms)
    if mode == "per_quantile":
        raise ValueError("per_quantile clipping is only defined for quantile critics")
    target = target_probs.detach().to(logits.dtype)
    log_n = math.log(logits.shape[1])
    unclipped = -(target * torch.log_softmax(logits, dim=1)).sum(dim=1) / log_n  # [B]
    if not _check_clip(fn, clip, mode):
        return unclipped.mean(), torch.zeros((), dtype=logits.dtype, device=logits.device)
    assert clip is not None  # narrowed by _check_clip
    clipped_probs, touched = clip_categorical(
        torch.softmax(logits, dim=1), old_probs, atoms, clip, mode
    )
    clipped = -(target * clipped_probs.clamp_min(_PROB_FLOOR).log()).sum(dim=1) / log_n
    # Untouched rows: use the exact unclipped value (clipped_probs == softmax there).
    clipped = torch.where(touched, clipped, unclipped)
    loss = torch.maximum(unclipped, clipped).mean()  # element-wise max (R-ALG-5)
    return loss, touched.to(logits.dtype).mean()


# --------------------------------------------------------------------------------------------
# Twin critics (R-ALG-4)
# --------------------------------------------------------------------------------------------


class TwinValueLoss(NamedTuple):
    """Result of a twin-critic value loss.

    Attributes:
        loss: 0-dim, mean of the per-critic losses (what is back-propagated).
        clip_fraction: 0-dim detached, mean of the per-critic clip fractions.
        per_critic_loss: one 0-dim loss per critic, in order.
        per_critic_clip_fraction: one 0-dim detached clip fraction per critic.
    """

    loss: Tensor
    clip_fraction: Tensor
    per_critic_loss: tuple[Tensor, ...]
    per_critic_clip_fraction: tuple[Tensor, ...]


def twin_value_loss(losses: Sequence[Tensor]) -> Tensor:
    """Average of per-critic 0-dim losses (R-ALG-4: the value loss is the critics' mean)."""
    if len(losses) == 0:
        raise ValueError("twin_value_loss: losses is empty")
    for i, x in enumerate(losses):
        if x.dim() != 0:
            raise ValueError(f"twin_value_loss: losses[{i}] must be 0-dim, got {tuple(x.shape)}")
    return torch.stack(list(losses)).mean()


def _pair_up(fn: str, preds: Sequence[Tensor], olds: Sequence[Tensor]) -> None:
    if len(preds) == 0 or len(preds) != len(olds):
        raise ValueError(
            f"{fn}: need one old prediction per critic, got {len(preds)} predictions and "
            f"{len(olds)} old predictions"
        )


def _twin(results: list[tuple[Tensor, Tensor]]) -> TwinValueLoss:
    losses = tuple(r[0] for r in results)
    fracs = tuple(r[1] for r in results)
    return TwinValueLoss(
        loss=twin_value_loss(losses),
        clip_fraction=torch.stack(fracs).mean(),
        per_critic_loss=losses,
        per_critic_clip_fraction=fracs,
    )


def twin_quantile_value_loss(
    preds: Sequence[Tensor],
    old_preds: Sequence[Tensor],
    target: Tensor,
    *,
    taus: Tensor | None = None,
    kappa: float = 1.0,
    clip: float | None,
    mode: str,
) -> TwinValueLoss:
    """Twin quantile critics: ``preds[k]`` is clipped against ``old_preds[k]`` only (R-ALG-4).

    Each critic gets :func:`quantile_value_loss` with its **own** old prediction and the same
    unclipped ``target`` (``[B]`` or ``[B, Nt]``); the losses are averaged (R-ALG-4).
    """
    _pair_up("twin_quantile_value_loss", preds, old_preds)
    return _twin(
        [
            quantile_value_loss(p, o, target, taus=taus, kappa=kappa, clip=clip, mode=mode)
            for p, o in zip(preds, old_preds, strict=True)
        ]
    )


def twin_categorical_value_loss(
    logits: Sequence[Tensor],
    old_probs: Sequence[Tensor],
    target_probs: Tensor,
    atoms: Tensor,
    *,
    clip: float | None,
    mode: str,
) -> TwinValueLoss:
    """Twin categorical critics: ``logits[k]`` is clipped against ``old_probs[k]`` only (R-ALG-4).

    Each critic gets :func:`categorical_value_loss` with its **own** old probabilities and the same
    unclipped ``target_probs`` ``[B, N]``; the losses are averaged (R-ALG-4).
    """
    _pair_up("twin_categorical_value_loss", logits, old_probs)
    return _twin(
        [
            categorical_value_loss(lg, o, target_probs, atoms, clip=clip, mode=mode)
            for lg, o in zip(logits, old_probs, strict=True)
        ]
    )
