"""Variance Gradient Scaler (R-OPT-2).

Damps the gradient of parameter tensors whose gradient is noisy over time. It is not an
optimizer: call it between ``loss.backward()`` and gradient clipping (R-ALG-14)::

    loss.backward()
    factors = vgs.scale_()                     # scales p.grad in place
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()

Because every factor is ≤ 1 and clipping comes after, the final gradient norm is still bounded
by ``max_grad_norm``: the scaler can never bypass clipping.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

__all__ = ["VarianceGradientScaler", "vgs_factor"]

VGSMode = Literal["spatial_mean", "per_element"]
ParamsLike = (
    Iterable[torch.Tensor] | Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor]
)
_MODES = ("spatial_mean", "per_element")


def vgs_factor(
    mean: torch.Tensor,
    sq_mean: torch.Tensor,
    *,
    alpha: float,
    eps: float,
    min_scale: float,
) -> torch.Tensor:
    """Scale factor from bias-corrected first and second moments (pure function).

    ``mean`` = E[x], ``sq_mean`` = E[x²] (same shape: ``[]`` for one statistic, or any shape for
    per-element statistics). With Var = max(E[x²] − E[x]², 0) (clamped against round-off)::

        r = mean(Var) / (mean(E[x]²) + eps)          # a ratio of means over the elements
        factor = max(min_scale, 1 / (1 + alpha·r))   # in [min_scale, 1], decreasing in r

    For a single statistic (shape ``[]``) this is r = Var/(E[x]² + eps). Returns a 0-dim tensor
    of ``mean``'s dtype. NaN inputs give NaN (callers guard non-finite gradients).
    """
    var = (sq_mean - mean * mean).clamp_min(0.0)
    ratio = var.mean() / ((mean * mean).mean() + eps)
    return (1.0 / (1.0 + alpha * ratio)).clamp(min=min_scale, max=1.0)


@dataclass
class _TensorStats:
    """Per-tensor EMAs; ``weight`` = Σ (1−β)β^k over accepted updates = 1 − β^t (bias corr.)."""

    count: int  # number of scale_ calls that saw a gradient (drives warm-up)
    weight: torch.Tensor  # float64 []
    mean: torch.Tensor  # EMA of x: [] (spatial_mean) or p.shape (per_element)
    sq_mean: torch.Tensor  # EMA of x², same shape as mean


class VarianceGradientScaler:
    r"""Per-tensor gradient damping by the normalised variance of the gradient over updates.

    **What is measured** (``mode="spatial_mean"``, the default): for each parameter tensor, the
    **variance over time (over successive calls) of the tensor's spatial mean gradient**
    m̄_t = mean over the tensor's elements of g_t. Exponential moving averages with decay ``beta``
    of m̄ and m̄² are kept — **O(1) memory per tensor** (two float64 scalars) — bias-corrected by
    1 − β^t, and turned into r = (E[m̄²] − E[m̄]²) / (E[m̄]² + eps). This is a cheap proxy for
    gradient noise, and it is blind to noise that **cancels in the mean**: anti-correlated noise
    inside a tensor (e.g. g = [+x, −x] with random x) leaves m̄ constant, so r = 0 and the tensor
    is not damped at all, however noisy its individual elements are.

    ``mode="per_element"`` instead keeps EMAs of g and g² **per element** (O(#params) memory,
    two tensors the size of the parameter) and uses r = mean_i Var_i / (mean_i E[g_i]² + eps),
    where Var_i = E[g_i²] − E[g_i]² is the temporal variance of element i: the tensor's total
    temporal gradient variance relative to its total squared mean gradient (noise-to-signal energy
    ratio). It catches within-tensor anti-correlated noise. A ratio of means is used rather than
    the mean of per-element ratios Var_i/(E[g_i]² + eps), which a few elements with near-zero mean
    gradient would dominate. For a one-element tensor both modes coincide.

    **Factor**: f = max(min_scale, 1 / (1 + alpha·r)) ∈ [min_scale, 1]; ``p.grad`` is multiplied
    by f in place. During **warm-up** — the first ``warmup_steps`` calls that see a gradient for
    that tensor — f = 1 (statistics still accumulate). A tensor whose gradient is ``None`` is
    skipped; one whose gradient contains NaN/Inf is left untouched (f = 1) and does **not** enter
    the statistics (no host sync is needed for this guard), so one bad batch cannot poison the
    scaler (R-REL-6 handles the bad step itself).

    Apply it **before** gradient clipping (R-ALG-14), so clipping bounds the final norm. The
    factors of the last call are in :attr:`last_factors` (name → float), to be logged as
    ``train/vgs_scale/<name>``.

    Args:
        params_or_named_params: parameters, ``(name, parameter)`` pairs (e.g.
            ``module.named_parameters()``) or a mapping name → parameter. Unnamed parameters are
            named by their position ``"0"``, ``"1"``, ….
        beta: EMA decay in [0, 1).
        eps: > 0, added to the squared mean in the denominator of r (in gradient² units).
        alpha: ≥ 0, strength; alpha = 0 disables damping.
        warmup_steps: ≥ 0 calls with factor 1.
        min_scale: floor of the factor, in (0, 1].
        mode: ``"spatial_mean"`` or ``"per_element"``.
    """

    def __init__(
        self,
        params_or_named_params: ParamsLike,
        *,
        beta: float = 0.99,
        eps: float = 1e-8,
        alpha: float = 1.0,
        warmup_steps: int = 100,
        min_scale: float = 0.1,
        mode: VGSMode = "spatial_mean",
    ) -> None:
        if not (0.0 <= beta < 1.0):
            raise ValueError(f"beta must be in [0, 1), got {beta!r}")
        if not (eps > 0.0 and math.isfinite(eps)):
            raise ValueError(f"eps must be > 0, got {eps!r}")
        if not (alpha >= 0.0 and math.isfinite(alpha)):
            raise ValueError(f"alpha must be >= 0, got {alpha!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
        if not (0.0 < min_scale <= 1.0):
            raise ValueError(f"min_scale must be in (0, 1], got {min_scale!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        self.beta = float(beta)
        self.eps = float(eps)
        self.alpha = float(alpha)
        self.warmup_steps = warmup_steps
        self.min_scale = float(min_scale)
        self.mode: VGSMode = mode
        self._params = _named(params_or_named_params)
        self._name_of = {id(p): name for name, p in self._params.items()}
        self._stats: dict[str, _TensorStats] = {}
        self._last: dict[str, float] = {}

    # --------------------------------------------------------------------------------- API
    @property
    def names(self) -> list[str]:
        """Names of the tracked tensors, in registration order."""
        return list(self._params)

    @property
    def last_factors(self) -> dict[str, float]:
        """Factors applied by the last call (name → float), for ``train/vgs_scale/<name>``."""
        return dict(self._last)

    def step(self) -> dict[str, float]:
        """Alias of :meth:`scale_` over all tracked parameters."""
        return self.scale_()

    @torch.no_grad()
    def scale_(
        self,
        parameters: Iterable[torch.Tensor] | Iterable[tuple[str, torch.Tensor]] | None = None,
    ) -> dict[str, float]:
        """Update the statistics and scale ``p.grad`` in place; returns name → factor.

        ``parameters`` restricts the call to a subset of the tracked tensors (plain or named,
        matched by identity); None means all. Raises ``ValueError`` for an untracked tensor.
        Returns (and stores in :attr:`last_factors`) the factor of every tensor that had a
        gradient; converting them to floats is one host sync per tensor on an accelerator.
        """
        factors: dict[str, torch.Tensor | float] = {}
        for name in self._select(parameters):
            grad = self._params[name].grad
            if grad is None:
                continue
            if grad.is_sparse:
                raise RuntimeError("VarianceGradientScaler does not support sparse gradients")
            factor = self._update(name, grad)
            if factor is not None:
                grad.mul_(factor)
            factors[name] = 1.0 if factor is None else factor
        self._last = {name: float(f) for name, f in factors.items()}
        return dict(self._last)

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {name: {"count": int, "weight": T, "mean": T, "sq_mean": T}}}``.

        Tensors and ints only (safetensors + JSON). Hyper-parameters are configuration, not state.
        """
        return {
            "state": {
                name: {
                    "count": st.count,
                    "weight": st.weight.clone(),
                    "mean": st.mean.clone(),
                    "sq_mean": st.sq_mean.clone(),
                }
                for name, st in self._stats.items()
            }
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; validates names, shapes (i.e. the mode) before changing."""
        loaded: dict[str, _TensorStats] = {}
        for name, entry in state_dict["state"].items():
            if name not in self._params:
                raise ValueError(f"VGS state for unknown parameter {name!r}; known: {self.names}")
            p = self._params[name]
            shape = torch.Size([]) if self.mode == "spatial_mean" else p.shape
            dtype = self._stat_dtype(p)
            tensors = {}
            for key in ("weight", "mean", "sq_mean"):
                value = torch.as_tensor(entry[key])
                want = torch.Size([]) if key == "weight" else shape
                if value.shape != want:
                    raise ValueError(
                        f"VGS state {name!r}.{key} has shape {tuple(value.shape)}, expected "
                        f"{tuple(want)} for mode={self.mode!r}"
                    )
                want_dtype = torch.float64 if key == "weight" else dtype
                tensors[key] = value.detach().to(device=p.device, dtype=want_dtype).clone()
            count = entry["count"]
            count = int(count.item() if isinstance(count, torch.Tensor) else count)
            loaded[name] = _TensorStats(count=count, **tensors)
        self._stats = loaded
        self._last = {}

    # ----------------------------------------------------------------------------- internals
    def _select(
        self, parameters: Iterable[torch.Tensor] | Iterable[tuple[str, torch.Tensor]] | None
    ) -> list[str]:
        if parameters is None:
            return list(self._params)
        names = []
        for item in parameters:
            p = item[1] if isinstance(item, tuple) else item
            name = self._name_of.get(id(p))
            if name is None or self._params[name] is not p:
                raise ValueError(
                    "scale_ got a parameter this VarianceGradientScaler does not track"
                )
            names.append(name)
        return names

    def _stat_dtype(self, p: torch.Tensor) -> torch.dtype:
        if self.mode == "spatial_mean":
            return torch.float64
        return torch.promote_types(p.dtype, torch.float32)

    def _update(self, name: str, grad: torch.Tensor) -> torch.Tensor | None:
        """Fold ``grad`` into the EMAs; return the factor, or None during warm-up."""
        st = self._stats.get(name)
        if st is None:
            shape = torch.Size([]) if self.mode == "spatial_mean" else grad.shape
            dtype = self._stat_dtype(grad)
            zeros = torch.zeros(shape, dtype=dtype, device=grad.device)
            st = _TensorStats(
                count=0,
                weight=torch.zeros((), dtype=torch.float64, device=grad.device),
                mean=zeros,
                sq_mean=zeros.clone(),
            )
            self._stats[name] = st
        st.count += 1
        spatial = grad.mean(dtype=torch.float64)
        # Any NaN/Inf element makes the float64 mean non-finite: skip this update (no sync).
        valid = torch.isfinite(spatial)
        x = spatial if self.mode == "spatial_mean" else grad.to(st.mean.dtype)
        b = self.beta
        st.mean.copy_(torch.where(valid, st.mean * b + x * (1.0 - b), st.mean))
        st.sq_mean.copy_(torch.where(valid, st.sq_mean * b + x * x * (1.0 - b), st.sq_mean))
        st.weight.copy_(torch.where(valid, st.weight * b + (1.0 - b), st.weight))
        if st.count <= self.warmup_steps:
            return None
        w = st.weight.clamp_min(torch.finfo(torch.float64).tiny).to(st.mean.dtype)
        factor = vgs_factor(
            st.mean / w, st.sq_mean / w, alpha=self.alpha, eps=self.eps, min_scale=self.min_scale
        )
        return torch.where(valid & (st.weight > 0), factor, torch.ones_like(factor))


def _named(params: ParamsLike) -> dict[str, torch.Tensor]:
    items: list[Any] = list(params.items()) if isinstance(params, Mapping) else list(params)
    if not items:
        raise ValueError("VarianceGradientScaler got an empty parameter list")
    named: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for i, item in enumerate(items):
        if isinstance(item, tuple):
            name, p = item
            name = str(name)
        elif isinstance(item, torch.Tensor):
            name, p = str(i), item
        else:
            raise TypeError(
                f"expected tensors or (name, tensor) pairs, got {type(item).__name__} at {i}"
            )
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parameter {name!r} is not a tensor")
        if name in named:
            raise ValueError(f"duplicate parameter name {name!r}")
        if id(p) in seen:
            raise ValueError(f"parameter {name!r} is listed twice")
        seen.add(id(p))
        named[name] = p
    return named
