"""Utility-based Perturbed Gradient Descent (R-OPT-1).

Elsayed & Mahmood, "Addressing Loss of Plasticity and Catastrophic Forgetting in Continual
Learning", ICLR 2024. Both optimizers here are the *first-order, global* variant of the authors'
reference code (``mohmdelsayed/upgd``: ``FirstOrderGlobalUPGD`` and the ``AdaptiveUPGD`` of the
RL experiments); see the class docstrings for every choice and the one deliberate deviation.

Noise is drawn from a :class:`torch.Generator` owned by the optimizer, never from torch's global
generator, so a run is reproducible from its seed and resumes bit-identically from
:meth:`_UtilityGatedOptimizer.state_dict` (the generator state travels as a ``uint8`` tensor).
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.optimizer import Optimizer, ParamsT

__all__ = ["UPGD", "AdaptiveUPGD"]

# Top-level keys that :meth:`state_dict` adds to torch's ``{"state", "param_groups"}``.
GENERATOR_STATE_KEY = "generator_state"
STEP_KEY = "step"


def _check_range(name: str, value: float, low: float, high: float, *, high_open: bool) -> None:
    ok = low <= value < high if high_open else low <= value <= high
    if not (ok and math.isfinite(value)):
        bracket = ")" if high_open else "]"
        raise ValueError(f"{name} must be in [{low}, {high}{bracket}, got {value!r}")


class _UtilityGatedOptimizer(Optimizer):
    """Shared machinery of :class:`UPGD` and :class:`AdaptiveUPGD`.

    Subclasses supply :meth:`_init_extra_state` and :meth:`_direction` (the term that the
    utility gate multiplies, before noise). Everything else — utility traces, the global maximum
    η, the η ≤ 0 guard, noise, weight decay, checkpointable state — lives here.
    """

    def __init__(
        self,
        params: ParamsT,
        defaults: dict[str, Any],
        *,
        generator: torch.Generator | None,
        seed: int | None,
    ) -> None:
        _check_range("lr", defaults["lr"], 0.0, math.inf, high_open=True)
        _check_range("weight_decay", defaults["weight_decay"], 0.0, math.inf, high_open=True)
        _check_range("beta_utility", defaults["beta_utility"], 0.0, 1.0, high_open=True)
        _check_range("sigma", defaults["sigma"], 0.0, math.inf, high_open=True)
        if generator is not None and seed is not None:
            raise ValueError("pass either generator or seed, not both")
        super().__init__(params, defaults)
        if generator is None and seed is None:
            # Derived once from torch's global generator (consumes one draw of it), so a run
            # seeded with torch.manual_seed is reproducible without passing a seed here.
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self._seed: int | None = seed
        # Created lazily on the device of the first parameter (after any ``module.to``).
        self._generator: torch.Generator | None = generator
        self._global_step = 0

    # ----------------------------------------------------------------------------- generator
    def _noise_generator(self) -> torch.Generator:
        if self._generator is None:
            device = self.param_groups[0]["params"][0].device
            gen = torch.Generator(device=device)
            assert self._seed is not None
            gen.manual_seed(self._seed)
            self._generator = gen
        return self._generator

    def _set_generator_state(self, state: torch.Tensor) -> None:
        gen = self._noise_generator()
        state = torch.as_tensor(state).detach().to(device="cpu", dtype=torch.uint8).contiguous()
        if state.numel() == gen.get_state().numel():
            gen.set_state(state)
            return
        # A state from another device type (e.g. CUDA checkpoint loaded on CPU) cannot be set.
        # Stay deterministic: reseed from a digest of the saved state.
        seed = int.from_bytes(hashlib.sha256(state.numpy().tobytes()).digest()[:8], "little")
        warnings.warn(
            f"UPGD noise generator state of {state.numel()} bytes does not fit this "
            f"{gen.device.type} generator ({gen.get_state().numel()} bytes); reseeding "
            "deterministically from it — the noise sequence differs from the saved run.",
            RuntimeWarning,
            stacklevel=3,
        )
        gen.manual_seed(seed >> 1)

    # ----------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """torch's optimizer state plus ``generator_state`` (uint8 tensor) and ``step`` (int).

        Per-parameter state holds tensors and an int ``step``; nothing else, so the whole dict
        can be written with safetensors (tensors) + JSON (ints, param-group floats).
        """
        sd = super().state_dict()
        sd[GENERATOR_STATE_KEY] = self._noise_generator().get_state().clone()
        sd[STEP_KEY] = self._global_step
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`; the two extra keys are optional (plain torch dicts)."""
        sd = dict(state_dict)
        gen_state = sd.pop(GENERATOR_STATE_KEY, None)
        step = sd.pop(STEP_KEY, None)
        super().load_state_dict(sd)
        for st in self.state.values():  # a checkpoint writer may have turned ints into tensors
            if isinstance(st.get("step"), torch.Tensor):
                st["step"] = int(st["step"].item())
        if step is not None:
            self._global_step = int(step.item() if isinstance(step, torch.Tensor) else step)
        if gen_state is not None:
            self._set_generator_state(gen_state)

    # ----------------------------------------------------------------------------- step
    def _init_extra_state(self, p: torch.Tensor, state: dict[str, Any]) -> None:
        """Add subclass-specific per-parameter state (called once per parameter)."""

    def _direction(
        self, group: dict[str, Any], grad: torch.Tensor, state: dict[str, Any]
    ) -> torch.Tensor:
        """The term gated by (1 − ū) before noise is added. Must not modify ``grad``."""
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update; parameters whose ``grad`` is None are skipped (state untouched)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        # Pass 1: update every utility trace, collect per-tensor maxima of the RAW trace.
        active: list[tuple[dict[str, Any], torch.Tensor, torch.Tensor, dict[str, Any]]] = []
        maxima: list[torch.Tensor] = []
        for group in self.param_groups:
            beta_u = group["beta_utility"]
            for p in group["params"]:
                if p.grad is None or p.numel() == 0:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["utility"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    self._init_extra_state(p, state)
                state["step"] += 1
                # u ← β_u·u + (1−β_u)·(−g·θ)   (first-order utility, paper eq. 3 / ref. code)
                state["utility"].mul_(beta_u).addcmul_(grad, p, value=-(1.0 - beta_u))
                maxima.append(state["utility"].amax())
                active.append((group, p, grad, state))
        if not active:
            return loss
        self._global_step += 1
        eta = self._global_max_utility(maxima)

        # Pass 2: gated, perturbed, decayed update.
        eta_on: dict[torch.device, torch.Tensor] = {}
        for group, p, grad, state in active:
            if p.device not in eta_on:
                eta_on[p.device] = eta.to(p.device)
            bias_correction = 1.0 - group["beta_utility"] ** state["step"]
            # gate = 1 − sigmoid(ũ/η) = sigmoid(−u / (bc·η)), with ũ = u/bc.
            gate = torch.sigmoid(state["utility"] / (-bias_correction * eta_on[p.device]))
            direction = self._direction(group, grad, state)
            sigma = group["sigma"]
            if sigma > 0.0:  # σ = 0: no draw at all, the generator does not advance
                direction = self._noise_like(p).mul_(sigma).add_(direction)
            if group["weight_decay"] != 0.0:
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
            # θ ← θ·(1 − lr·λ) − lr·(d + ξ)·(1 − ū)
            p.addcmul_(direction, gate, value=-group["lr"])
        return loss

    def _global_max_utility(self, maxima: list[torch.Tensor]) -> torch.Tensor:
        """η = max over all weights of all groups of the raw trace, guarded (R-OPT-1).

        Returns a float64 0-dim tensor (no host sync). If η ≤ 0 or η is NaN — e.g. at the first
        step when every −g·θ ≤ 0, or when all traces are zero — it returns +∞, which makes
        ũ/η = 0 for every finite ũ and hence ū = sigmoid(0) = 1/2 everywhere: every weight is
        treated as of "neutral" utility and gets half the perturbed step. Without the guard η = 0
        gives 0/0 = NaN and η < 0 would invert the ranking (high utility → unprotected).
        """
        device = maxima[0].device
        if any(m.device != device for m in maxima):
            maxima = [m.to(device) for m in maxima]
        eta = torch.stack(maxima).amax().to(torch.float64)  # stack promotes mixed dtypes
        return torch.where(eta > 0, eta, torch.full_like(eta, math.inf))

    def _noise_like(self, p: torch.Tensor) -> torch.Tensor:
        gen = self._noise_generator()
        noise = torch.randn(p.shape, generator=gen, device=gen.device, dtype=p.dtype)
        return noise if noise.device == p.device else noise.to(p.device)


class UPGD(_UtilityGatedOptimizer):
    r"""Utility-based Perturbed Gradient Descent, first-order global variant (R-OPT-1).

    For each weight θ with gradient g, at its t-th update:

    * utility trace  u ← β_u·u + (1−β_u)·(−g·θ)             (first-order utility, θ before update)
    * bias-corrected ũ = u / (1 − β_u^t)
    * η = max of the **raw (un-corrected) trace u** over all weights of all parameter groups,
      computed in a first pass over every parameter before any weight moves — exactly as the
      reference ``FirstOrderGlobalUPGD`` (``core/optim/weight_upgd/first_order.py``), which takes
      ``avg_utility.max()`` before dividing by the bias correction. Since 1 − β_u^t ≤ 1, ũ/η can
      exceed 1 for the top weight early in training; that is the reference behaviour.
    * ū = sigmoid(ũ / η)
    * θ ← θ·(1 − lr·λ) − lr·(g + ξ)·(1 − ū),   ξ ~ N(0, σ²) i.i.d. per weight and step.

    Both the gradient and the noise are gated by (1 − ū) (the reference's "utility controls
    gradient" variation 2, which the paper calls UPGD; the "non-protecting" variation that gates
    only the noise is not provided). Weight decay is decoupled and multiplicative, and not part of
    the utility. Each parameter keeps its own ``step`` (bias correction), as in the reference;
    parameters with ``grad is None`` are skipped entirely (no trace update, no decay, no draw).

    **Guard η ≤ 0** (the reference divides by it unguarded): if the global maximum is ≤ 0 (or
    NaN), ũ/η is taken as 0, so ū = 1/2 for every weight — see ``_global_max_utility``.

    **Noise**: drawn with ``torch.randn(..., generator=g)`` in parameter order, from a generator
    owned by the optimizer — ``generator`` if given, else one created on the first parameter's
    device and seeded with ``seed`` (or, if None, with a seed drawn once from torch's global
    generator at construction). With σ = 0 (per group) nothing is drawn. ``state_dict()`` adds
    ``generator_state`` (uint8 tensor) and ``step`` (int, number of non-empty steps) so that a
    restored optimizer continues the exact noise sequence.

    Args:
        params: parameters or parameter groups, as for any torch optimizer.
        lr: step size (≥ 0).
        weight_decay: λ, decoupled decay θ ← θ·(1 − lr·λ) (≥ 0).
        beta_utility: β_u ∈ [0, 1), utility-trace decay.
        sigma: σ ≥ 0, standard deviation of the perturbation.
        generator: an explicit noise generator (mutually exclusive with ``seed``).
        seed: seed of the optimizer's own noise generator.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        beta_utility: float = 0.999,
        sigma: float = 0.001,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
    ) -> None:
        defaults = {
            "lr": lr,
            "weight_decay": weight_decay,
            "beta_utility": beta_utility,
            "sigma": sigma,
        }
        super().__init__(params, defaults, generator=generator, seed=seed)

    def _direction(
        self, group: dict[str, Any], grad: torch.Tensor, state: dict[str, Any]
    ) -> torch.Tensor:
        return grad


class AdaptiveUPGD(_UtilityGatedOptimizer):
    r"""UPGD with Adam moments in place of the raw gradient (R-OPT-1).

    Same utility trace, global raw-trace maximum η, η ≤ 0 guard, noise generator, decoupled weight
    decay and per-parameter step as :class:`UPGD`. Additionally, per weight (Adam, Kingma & Ba)::

        m ← β₁·m + (1−β₁)·g,   v ← β₂·v + (1−β₂)·g²,   m̂ = m/(1−β₁^t),   v̂ = v/(1−β₂^t)
        θ ← θ·(1 − lr·λ) − lr·( m̂/(√v̂ + ε) + ξ )·(1 − ū),   ξ ~ N(0, σ²)

    Noise placement follows the reference ``AdaptiveUPGD`` (``core/run/rl/adaupgd.py``, the
    global variant used in the authors' PPO experiments; the layer-wise
    ``weight/upgd/adaptive_first_order.py`` places it the same way): ξ is **added to the Adam
    direction after normalisation** (it is not divided by √v̂ + ε) and both are gated by (1 − ū).
    The moments use the raw gradient (weight decay is decoupled), ε is added to √v̂ (not inside
    the root).

    Deviation: that reference script applies the step with ``alpha=-2.0*lr``; here the step is
    ``lr`` as in the formula above (use twice the learning rate to reproduce it exactly).

    Args:
        params, lr, weight_decay, beta_utility, sigma, generator, seed: as :class:`UPGD`.
        betas: (β₁, β₂), each in [0, 1).
        eps: ε ≥ 0 added to √v̂.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        beta_utility: float = 0.999,
        sigma: float = 0.001,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
    ) -> None:
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        _check_range("betas[0]", betas[0], 0.0, 1.0, high_open=True)
        _check_range("betas[1]", betas[1], 0.0, 1.0, high_open=True)
        _check_range("eps", eps, 0.0, math.inf, high_open=True)
        defaults = {
            "lr": lr,
            "weight_decay": weight_decay,
            "beta_utility": beta_utility,
            "sigma": sigma,
            "betas": tuple(betas),
            "eps": eps,
        }
        super().__init__(params, defaults, generator=generator, seed=seed)

    def _init_extra_state(self, p: torch.Tensor, state: dict[str, Any]) -> None:
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)

    def _direction(
        self, group: dict[str, Any], grad: torch.Tensor, state: dict[str, Any]
    ) -> torch.Tensor:
        beta1, beta2 = group["betas"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        t: int = state["step"]
        denom = (exp_avg_sq / (1.0 - beta2**t)).sqrt_().add_(group["eps"])
        direction: torch.Tensor = (exp_avg / (1.0 - beta1**t)).div_(denom)
        return direction
