"""Gymnasium's natively vectorised CartPole (``CartPoleVectorEnv``, the ``vector_entry_point`` of
``CartPole-v0/v1``) with single-env resets, so riskppo can step it with SB3's semantics.

Gymnasium 1.x's ``CartPoleVectorEnv`` autoresets in ``NEXT_STEP`` mode — an env that ended is
reset by the *next* ``step``, which ignores its action — and its ``reset`` resets every env.
:class:`CartPoleSingleResets` adds what :class:`~riskppo.envs.vec.gym_vector.GymVectorVecEnv` needs
instead: ``reset(options={"reset_mask": m})`` draws new states for the masked envs only, from the
same uniform bounds and generator ``reset`` uses, and clears their pending autoreset, so the
next step steps every env with its action. All envs still step as one array operation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.vector import VectorEnv, VectorWrapper

__all__ = ["CartPoleSingleResets", "with_single_resets"]


class CartPoleSingleResets(VectorWrapper):
    """``CartPoleVectorEnv`` whose ``reset(options={"reset_mask": m})`` resets only the envs
    where ``m`` (``[num_envs]`` bool) is set; every other call is the wrapped env's."""

    def __init__(self, env: VectorEnv) -> None:
        if not isinstance(env.unwrapped, CartPoleVectorEnv):
            raise TypeError(f"not a CartPoleVectorEnv: {type(env.unwrapped).__name__}")
        super().__init__(env)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        mask = None if options is None else options.get("reset_mask")
        if mask is None:
            return self.env.reset(seed=seed, options=options)
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"reset_mask of shape {mask.shape}; expected ({self.num_envs},)")
        if seed is not None:
            raise ValueError("a reset_mask reset takes no seed (seed the full reset)")
        cp: Any = self.env.unwrapped
        if cp.state is None:
            raise RuntimeError("call reset() before resetting single envs")
        k = int(mask.sum())
        cp.state[:, mask] = cp.np_random.uniform(low=cp.low, high=cp.high, size=(4, k))
        cp.steps[mask] = 0
        cp.prev_done[mask] = False  # no pending autoreset: the next step uses their actions
        return cp.state.T.astype(np.float32), {}


def with_single_resets(vec: VectorEnv) -> VectorEnv:
    """``vec`` wrapped in :class:`CartPoleSingleResets` if it is a bare ``CartPoleVectorEnv``
    (single resets are what it lacks), else ``vec`` unchanged."""
    if type(vec) is CartPoleVectorEnv:
        return CartPoleSingleResets(vec)
    return vec
