"""Time-major rollout storage and the sequence/chunk minibatch sampler (R-ALG-15).

A rollout is ``[T, N, ...]`` (steps × envs). For training it is cut into chunks of ``L`` steps
(``L = bptt_len`` or ``T`` for whole env sequences): chunk ``j`` of env ``i`` becomes column
``j * N + i`` of a ``[L, n_chunks * N, ...]`` view, with the recurrent state that entered step
``j * L`` of env ``i`` as its initial state. Minibatches are sets of whole columns — no padding,
no Python loop over sequences.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from riskppo.core.chunks import to_chunks
from riskppo.nn.policy import RecurrentState
from riskppo.nn.recurrent import LSTMState


@dataclass
class Rollout:
    """What one rollout collected (raw units), time-major ``[T, N, ...]``."""

    obs: Tensor  # [T, N, D] float32 (as fed to the policy, i.e. after obs normalisation)
    actions: Tensor  # [T, N, *A]
    log_probs: Tensor  # [T, N]
    rewards: Tensor  # [T, N] raw env rewards
    terminated: Tensor  # [T, N] bool
    truncated: Tensor  # [T, N] bool
    episode_starts: Tensor  # [T, N] bool: the state is reset before step t
    start_state: RecurrentState  # state entering step 0 (pre-mask), critics included
    pi_chunk_states: list[LSTMState]  # actor state entering each chunk start (pre-mask)
    final_obs: Tensor  # [M, D] true final observations of the M truncated steps
    final_index: Tensor  # [M, 2] (t, env) of those steps
    final_pi_state: LSTMState | None  # [L, M, H] actor state after each of those M steps
    actor_latent: Tensor | None  # [T, N, H] ActStep.critic_input (when the critics read it)
    last_obs: Tensor  # [N, D] observation after the last step
    last_episode_start: Tensor  # [N] bool
    last_pi_state: LSTMState  # actor state after the last step
    costs_fraction: Tensor  # [T, N] info["reward_costs_fraction"] (NaN where absent/invalid)
    costs_nonfinite: int  # entries that were reported but not a finite number
    # [T, N] ∂(return)/∂(action) of each decision from the env's reward slopes ([T, N, A] for an
    # action of A > 1 numbers; None: the env reports none); see riskppo.algo.collect
    reward_slopes: Tensor | None = None
    # the part of reward_slopes that is the next step's reward's slope in a_t (same shape)
    reward_slopes_next: Tensor | None = None


def chunk_critic(x: Tensor, chunk_len: int) -> Tensor:
    """``[C, T, N, K]`` → ``[C, L, n_chunks * N, K]``."""
    return torch.stack([to_chunks(c, chunk_len) for c in x])


def cat_states(states: list[LSTMState]) -> LSTMState:
    """Concatenate per-chunk ``[L, N, H]`` states → ``[L, n_chunks * N, H]`` (chunk-major)."""
    return LSTMState(torch.cat([s.h for s in states], 1), torch.cat([s.c for s in states], 1))


Leaf = Tensor | None
"""A leaf of a batch's flat form: a tensor, or None for an input that is absent."""

Layout = tuple[object, ...]
"""The structure of a batch's flat form (hashable: a key of the compiled loss's input shapes)."""


def _flatten(x: object, leaves: list[Leaf]) -> object:
    """Append ``x``'s leaves to ``leaves``; its structure: ``None`` for a leaf, ``(type,
    children)`` for a named tuple, ``(tuple, children)`` for a tuple, ``(dict, keys,
    children)`` for a mapping (keys sorted)."""
    if x is None or isinstance(x, Tensor):
        leaves.append(x)
        return None
    if isinstance(x, dict):
        keys = tuple(sorted(x))
        return (dict, keys, tuple(_flatten(x[k], leaves) for k in keys))
    if isinstance(x, tuple):
        return (type(x), tuple(_flatten(v, leaves) for v in x))
    raise TypeError(f"a batch holds tensors, named tuples, tuples and dicts, not {type(x)}")


