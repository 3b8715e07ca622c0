"""A non-stationary task for plasticity experiments: CartPole whose semantics change by phase.

:class:`NonStationaryCartPole` is Gymnasium's CartPole (same physics, same +1 per step, pole
angle / cart position termination) with a **phase** index ``k`` that changes what the agent sees
and what its actions do. It is the RL analogue of the permuted-input / flipped-label streams of
the loss-of-plasticity literature: every phase is exactly as hard as plain CartPole (it is the
same MDP up to a relabelling of observations and actions), so a drop of the return reached in
later phases can only come from the learner having lost the ability to adapt.

Phase ``k`` is a fixed transformation ``(perm, signs, invert)``, a pure function of
``(task_seed, k, mode)`` (:func:`phase_transform`), so every copy of the env in a vector env
agrees on it:

* observation: ``obs_k = signs * s[perm]`` where ``s = (x, ẋ, θ, θ̇)`` is the CartPole state
  (``mode`` ``"obs"`` or ``"both"``; identity in ``"action"`` mode);
* action: if ``invert``, action 0 pushes right and 1 pushes left (``mode`` ``"action"`` or
  ``"both"``: inverted in odd phases).

Phase 0 is always plain CartPole (identity permutation, all signs +1, no inversion). For
``k ≥ 1`` the permutation and signs are drawn from ``numpy.random.default_rng([task_seed, k])``
and redrawn while phase ``k`` would be the same task as phase ``k − 1`` — the same transformation,
or its mirror image (every sign flipped *and* the action inversion toggled, which CartPole's
left-right symmetry makes the same task: the previous policy would still be optimal). So a
switch never leaves the previous policy optimal; it may still transfer partly (e.g. a sign flip
of the cart velocity alone matters little to a pole-balancing policy).

The phase is set from outside, typically between ``learn`` calls of a trainer::

    venv.env_method("set_phase", k)

and takes effect **immediately**, also in the middle of an episode (the next observation is
already in the new coding; the physical state is untouched). It is not reset by :meth:`reset`.

Per-episode randomness (the initial state, uniform in ±0.05) comes only from the env's
``np_random``, seeded through ``reset(seed=...)`` as usual. Episodes are truncated after
``max_episode_steps`` steps (the env applies the limit itself, so the class can be passed
directly as an env factory without ``gym.make``). ``info["phase"]`` reports the current phase.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["NonStationaryCartPole", "PhaseMode", "PhaseTransform", "phase_transform"]

PhaseMode = Literal["obs", "action", "both"]
_MODES = ("obs", "action", "both")
_OBS_DIM = 4


class PhaseTransform(NamedTuple):
    """What one phase does: observation permutation and signs, and whether actions are inverted."""

    perm: tuple[int, ...]
    signs: tuple[float, ...]
    invert: bool


@functools.lru_cache(maxsize=4096)
def phase_transform(task_seed: int, phase: int, mode: PhaseMode = "both") -> PhaseTransform:
    """The ``(perm, signs, invert)`` of ``phase`` (see the module docstring)."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    if isinstance(phase, bool) or int(phase) != phase or phase < 0:
        raise ValueError(f"phase must be an int >= 0, got {phase!r}")
    phase = int(phase)
    invert = mode in ("action", "both") and phase % 2 == 1
    identity = (tuple(range(_OBS_DIM)), (1.0,) * _OBS_DIM)
    if phase == 0 or mode == "action":
        return PhaseTransform(*identity, invert)
    prev = phase_transform(task_seed, phase - 1, mode)
    mirrored = tuple(-s for s in prev.signs)
    rng = np.random.default_rng([int(task_seed), phase])
    while True:
        perm = tuple(int(i) for i in rng.permutation(_OBS_DIM))
        signs = tuple(float(s) for s in rng.choice([-1.0, 1.0], size=_OBS_DIM))
        same = perm == prev.perm and (
            (signs == prev.signs and invert == prev.invert)
            or (signs == mirrored and invert != prev.invert)  # CartPole's left-right symmetry
        )
        if not same:
            return PhaseTransform(perm, signs, invert)


class NonStationaryCartPole(CartPoleEnv):
    """CartPole with phase-dependent observation coding and action meaning (module docstring).

    Args:
        phase: initial phase (≥ 0); change it with :meth:`set_phase`.
        mode: ``"obs"`` (permute and sign-flip observations), ``"action"`` (invert the actions
            in odd phases) or ``"both"`` (default).
        task_seed: seed of the sequence of phase transformations (not of the episodes).
        max_episode_steps: truncation limit (CartPole-v1 uses 500).
        render_mode: as CartPole's.
    """

    def __init__(
        self,
        phase: int = 0,
        *,
        mode: PhaseMode = "both",
        task_seed: int = 0,
        max_episode_steps: int = 500,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps!r}")
        self.mode: PhaseMode = mode
        self.task_seed = int(task_seed)
        self.max_episode_steps = int(max_episode_steps)
        # A permutation moves the unbounded velocities onto any coordinate: one common bound.
        high = np.full(_OBS_DIM, np.finfo(np.float32).max, dtype=np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)
        self._elapsed = 0
        self.set_phase(phase)

    @property
    def phase(self) -> int:
        return self._phase

    @property
    def transform(self) -> PhaseTransform:
        """The current phase's ``(perm, signs, invert)``."""
        return self._transform

    def set_phase(self, phase: int) -> None:
        """Switch to ``phase`` now (also mid-episode); validates it."""
        self._transform = phase_transform(self.task_seed, phase, self.mode)
        self._phase = int(phase)
        self._perm = np.asarray(self._transform.perm)
        self._signs = np.asarray(self._transform.signs, dtype=np.float32)

    def _observe(self) -> np.ndarray:
        assert self.state is not None
        state = np.asarray(self.state, dtype=np.float32)
        return (self._signs * state[self._perm]).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed, options=options)
        self._elapsed = 0
        return self._observe(), {"phase": self._phase}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"{action!r} ({type(action)}) is not a valid action")
        physical = 1 - int(action) if self._transform.invert else int(action)
        _, reward, terminated, _, info = super().step(physical)
        self._elapsed += 1
        truncated = not terminated and self._elapsed >= self.max_episode_steps
        return self._observe(), float(reward), terminated, truncated, {**info, "phase": self._phase}
