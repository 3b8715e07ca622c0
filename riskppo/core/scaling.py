"""Return statistics, value-target scaling and PopArt output rescaling (R-ALG-8).

The critic works in normalised units ``n``; de-normalised values are ``v = n / scale + mean``.
Order per rollout (R-ALG-8, audit fix #1): update the return statistics with the rollout
(:func:`update_moments`), compute the new scale (:func:`value_target_scale`), rescale the critic's
last layer so its de-normalised outputs are unchanged (:func:`popart_rescale`), then normalise the
targets with the *new* statistics.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from riskppo.core._checks import check_finite

__all__ = [
    "RunningMoments",
    "init_moments",
    "popart_rescale",
    "update_moments",
    "value_target_scale",
]


class RunningMoments(NamedTuple):
    """Running mean/variance of a stream of values (float64).

    Attributes:
        mean: ``[]`` or ``[D]`` running mean.
        var: same shape, running **population** variance (ddof=0, as ``np.var``).
        count: ``[]`` number of values merged so far (float64, may be 0).
    """

    mean: Tensor
    var: Tensor
    count: Tensor  # type: ignore[assignment]  # shadows tuple.count; name fixed by the API


def init_moments(
    shape: tuple[int, ...] = (), *, device: torch.device | str | None = None
) -> RunningMoments:
    """Empty statistics: mean 0, var 1 (a neutral placeholder), count 0 — float64."""
    return RunningMoments(
        mean=torch.zeros(shape, dtype=torch.float64, device=device),
        var=torch.ones(shape, dtype=torch.float64, device=device),
        count=torch.zeros((), dtype=torch.float64, device=device),
    )


def update_moments(m: RunningMoments, batch: Tensor) -> RunningMoments:
    """Merge the moments of ``batch`` over dim 0 into ``m`` (Chan, Golub & LeVeque 1979).

    Args:
        m: current statistics; ``mean``/``var`` of shape ``batch.shape[1:]``.
        batch: ``[M, ...]`` new values (any float dtype; merged in float64). ``M = 0`` returns
            ``m`` unchanged.

    Returns:
        New :class:`RunningMoments` equal to the mean and population variance of all values seen
        (exact up to float64 round-off: the same as ``np.mean``/``np.var`` of the concatenation).
        With ``m.count == 0`` the result is exactly the batch moments.

    Raises:
        ValueError: on a shape mismatch or non-finite values in ``batch``.
    """
    fn = "update_moments"
    if batch.dim() < 1 or batch.shape[1:] != m.mean.shape:
        raise ValueError(
            f"{fn}: batch must have shape [M, *mean.shape]=[M, {', '.join(map(str, m.mean.shape))}]"
            f", got {tuple(batch.shape)}"
        )
    if batch.shape[0] == 0:
        return m
    check_finite(fn, "batch", batch)
    x = batch.to(torch.float64)
    n_b = float(batch.shape[0])
    b_mean = x.mean(dim=0)
    b_var = x.var(dim=0, correction=0)
    count = m.count.to(torch.float64)
    total = count + n_b
    delta = b_mean - m.mean
    mean = m.mean + delta * (n_b / total)
    # Parallel merge of the sums of squared deviations M2 = var·count.
    m2 = m.var * count + b_var * n_b + delta.pow(2) * (count * n_b / total)
    return RunningMoments(mean=mean, var=m2 / total, count=total)


def value_target_scale(
    std: float | Tensor, *, ret_clip: float, std_floor: float, cap: float = 100.0
) -> tuple[float, float]:
    """Scale applied to value targets (R-ALG-8).

    Args:
        std: std of returns (return units).
        ret_clip: > 0, the number of stds that maps to one normalised unit.
        std_floor: > 0, lower bound on ``std`` (return units).
        cap: > 0, upper bound on the scale.

    Returns:
        ``(scale, uncapped)`` with ``uncapped = 1 / max(ret_clip·std, ret_clip·std_floor)`` and
        ``scale = min(uncapped, cap)`` (logged as ``train/value_target_scale``; the caller raises
        ``warn/excessive_return_scaling`` when ``uncapped > cap``).
    """
    fn = "value_target_scale"
    s = float(std)
    if not (math.isfinite(s) and s >= 0.0):
        raise ValueError(f"{fn}: std must be finite and >= 0, got {s}")
    for name, x in (("ret_clip", ret_clip), ("std_floor", std_floor), ("cap", cap)):
        if not (math.isfinite(x) and x > 0.0):
            raise ValueError(f"{fn}: {name} must be finite and > 0, got {x}")
    uncapped = 1.0 / max(ret_clip * s, ret_clip * std_floor)
    return min(uncapped, cap), uncapped


def popart_rescale(
    weight: Tensor,
    bias: Tensor,
    old_mean: float | Tensor,
    old_scale: float | Tensor,
    new_mean: float | Tensor,
    new_scale: float | Tensor,
) -> tuple[Tensor, Tensor]:
    """PopArt "preserving outputs precisely" update (van Hasselt et al. 2016, Alg. 1).

    For an output layer ``n = W h + b`` whose de-normalised value is ``v = n / scale + mean``,
    return ``(W', b')`` with ``W' h + b'`` giving the same ``v`` under the new statistics for every
    ``h``: ``W' = W · s_new / s_old`` and ``b' = (b / s_old + μ_old − μ_new) · s_new``.

    Args:
        weight: ``[O, H]`` output-layer weight.
        bias: ``[O]`` output-layer bias.
        old_mean, new_mean: return means (return units), scalars or ``[O]``.
        old_scale, new_scale: value-target scales (> 0), scalars or ``[O]``.

    Returns:
        New tensors ``(W' [O, H], b' [O])`` in the dtype of ``weight``/``bias`` (computed in
        float64); the inputs are not modified.
    """
    fn = "popart_rescale"
    if weight.dim() != 2 or bias.shape != (weight.shape[0],):
        raise ValueError(
            f"{fn}: weight must be [O, H] and bias [O], got weight={tuple(weight.shape)}, "
            f"bias={tuple(bias.shape)}"
        )
    stats: dict[str, Tensor] = {}
    for name, x in (
        ("old_mean", old_mean),
        ("old_scale", old_scale),
        ("new_mean", new_mean),
        ("new_scale", new_scale),
    ):
        t = torch.as_tensor(x, dtype=torch.float64, device=weight.device)
        if t.shape not in ((), (weight.shape[0],)):
            raise ValueError(
                f"{fn}: {name} must be a scalar or [O]=[{weight.shape[0]}], got {tuple(t.shape)}"
            )
        check_finite(fn, name, t)
        stats[name] = t
    if bool((stats["old_scale"] <= 0).any()) or bool((stats["new_scale"] <= 0).any()):
        raise ValueError(f"{fn}: old_scale and new_scale must be > 0")
    ratio = (stats["new_scale"] / stats["old_scale"]).reshape(-1, 1)  # [1, 1] or [O, 1]
    w = weight.detach().double() * ratio
    b = bias.detach().double() / stats["old_scale"] + stats["old_mean"] - stats["new_mean"]
    b = b * stats["new_scale"]
    return w.to(weight.dtype), b.to(bias.dtype)