def _unflatten(spec: object, leaves: Iterator[Leaf]) -> object:
    if spec is None:
        return next(leaves)
    assert isinstance(spec, tuple)
    if spec[0] is dict:
        _, keys, children = spec
        return {k: _unflatten(c, leaves) for k, c in zip(keys, children)}
    kind, children = spec
    values = [_unflatten(c, leaves) for c in children]
    return tuple(values) if kind is tuple else kind(*values)


@dataclass
class ChunkBatch:
    """Chunks of ``L`` steps, time-major ``[L, B, ...]``: a whole rollout or one minibatch.

    Every field is indexed by chunk along dimension 1 unless its metadata says otherwise
    (``chunk_dim``); :meth:`select` and the flat form (:meth:`flat`, :meth:`from_flat`: what
    the compiled loss takes) are derived from the fields, so a new field needs no other code."""

    obs: Tensor  # [L, B, D]
    actions: Tensor  # [L, B, *A]
    old_log_probs: Tensor  # [L, B]
    advantages: Tensor  # [L, B] normalised advantages (combined with a constraint's, if any)
    targets: Tensor  # [L, B] normalised λ-return targets
    # [C, L, B, K] old critic predictions, in current normalised units
    old_critic: Tensor = field(metadata={"chunk_dim": 2})
    episode_starts: Tensor  # [L, B] bool
    state: RecurrentState  # state entering each chunk (pre-mask), batch B
    raw_advantages: Tensor  # [L, B] advantages before normalisation (AWR weights)
    # [L, B, ...] inputs of the auxiliary loss terms and the constraint, by name (e.g. the risk
    # head's segment targets, the pathwise term's reward slopes): see riskppo.algo.terms
    aux: dict[str, Tensor] = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return int(self.obs.shape[0] * self.obs.shape[1])

    @property
    def n_chunks(self) -> int:
        return int(self.obs.shape[1])

    def select(self, idx: Tensor) -> ChunkBatch:
        """The chunks ``idx`` (``index_select`` along the chunk dimension: the same values as
        ``x[:, idx]``, for a third of its dispatch cost)."""
        idx = idx.to(self.obs.device)  # index_select takes no index from another device
        picked: dict[str, Any] = {}
        for f in _FIELDS:
            x = getattr(self, f.name)
            if isinstance(x, Tensor):
                picked[f.name] = x.index_select(f.metadata.get("chunk_dim", 1), idx)
            elif isinstance(x, dict):
                picked[f.name] = {k: v.index_select(1, idx) for k, v in x.items()}
            else:
                picked[f.name] = x.select(idx)
        return ChunkBatch(**picked)

    def flat(self) -> tuple[list[Leaf], Layout]:
        """The batch's tensors in field order and its structure (:meth:`from_flat` inverts)."""
        leaves: list[Leaf] = []
        layout = tuple(_flatten(getattr(self, f.name), leaves) for f in _FIELDS)
        return leaves, layout

    @staticmethod
    def from_flat(leaves: tuple[Leaf, ...] | list[Leaf], layout: Layout) -> ChunkBatch:
        """The batch whose :meth:`flat` is ``(leaves, layout)``."""
        it = iter(leaves)
        values: dict[str, Any] = {f.name: _unflatten(s, it) for f, s in zip(_FIELDS, layout)}
        return ChunkBatch(**values)

    def minibatches(
        self, chunks_per_batch: int, generator: torch.Generator
    ) -> Iterator[ChunkBatch]:
        """Shuffled minibatches of ``chunks_per_batch`` chunks (one epoch)."""
        # on the buffer's device once per epoch (select's move is then a no-op per minibatch)
        perm = torch.randperm(self.n_chunks, generator=generator).to(self.obs.device)
        for start in range(0, self.n_chunks, chunks_per_batch):
            yield self.select(perm[start : start + chunks_per_batch])


_FIELDS = fields(ChunkBatch)
