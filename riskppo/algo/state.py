"""The training state: everything that changes from one update to the next, besides the weights
and the optimizer (PureJaxRL's runner state is the model).

One :class:`TrainingState` is passed through collect → estimate → update → log → checkpoint and
returned (:func:`riskppo.algo.loop.train_iteration`); checkpoints serialise it as a whole
(:mod:`riskppo.persist.codec`), so nothing can be left out by a hand-kept list. Only the recurrent
carry is transient: it holds live env observations, and a run is reset from ``seed + n_updates``
at every checkpoint boundary (R-REL-4).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field

import torch

from riskppo import core
from riskppo.algo.collect import CollectorState, EpisodeStats
from riskppo.algo.constraints import ConstraintState, constraint_for
from riskppo.algo.returns import ReturnScaling, RewardMoments, check_scaling, initial_scaling
from riskppo.algo.settings import ENT_FLOOR_COEF_MIN
from riskppo.config import Config

__all__ = [
    "Counters",
    "EntropyControl",
    "EpisodeWindow",
    "Rngs",
    "TrainingState",
    "check_invariants",
    "initial_training_state",
]

_NONNEG = {"min": 0}


@dataclass(frozen=True)
class Counters:
    """Progress counters."""

    num_timesteps: int = field(default=0, metadata=_NONNEG)  # env steps so far (all envs)
    n_updates: int = field(default=0, metadata=_NONNEG)
    # the step count the linear learning-rate schedule runs to (set by ``learn``)
    schedule_total: int = field(default=1, metadata={"min": 1})
    # non-finite minibatches skipped in a row, carried across updates (R-ALG-9, R-REL-6)
    nonfinite_skips: int = field(default=0, metadata=_NONNEG)


@dataclass(frozen=True)
class EntropyControl:
    """The entropy bonus: scheduled coefficient (R-ALG-10) and learned floor."""

    coef: float = field(metadata=_NONNEG)
    schedule: core.EntropyScheduleState
    floor: core.EntropyFloorState


@dataclass(frozen=True)
class Rngs:
    """Action sampling and minibatch shuffling generators (seeded from ``seed + 1``/``+ 2``)."""

    sample: torch.Generator
    shuffle: torch.Generator


@dataclass(frozen=True)
class EpisodeWindow:
    """Returns and lengths of the last 100 finished training episodes (for logging)."""

    returns: deque[float]
    lengths: deque[int]

    def extend(self, episodes: EpisodeStats) -> EpisodeWindow:
        returns, lengths = deque(self.returns, 100), deque(self.lengths, 100)
        returns.extend(episodes.returns)
        lengths.extend(episodes.lengths)
        return EpisodeWindow(returns, lengths)


@dataclass(frozen=True)
class TrainingState:
    """See the module docstring. Replaced, never mutated, by the loop's stages."""

    counters: Counters
    scaling: ReturnScaling  # return statistics and the critics' normalisation (R-ALG-8)
    # the constraint's own state (λ, its controller, open segments; riskppo.algo.constraints)
    risk: ConstraintState | None
    entropy: EntropyControl
    rng: Rngs
    episodes: EpisodeWindow
    # the rewards' moments the Sharpe utility remembers (a checkpoint written before them
    # resumes with none yet)
    rewards: RewardMoments = field(default=RewardMoments(), metadata={"since": "0.1.0"})
    carry: CollectorState | None = field(
        default=None,
        metadata={"transient": "live env state; runs reset at checkpoint boundaries (R-REL-4)"},
    )

    def replace(self, **changes: object) -> TrainingState:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_counters(self, **changes: int) -> TrainingState:
        return self.replace(counters=dataclasses.replace(self.counters, **changes))


def initial_training_state(cfg: Config, n_envs: int) -> TrainingState:
    """The state of a fresh model (also the template a checkpoint is decoded on)."""
    constraint = constraint_for(cfg)
    return TrainingState(
        counters=Counters(),
        scaling=initial_scaling(cfg),
        risk=constraint.initial_state(n_envs) if constraint is not None else None,
        entropy=EntropyControl(
            coef=cfg.ppo.ent_coef,
            schedule=core.EntropyScheduleState(),
            floor=core.EntropyFloorState(math.log(ENT_FLOOR_COEF_MIN)),
        ),
        rng=Rngs(
            torch.Generator().manual_seed(cfg.seed + 1),
            torch.Generator().manual_seed(cfg.seed + 2),
        ),
        episodes=EpisodeWindow(deque(maxlen=100), deque(maxlen=100)),
    )


def check_invariants(state: TrainingState) -> None:
    """What types cannot say (a decoded checkpoint, R-REL-3): variances, counts and scales of the
    return statistics, finite reward moments, and the constraint's own
    (:meth:`ConstraintState.check`: λ ≥ 0, segment lengths ≥ 0, …). ``ValueError`` naming the
    field."""
    check_scaling("scaling", state.scaling)
    if not (math.isfinite(state.rewards.mean) and math.isfinite(state.rewards.mean_square)):
        raise ValueError("rewards: the moments must be finite")
    if state.risk is not None:
        state.risk.check()
