"""Training: rollout collection, estimation, PPO update, the trainer, checkpoints, monitoring."""

from riskppo.train.checkpoint import CheckpointError
from riskppo.train.trainer import DistributionalPPO

__all__ = ["CheckpointError", "DistributionalPPO"]
