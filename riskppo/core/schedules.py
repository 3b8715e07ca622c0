"""Entropy-coefficient schedule with plateau-delayed decay and collapse boost (R-ALG-10).

Semantics of :func:`entropy_coef_step`, called once per update ``u = 0, 1, 2, …`` with the mean
policy entropy measured at that update; it returns the coefficient to use for the next loss
computation and the next state:

1. **History.** ``mean_entropy`` is appended to the last ``plateau_window`` (W) values.
2. **Plateau gate.** Decay has not started while ``decay_start is None``. It starts at the first
   update ``u`` where the history holds W values and the least-squares slope of entropy against
   update index over those W values satisfies ``|slope| ≤ plateau_tol`` (nats per update).
   ``plateau_window = 0`` disables the gate: decay starts at update 0. With ``decay = "none"``
   decay never starts. Once started it is never undone.
3. **Decay.** With ``k = u − decay_start`` updates since the start (``k = 0`` at the start update,
   and ``k = 0`` while not started), ``D = decay_updates``, ``c0 = ent_coef`` and
   ``cmin = ent_coef_min``:

   * ``"none"``: ``c = c0``.
   * ``"linear"``: ``c = c0 + (cmin − c0) · min(k / D, 1)`` — reaches ``cmin`` after D updates.
   * ``"exponential"``: ``c = c0 · ρ^k`` with ``ρ = (target / c0)^(1/D)``, ``target = cmin`` if
     ``cmin > 0`` (so ``c`` reaches ``cmin`` after exactly D updates and stays there by the
     floor) else ``target = 0.01·c0`` (1% after D updates, decaying on geometrically).

4. **Boost.** If ``boost_threshold`` is set and ``mean_entropy < boost_threshold`` (entropy
   collapse), this update's coefficient is multiplied by ``boost_factor`` (≥ 1). The boost lasts
   only while entropy stays below the threshold; ``state.boosted`` records it.
5. **Floor.** The result is ``max(c, ent_coef_min)`` always.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "EntropyFloorState",
    "EntropyScheduleConfig",
    "EntropyScheduleState",
    "entropy_coef_step",
    "entropy_floor_step",
    "ls_slope",
]

EntropyDecay = Literal["none", "linear", "exponential"]
_DECAYS = ("none", "linear", "exponential")
# Exponential decay target as a fraction of ent_coef when ent_coef_min == 0 (see module doc).
_EXP_TARGET_FRACTION = 0.01


@dataclass(frozen=True)
class EntropyScheduleConfig:
    """Entropy-coefficient schedule settings (R-ALG-10); see the module docstring for semantics.

    Attributes:
        ent_coef: initial coefficient ``c0 ≥ 0``.
        ent_coef_min: floor ``0 ≤ cmin ≤ c0``.
        decay: ``"none" | "linear" | "exponential"``.
        decay_updates: ``D ≥ 1`` updates over which the decay reaches its target.
        plateau_window: ``W`` updates in the slope fit (0 disables the plateau gate, else ≥ 2).
        plateau_tol: ``|slope| ≤ tol`` (nats per update) counts as a plateau.
        boost_threshold: boost when mean entropy is below this (nats); ``None`` disables.
        boost_factor: multiplier ``≥ 1`` applied during a boost.
    """

    ent_coef: float = 0.01
    ent_coef_min: float = 0.0
    decay: EntropyDecay = "none"
    decay_updates: int = 1000
    plateau_window: int = 10
    plateau_tol: float = 1e-3
    boost_threshold: float | None = None
    boost_factor: float = 2.0

    def __post_init__(self) -> None:
        name = "EntropyScheduleConfig"
        if not (math.isfinite(self.ent_coef) and self.ent_coef >= 0.0):
            raise ValueError(f"{name}: ent_coef must be >= 0, got {self.ent_coef}")
        if not (0.0 <= self.ent_coef_min <= self.ent_coef):
            raise ValueError(
                f"{name}: ent_coef_min must lie in [0, ent_coef={self.ent_coef}], "
                f"got {self.ent_coef_min}"
            )
        if self.decay not in _DECAYS:
            raise ValueError(f"{name}: decay must be one of {_DECAYS}, got {self.decay!r}")
        if self.decay_updates < 1:
            raise ValueError(f"{name}: decay_updates must be >= 1, got {self.decay_updates}")
        if self.plateau_window < 0 or self.plateau_window == 1:
            raise ValueError(
                f"{name}: plateau_window must be 0 (no gate) or >= 2, got {self.plateau_window}"
            )
        if not (math.isfinite(self.plateau_tol) and self.plateau_tol >= 0.0):
            raise ValueError(f"{name}: plateau_tol must be >= 0, got {self.plateau_tol}")
        if self.boost_threshold is not None and not math.isfinite(self.boost_threshold):
            raise ValueError(f"{name}: boost_threshold must be finite or None")
        if not (math.isfinite(self.boost_factor) and self.boost_factor >= 1.0):
            raise ValueError(f"{name}: boost_factor must be >= 1, got {self.boost_factor}")


@dataclass(frozen=True)
class EntropyScheduleState:
    """State carried between :func:`entropy_coef_step` calls; start with ``EntropyScheduleState()``.

    Attributes:
        update: index of the next update (number of calls so far).
        decay_start: update index at which the decay started, ``None`` before the plateau.
        history: the last ``plateau_window`` mean entropies (oldest first).
        boosted: whether the last returned coefficient was boosted.
        coef: the last returned coefficient (``nan`` before the first call).
    """

    update: int = 0
    decay_start: int | None = None
    history: tuple[float, ...] = ()
    boosted: bool = False
    coef: float = math.nan


def ls_slope(values: tuple[float, ...]) -> float:
    """Least-squares slope of ``values`` against their index ``0..len−1`` (needs ≥ 2 values)."""
    n = len(values)
    if n < 2:
        raise ValueError(f"ls_slope: need at least 2 values, got {n}")
    x_mean = (n - 1) / 2.0
    y_mean = math.fsum(values) / n
    sxy = math.fsum((i - x_mean) * (y - y_mean) for i, y in enumerate(values))
    sxx = math.fsum((i - x_mean) ** 2 for i in range(n))
    return sxy / sxx


def _decayed(cfg: EntropyScheduleConfig, k: int) -> float:
    """Coefficient ``k ≥ 0`` updates after the decay start (before floor and boost)."""
    c0, cmin, d = cfg.ent_coef, cfg.ent_coef_min, cfg.decay_updates
    if cfg.decay == "none" or c0 == 0.0:
        return c0
    if cfg.decay == "linear":
        return c0 + (cmin - c0) * min(k / d, 1.0)
    target = cmin if cmin > 0.0 else _EXP_TARGET_FRACTION * c0
    return float(c0 * (target / c0) ** (k / d))


def entropy_coef_step(
    cfg: EntropyScheduleConfig, state: EntropyScheduleState, mean_entropy: float
) -> tuple[float, EntropyScheduleState]:
    """One step of the entropy-coefficient schedule (R-ALG-10; semantics in the module docstring).

    Args:
        cfg: schedule settings.
        state: state returned by the previous call (``EntropyScheduleState()`` initially).
        mean_entropy: mean policy entropy of this update (nats per sample).

    Returns:
        ``(coef, new_state)`` with ``coef ≥ cfg.ent_coef_min`` (logged as ``train/ent_coef``).

    Raises:
        ValueError: if ``mean_entropy`` is not finite.
    """
    if not math.isfinite(mean_entropy):
        raise ValueError(f"entropy_coef_step: mean_entropy must be finite, got {mean_entropy}")
    u = state.update
    window = cfg.plateau_window
    history = (*state.history, float(mean_entropy))[-window:] if window else ()
    start = state.decay_start
    # R-ALG-10: the plateau delays the decay start.
    plateau = window == 0 or (len(history) == window and abs(ls_slope(history)) <= cfg.plateau_tol)
    if start is None and cfg.decay != "none" and plateau:
        start = u
    coef = _decayed(cfg, 0 if start is None else u - start)
    boosted = cfg.boost_threshold is not None and mean_entropy < cfg.boost_threshold
    if boosted:
        coef *= cfg.boost_factor
    coef = max(coef, cfg.ent_coef_min)
    new_state = EntropyScheduleState(
        update=u + 1, decay_start=start, history=history, boosted=boosted, coef=coef
    )
    return coef, new_state


@dataclass(frozen=True)
class EntropyFloorState:
    """State of :func:`entropy_floor_step`.

    Attributes:
        log_coef: ``log c`` of the learned floor coefficient.
        below: consecutive updates whose mean entropy was below the target (the floor binds).
    """

    log_coef: float
    below: int = 0


def entropy_floor_step(
    state: EntropyFloorState,
    mean_entropy: float,
    target: float,
    *,
    lr: float,
    coef_min: float,
    coef_max: float,
) -> tuple[float, EntropyFloorState]:
    """One step of the learned entropy floor (R-ALG-10; SAC v2, Haarnoja et al. 2018, §5).

    The coefficient ``c = exp(log c)`` minimises ``c · (H − H̄)`` by gradient descent on its
    log (the log-parametrisation keeps ``c > 0`` and makes steps relative)::

        log c ← clip(log c − lr · (H − H̄), log coef_min, log coef_max)

    so ``c`` grows geometrically while the mean entropy ``H`` is below the target ``H̄`` and
    decays back to ``coef_min`` once it is above. The policy loss adds ``−c·H`` on top of the
    scheduled entropy bonus.

    Args:
        state: previous state.
        mean_entropy: mean policy entropy of this update (nats per sample, finite).
        target: ``H̄`` in nats per sample (finite).
        lr: step size on ``log c`` per nat of entropy gap (``> 0``).
        coef_min, coef_max: bounds ``0 < coef_min ≤ coef_max``.

    Returns:
        ``(c, new_state)``; ``new_state.below`` counts consecutive updates with ``H < H̄``.
    """
    fn = "entropy_floor_step"
    for name, x in (("mean_entropy", mean_entropy), ("target", target), ("lr", lr)):
        if not math.isfinite(x):
            raise ValueError(f"{fn}: {name} must be finite, got {x}")
    if lr <= 0.0 or not 0.0 < coef_min <= coef_max:
        raise ValueError(
            f"{fn}: need lr > 0 and 0 < coef_min <= coef_max, got {lr}, {coef_min}, {coef_max}"
        )
    gap = mean_entropy - target
    log_coef = min(max(state.log_coef - lr * gap, math.log(coef_min)), math.log(coef_max))
    below = state.below + 1 if gap < 0.0 else 0
    return math.exp(log_coef), EntropyFloorState(log_coef, below)
