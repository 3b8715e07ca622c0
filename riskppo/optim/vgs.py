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

__all__ = ["VarianceGradientScaler", "normalized_variance", "vgs_factor"]

VGSMode = Literal["spatial_mean", "per_element"]
ParamsLike = (
    Iterable[torch.Tensor] | Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor]
)
_MODES = ("spatial_mean", "per_element")


def vgs_factor(ratio: float, *, alpha: float, min_scale: float) -> float:
    """Scale factor f = max(min_scale, 1 / (1 + alpha·r)) ∈ [min_scale, 1], decreasing in r ≥ 0."""
    return max(min_scale, 1.0 / (1.0 + alpha * max(ratio, 0.0)))


def normalized_variance(mean: torch.Tensor, sq_mean: torch.Tensor, eps: float) -> torch.Tensor:
    """r = mean(Var) / (mean(E[x]²) + eps) from bias-corrected E[x] and E[x²] (pure function).

    Var = max(E[x²] − E[x]², 0) element-wise (clamped against round-off). ``mean`` and
    ``sq_mean`` have the same shape — ``[]`` for one statistic, where this is simply
    Var/(E[x]² + eps), or any shape for per-element statistics, where it is a ratio of means over
    the elements. Returns a 0-dim tensor.
    """
    parts = _variance_parts(mean, sq_mean)
    ratio: torch.Tensor = parts[0] / (parts[1] + eps)
    return ratio


def _variance_parts(mean: torch.Tensor, sq_mean: torch.Tensor) -> torch.Tensor:
    """[mean(max(E[x²] − E[x]², 0)), mean(E[x]²)] as a ``[2]`` tensor."""
    var = (sq_mean - mean * mean).clamp_min(0.0)
    return torch.stack([var.mean(), (mean * mean).mean()])


@dataclass
class _TensorStats:
    """Per-tensor EMAs; ``weight`` = Σ (1−β)β^k over accepted updates = 1 − β^t (bias corr.).

    ``spatial_mean`` mode keeps ``mean``/``sq_mean`` as Python floats (exactly float64, no
    kernels); ``per_element`` mode as tensors shaped like the parameter.
    """

    count: int  # number of scale_ calls that saw a gradient (drives warm-up)
    weight: float
    mean: float | torch.Tensor
    sq_mean: float | torch.Tensor


