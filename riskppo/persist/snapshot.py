"""What a checkpoint needs of a model, as types of their own, so that the checkpoint module never
imports the façade (:class:`~riskppo.agent.DistributionalPPO`) and never reads its
private attributes.

- :class:`Snapshot`: what is saved; the façade assembles it (``DistributionalPPO.snapshot()``).
- :class:`Restorable`: what a checkpoint is loaded into — the attributes the restore functions
  of :mod:`riskppo.persist.checkpoint` read and write, as a structural type the façade satisfies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from gymnasium import spaces
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv

from riskppo.algo.state import TrainingState
from riskppo.config import Config


@dataclass(frozen=True)
class Snapshot:
    """A model's savable state at one moment (references, not copies: write it out at once).

    ``policy``: the policy's ``state_dict``; ``optimizer`` / ``vgs``: their ``state_dict``s (``vgs``
    ``None`` without the variance gradient scaler); ``obs_rms``: the observation statistics
    (``None`` without ``env.normalize_obs``); ``training``: everything else that changes between
    updates; ``env_is_id``: trained on config ``env.id`` (what ``load`` can rebuild).
    """

    policy: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    vgs: dict[str, Any] | None
    obs_rms: RunningMeanStd | None
    training: TrainingState
    observation_space: spaces.Space
    action_space: spaces.Space
    n_envs: int
    env_is_id: bool
    config: Config


class Restorable(Protocol):
    """A model a checkpoint's state is loaded into (``DistributionalPPO`` is one)."""

    state: TrainingState
    env_is_id: bool
    # observation statistics read from a checkpoint: what evaluation envs of a model without a
    # training env are normalised with
    loaded_obs_rms: RunningMeanStd | None

    @property
    def policy(self) -> torch.nn.Module: ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def vgs(self) -> Any: ...

    @property
    def env(self) -> VecEnv | None: ...

    @property
    def observation_space(self) -> spaces.Space: ...

    @property
    def action_space(self) -> spaces.Space: ...

    @property
    def n_envs(self) -> int: ...

    def close(self) -> None: ...
