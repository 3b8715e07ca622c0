"""How :class:`~riskppo.agent.DistributionalPPO` builds itself from a
:class:`~riskppo.persist.snapshot.Snapshot` (``from_snapshot``, ``load``) and takes a
population member's weights and statistics (``adopt``).

Saving and loading are symmetric: :mod:`riskppo.persist.checkpoint` writes a snapshot and reads
one back, and never touches a model; the façade restores its own attributes from what these
helpers return.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import gymnasium as gym
import torch
from gymnasium import spaces
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv

from riskppo.agent.sb3_compat import checkpoint_dir
from riskppo.algo.state import TrainingState
from riskppo.config import Config
from riskppo.envs.registration import env_spec
from riskppo.envs.vec.build import EnvSpec, find_normalizer
from riskppo.nn.policy import RecurrentActorCritic
from riskppo.persist.checkpoint import read_snapshot, remove_leftovers, save_checkpoint
from riskppo.persist.codec import encode
from riskppo.persist.files import CheckpointError
from riskppo.persist.snapshot import Snapshot

log = logging.getLogger("riskppo")


class _Built(Protocol):
    """What the helpers read of a model just built (a ``DistributionalPPO``)."""

    @property
    def observation_space(self) -> spaces.Space: ...

    @property
    def action_space(self) -> spaces.Space: ...

    @property
    def n_envs(self) -> int: ...

    def close(self) -> None: ...


M = TypeVar("M", bound=_Built)


def built_for(make: Callable[[Any], M], snap: Snapshot, env: Any, rebuild_env: bool) -> M:
    """The model ``make(env)`` builds for ``snap`` (``make``: the façade's constructor with the
    snapshot's config, spaces and the caller's overrides).

    Without ``env``, and with ``rebuild_env``, the env is rebuilt from the snapshot's config
    when the model was trained on a registered env id (:func:`with_rebuilt_env`); otherwise the
    model is for ``predict`` only. A given ``env`` must have the snapshot's spaces.
    """
    if env is None and rebuild_env:
        return with_rebuilt_env(make, snap)
    model = make(env)
    if env is not None and not spaces_match(model, snap):
        raise CheckpointError(
            f"{snap.path}: env spaces {model.observation_space}/{model.action_space} do not "
            f"match the checkpoint's {snap.observation_space}/{snap.action_space}"
        )
    return model


def spaces_match(model: _Built, snap: Snapshot) -> bool:
    """Whether the model's env has the snapshot's observation shape and action space type."""
    same_obs = model.observation_space.shape == snap.observation_space.shape
    return same_obs and type(model.action_space) is type(snap.action_space)


def with_rebuilt_env(make: Callable[[Any], M], snap: Snapshot) -> M:
    """A model whose env is rebuilt from the snapshot's config (``env.id``, ``env.n_envs``,
    ``seed``, ``data``, ...), announced with one log line, so that ``load(path).learn(n,
    reset_num_timesteps=False)`` continues training.

    Only for a model that was trained on an env id (not on a factory or a VecEnv) that is
    registered in this process; otherwise, or if the env cannot be made (e.g. a data file that
    is gone) or its spaces differ from the snapshot's, the model is for ``predict`` only and
    the log line says why.
    """
    cfg = snap.config
    env_id = cfg.env.id
    if not snap.env_is_id:
        return make(None)
    why = None
    try:
        env_spec(env_id)  # a 'module:Name' id imports its module here
    except (gym.error.Error, ImportError) as exc:
        why = f"it is not registered in this process ({exc}; import the module that registers it)"
    else:
        try:
            model = make(env_id)
        except (OSError, ValueError, ImportError, gym.error.Error) as exc:
            why = f"making it failed: {exc}"
        else:
            if spaces_match(model, snap):
                log.warning(
                    "%s: no env= given; rebuilt %r (n_envs=%d, seed=%d) from the checkpoint's "
                    "config, so the model can continue training",
                    snap.path,
                    env_id,
                    model.n_envs,
                    cfg.seed,
                )
                return model
            why = f"its spaces {model.observation_space}/{model.action_space} differ from the "
            why += f"checkpoint's {snap.observation_space}/{snap.action_space}"
            model.close()
    log.warning(
        "%s: no env= given and env %r was not rebuilt: %s; loaded for predict only, pass env= "
        "to train",
        snap.path,
        env_id,
        why,
    )
    return make(None)


def load_weights(policy: torch.nn.Module, snap: Snapshot) -> None:
    """The snapshot's policy parameters into ``policy`` (``CheckpointError`` if they do not
    fit)."""
    try:
        policy.load_state_dict(snap.policy, strict=True)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(f"{snap.path}: state does not fit the model: {exc}") from None


def load_optimizer(optimizer: torch.optim.Optimizer, vgs: Any, snap: Snapshot) -> None:
    """The snapshot's optimizer (and VGS) state, learning rates included, as saved."""
    try:
        optimizer.load_state_dict(snap.optimizer)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(f"{snap.path}: state does not fit the model: {exc}") from None
    if vgs is not None and snap.vgs is not None:
        vgs.load_state_dict(snap.vgs)


