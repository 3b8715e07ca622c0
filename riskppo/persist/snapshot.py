"""What a checkpoint holds of a model, as a type of its own, so that the checkpoint module never
imports the façade (:class:`~riskppo.agent.DistributionalPPO`) and never touches its attributes.

Saving and loading are symmetric: the façade assembles a :class:`Snapshot`
(``DistributionalPPO.snapshot()``) and :func:`~riskppo.persist.checkpoint.save_checkpoint`
writes it; :func:`~riskppo.persist.checkpoint.read_snapshot` reads one back and the façade
builds itself from it (``DistributionalPPO.from_snapshot``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.running_mean_std import RunningMeanStd

from riskppo.algo.state import TrainingState
from riskppo.config import Config


@dataclass(frozen=True)
class Snapshot:
    """A model's savable state at one moment (references, not copies: write it out at once).

    ``policy``: the policy's ``state_dict``; ``optimizer`` / ``vgs``: their ``state_dict``s (``vgs``
    ``None`` without the variance gradient scaler); ``obs_rms``: the observation statistics
    (``None`` without ``env.normalize_obs``); ``training``: everything else that changes between
    updates; ``env_is_id``: trained on config ``env.id`` (what ``load`` can rebuild); ``path``:
    the checkpoint directory it was read from (``None`` for a live model's).
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
    path: Path | None = None
