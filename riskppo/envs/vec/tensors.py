"""What a vector env gives and takes, as tensors: observations in, actions out (the rollout
collector and the evaluation episodes both convert this way)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

__all__ = ["env_actions", "obs_tensor"]


def obs_tensor(obs: Any, device: torch.device) -> torch.Tensor:
    """VecEnv observations (Box spaces) → ``[N, D]`` float32 tensor."""
    return torch.as_tensor(np.asarray(obs, dtype=np.float32), device=device).reshape(len(obs), -1)


def env_actions(actions: torch.Tensor, space: spaces.Space[Any]) -> np.ndarray:
    """Policy actions → what the env receives (Box actions clipped to the bounds, like SB3)."""
    a: np.ndarray = actions.cpu().numpy()
    if isinstance(space, spaces.Box):
        return np.asarray(np.clip(a.reshape(len(a), *space.shape), space.low, space.high))
    return a