def obs_statistics(snap: Snapshot) -> RunningMeanStd | None:
    """A copy of the snapshot's observation statistics (``None``: it has none)."""
    return snap.obs_rms.copy() if snap.obs_rms is not None else None


def adopted_state(own: TrainingState, snap: Snapshot) -> TrainingState:
    """``own`` with what must follow copied weights: the snapshot's return statistics and
    reward moments, its constraint's state (where it has the same kind and shapes) and its
    step/update counters; ``own`` random generators, entropy schedule and episode statistics
    are kept."""
    src = snap.training
    risk = own.risk
    if risk is not None and src.risk is not None and _same_layout(src.risk, risk):
        risk = src.risk
    return own.with_counters(
        num_timesteps=src.counters.num_timesteps, n_updates=src.counters.n_updates
    ).replace(scaling=src.scaling, rewards=src.rewards, risk=risk)


def _same_layout(a: Any, b: Any) -> bool:
    """Whether two constraint states have one kind and the same tensor shapes (e.g. envs)."""
    if type(a) is not type(b):
        return False
    (_, ta), (_, tb) = encode(a), encode(b)
    return ta.keys() == tb.keys() and all(ta[k].shape == tb[k].shape for k in ta)


def owned(snap: Snapshot) -> Snapshot:
    """``snap`` with state of its own: a live model's snapshot (no ``path``) shares its
    optimizer, scaler and training state objects (generators included) with that model, so a
    model built from it gets copies; a snapshot read from disk is already its own."""
    if snap.path is not None:
        return snap
    return dataclasses.replace(
        snap,
        optimizer=copy.deepcopy(snap.optimizer),
        vgs=copy.deepcopy(snap.vgs),
        training=copy.deepcopy(snap.training),
    )


P = TypeVar("P", bound="Persistent")