class VarianceGradientScaler:
    r"""Per-tensor gradient damping by the normalised variance of the gradient over updates.

    **What is measured** (``mode="spatial_mean"``, the default): for each parameter tensor, the
    **variance over time (over successive calls) of the tensor's spatial mean gradient**
    m̄_t = mean over the tensor's elements of g_t. Exponential moving averages with decay ``beta``
    of m̄ and m̄² are kept — **O(1) memory per tensor** (three float64 scalars, m̄ itself is
    computed in float64) — bias-corrected by 1 − β^t, and turned into the normalised variance
    r = max(E[m̄²] − E[m̄]², 0) / (E[m̄]² + eps). This is a cheap proxy for
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
    the statistics (nor the bias correction), so one bad batch cannot poison the scaler (R-REL-6
    handles the bad step itself). The warm-up count still advances on such a call.

    Apply it **before** gradient clipping (R-ALG-14), so clipping bounds the final norm. The
    factors of the last call are in :attr:`last_factors` (name → float), to be logged as
    ``train/vgs_scale/<name>``.

    Args:
        params_or_named_params: parameters, ``(name, parameter)`` pairs (e.g.
            ``module.named_parameters()``) or a mapping name → parameter. Unnamed parameters are
            named by their position ``"0"``, ``"1"``, ….
        beta: EMA decay in [0, 1).
        eps: > 0, added to the squared mean in the denominator of r (in gradient² units).
        alpha: ≥ 0, strength; alpha = 0 disables damping. With the default 1, f = ½ when the
            variance equals the squared mean (signal-to-noise ratio 1).
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
        gradient. Costs one host sync per call on an accelerator (two in ``per_element`` mode).
        """
        work = [(n, g) for n in self._select(parameters) if (g := self._params[n].grad) is not None]
        self._last = {}
        if not work:
            return {}
        for _, grad in work:
            if grad.is_sparse:
                raise RuntimeError("VarianceGradientScaler does not support sparse gradients")
        device = work[0][1].device
        # Spatial means in float64; a NaN/Inf element makes its tensor's mean non-finite.
        spatial = torch.stack([g.mean(dtype=torch.float64).to(device) for _, g in work]).tolist()
        ratios: dict[str, float] = {}
        pending: list[tuple[str, torch.Tensor]] = []  # per_element: (name, [Var-mean, m²-mean])
        for (name, grad), m in zip(work, spatial):
            st = self._stats_for(name, grad)
            st.count += 1
            if not math.isfinite(m):  # leave grad and statistics alone (R-REL-6 handles it)
                continue
            ratio = self._accumulate(st, grad, m)
            if st.count <= self.warmup_steps:
                continue
            if isinstance(ratio, torch.Tensor):
                pending.append((name, ratio))
            else:
                ratios[name] = ratio
        if pending:
            stacked = torch.stack([r.to(device=device, dtype=torch.float64) for _, r in pending])
            for (name, _), (var_mean, sq_mean) in zip(pending, stacked.tolist()):
                ratios[name] = var_mean / (sq_mean + self.eps)
        for name, grad in work:
            factor = 1.0
            if name in ratios:
                factor = vgs_factor(ratios[name], alpha=self.alpha, min_scale=self.min_scale)
            if factor != 1.0:
                grad.mul_(factor)
            self._last[name] = factor
        return dict(self._last)

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {name: {"count": int, "weight": T, "mean": T, "sq_mean": T}}}``.

        Tensors (``weight`` float64 ``[]``; ``mean``/``sq_mean`` float64 ``[]`` in
        ``spatial_mean`` mode, parameter-shaped in ``per_element`` mode) and ints only, for
        safetensors + JSON. Hyper-parameters are configuration, not state.
        """
        return {
            "state": {
                name: {
                    "count": st.count,
                    "weight": torch.tensor(st.weight, dtype=torch.float64),
                    "mean": _as_tensor(st.mean),
                    "sq_mean": _as_tensor(st.sq_mean),
                }
                for name, st in self._stats.items()
            }
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; validates names and shapes (i.e. the mode) first."""
        loaded: dict[str, _TensorStats] = {}
        for name, entry in state_dict["state"].items():
            if name not in self._params:
                raise ValueError(f"VGS state for unknown parameter {name!r}; known: {self.names}")
            p = self._params[name]
            shape = torch.Size([]) if self.mode == "spatial_mean" else p.shape
            values: dict[str, torch.Tensor] = {}
            for key in ("weight", "mean", "sq_mean"):
                value = torch.as_tensor(entry[key]).detach()
                want = torch.Size([]) if key == "weight" else shape
                if value.shape != want:
                    raise ValueError(
                        f"VGS state {name!r}.{key} has shape {tuple(value.shape)}, expected "
                        f"{tuple(want)} for mode={self.mode!r}"
                    )
                values[key] = value
            count = entry["count"]
            count = int(count.item() if isinstance(count, torch.Tensor) else count)
            weight = float(values["weight"].double().item())
            if self.mode == "spatial_mean":
                mean: float | torch.Tensor = float(values["mean"].double().item())
                sq_mean: float | torch.Tensor = float(values["sq_mean"].double().item())
            else:
                dtype = _element_dtype(p)
                mean = values["mean"].to(device=p.device, dtype=dtype).clone()
                sq_mean = values["sq_mean"].to(device=p.device, dtype=dtype).clone()
            loaded[name] = _TensorStats(count=count, weight=weight, mean=mean, sq_mean=sq_mean)
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

    def _stats_for(self, name: str, grad: torch.Tensor) -> _TensorStats:
        st = self._stats.get(name)
        if st is None:
            if self.mode == "spatial_mean":
                st = _TensorStats(count=0, weight=0.0, mean=0.0, sq_mean=0.0)
            else:
                zeros = torch.zeros_like(grad, dtype=_element_dtype(grad))
                st = _TensorStats(count=0, weight=0.0, mean=zeros, sq_mean=zeros.clone())
            self._stats[name] = st
        return st

    def _accumulate(self, st: _TensorStats, grad: torch.Tensor, m: float) -> float | torch.Tensor:
        """Fold one finite gradient into the EMAs; return r (spatial: a float) or, per element,
        the 0-dim pair [mean_i Var_i, mean_i E[g_i]²] whose ratio (with eps) is r."""
        b = self.beta
        st.weight = b * st.weight + (1.0 - b)
        if isinstance(st.mean, float) and isinstance(st.sq_mean, float):
            st.mean = b * st.mean + (1.0 - b) * m
            st.sq_mean = b * st.sq_mean + (1.0 - b) * m * m
            e1, e2 = st.mean / st.weight, st.sq_mean / st.weight
            return max(e2 - e1 * e1, 0.0) / (e1 * e1 + self.eps)
        assert isinstance(st.mean, torch.Tensor) and isinstance(st.sq_mean, torch.Tensor)
        x = grad.to(st.mean.dtype)
        st.mean.mul_(b).add_(x, alpha=1.0 - b)
        st.sq_mean.mul_(b).addcmul_(x, x, value=1.0 - b)
        return _variance_parts(st.mean / st.weight, st.sq_mean / st.weight)


def _as_tensor(value: float | torch.Tensor) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return torch.tensor(value, dtype=torch.float64)


def _element_dtype(p: torch.Tensor) -> torch.dtype:
    return torch.promote_types(p.dtype, torch.float32)


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