class Persistent:
    """The façade's saving and loading (a base of :class:`~riskppo.agent.DistributionalPPO`):
    a :class:`Snapshot` out (:meth:`snapshot`, :meth:`save`), a snapshot in, a model out
    (:meth:`from_snapshot`, :meth:`load`), and another model's weights and statistics taken in
    place (:meth:`adopt`)."""

    # what the façade sets in its constructor
    config: Config
    policy: RecurrentActorCritic
    optimizer: torch.optim.Optimizer
    vgs: Any
    env: VecEnv | None
    state: TrainingState
    observation_space: spaces.Space
    action_space: spaces.Space
    n_envs: int
    env_is_id: bool
    loaded_obs_rms: RunningMeanStd | None
    loaded_from: Path | None

    def obs_statistics(self) -> RunningMeanStd | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint directory (safetensors + JSON, never pickle; design §1.4); an
        SB3-style ``x.zip`` writes the directory ``x``. Returns the directory."""
        return save_checkpoint(self.snapshot(), checkpoint_dir(path))

    def snapshot(self) -> Snapshot:
        """What a checkpoint holds of this model, now (references to live state: write it out
        before training on)."""
        return Snapshot(
            policy=self.policy.state_dict(),
            optimizer=self.optimizer.state_dict(),
            vgs=self.vgs.state_dict() if self.vgs else None,
            obs_rms=self.obs_statistics(),
            training=self.state,
            observation_space=self.observation_space,
            action_space=self.action_space,
            n_envs=self.n_envs,
            env_is_id=self.env_is_id,
            config=self.config,
        )

    @classmethod
    def load(
        cls: type[P],
        path: str | Path,
        env: EnvSpec | None = None,
        *,
        rebuild_env: bool = True,
        **overrides: Any,
    ) -> P:
        """Load a checkpoint directory; ``env`` is optional for ``predict``.

        Without ``env``, a model that was trained on a registered env id gets that env rebuilt
        from the checkpoint's config (``env.*``, ``seed``, ``data``; one log line says so), so
        ``load(path).learn(n, reset_num_timesteps=False)`` continues training — with
        ``checkpoint.every_updates`` set and a checkpoint saved at such a boundary, exactly as
        if it had never stopped. ``rebuild_env=False`` skips that (predict only, nothing built).
        ``overrides`` are constructor keywords (e.g. ``run_dir``). The checkpoint is read by
        :func:`~riskppo.persist.checkpoint.read_snapshot`, the model built by
        :meth:`from_snapshot`.
        """
        path = Path(path)
        if not path.exists():  # SB3's "x.zip" names riskppo's directory "x"
            path = checkpoint_dir(path)
        remove_leftovers(path.parent)
        return cls.from_snapshot(read_snapshot(path), env, rebuild_env=rebuild_env, **overrides)

    @classmethod
    def from_snapshot(
        cls: type[P],
        snapshot: Snapshot,
        env: EnvSpec | None = None,
        *,
        rebuild_env: bool = True,
        **overrides: Any,
    ) -> P:
        """The model a :class:`~riskppo.persist.snapshot.Snapshot` holds (the inverse of
        :meth:`snapshot`): built with its config and spaces, then given its weights, optimizer,
        observation statistics and training state. ``env``, ``rebuild_env`` and ``overrides``:
        as in :meth:`load`. A live model's snapshot is copied first (the two models share
        nothing). ``CheckpointError`` when the state does not fit the model.
        """
        snap = owned(snapshot)
        spaces_ = (snap.observation_space, snap.action_space)

        build = cast(Callable[..., P], cls)  # the façade's constructor

        def make(e: EnvSpec | None) -> P:
            return build(e, config=snap.config, _spaces=spaces_, **overrides)

        model = built_for(make, snap, env, rebuild_env)
        try:
            model._restore(snap, own_env=env is not None)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
            model.close()
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(f"{snap.path}: state does not fit the model: {exc}") from None
        return model

    def _restore(self, snap: Snapshot, own_env: bool) -> None:
        """Everything of ``snap`` into this model, built for it (``own_env``: the caller gave the
        env, which keeps saying what it is)."""
        if not own_env:
            self.env_is_id = snap.env_is_id
        load_weights(self.policy, snap)
        load_optimizer(self.optimizer, self.vgs, snap)
        self._adopt_obs_statistics(snap)
        self.state = snap.training
        self.loaded_from = snap.path

    def adopt(self, snapshot: Snapshot, *, optimizer: bool = False) -> None:
        """Continue from another model's weights with the statistics they were trained under
        (PBT exploit, a walk-forward warm start): observation statistics, return scaling, the
        constraint's state (where it has the same kind and shapes) and the step/update
        counters; ``optimizer=True`` also takes its optimizer moments. This model keeps its
        config, random generators, entropy schedule and episode statistics.
        ``CheckpointError`` if the weights do not fit."""
        snapshot = owned(snapshot)
        load_weights(self.policy, snapshot)
        self._adopt_obs_statistics(snapshot)
        self.state = adopted_state(self.state, snapshot)
        if optimizer:
            load_optimizer(self.optimizer, self.vgs, snapshot)

    def _adopt_obs_statistics(self, snap: Snapshot) -> None:
        """``snap``'s observation statistics: into the training env's normaliser (if any), and
        kept for the evaluation envs of a model without one."""
        rms = obs_statistics(snap)
        if rms is None:
            return
        vn = find_normalizer(self.env) if self.env is not None else None
        if vn is not None:
            vn.obs_rms = cast(Any, rms)
        self.loaded_obs_rms = rms
