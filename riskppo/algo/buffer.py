"""Time-major rollout storage and the sequence/chunk minibatch sampler (R-ALG-15).

A rollout is ``[T, N, ...]`` (steps × envs). For training it is cut into chunks of ``L`` steps
(``L = bptt_len`` or ``T`` for whole env sequences): chunk ``j`` of env ``i`` becomes column
``j * N + i`` of a ``[L, n_chunks * N, ...]`` view, with the recurrent state that entered step
``j * L`` of env ``i`` as its initial state. Minibatches are sets of whole columns — no padding,
no Python loop over sequences.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

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
    # [T, N] ∂(return)/∂(action) of each decision from the env's reward slopes (None: the env
    # reports none); see riskppo.algo.collect
    reward_slopes: Tensor | None = None


def chunk_critic(x: Tensor, chunk_len: int) -> Tensor:
    """``[C, T, N, K]`` → ``[C, L, n_chunks * N, K]``."""
    return torch.stack([to_chunks(c, chunk_len) for c in x])


def cat_states(states: list[LSTMState]) -> LSTMState:
    """Concatenate per-chunk ``[L, N, H]`` states → ``[L, n_chunks * N, H]`` (chunk-major)."""
    return LSTMState(torch.cat([s.h for s in states], 1), torch.cat([s.c for s in states], 1))


@dataclass
class ChunkBatch:
    """Chunks of ``L`` steps, time-major ``[L, B, ...]``: a whole rollout or one minibatch."""

    obs: Tensor  # [L, B, D]
    actions: Tensor  # [L, B, *A]
    old_log_probs: Tensor  # [L, B]
    advantages: Tensor  # [L, B] normalised advantages (+ λ·CVaR term when constrained)
    targets: Tensor  # [L, B] normalised λ-return targets
    old_critic: Tensor  # [C, L, B, K] old critic predictions, in current normalised units
    episode_starts: Tensor  # [L, B] bool
    state: RecurrentState  # state entering each chunk (pre-mask), batch B
    raw_advantages: Tensor  # [L, B] advantages before normalisation (AWR weights)
    risk_targets: Tensor | None = None  # [L, B] segment return-to-go targets (NaN: unfinished)
    # [L, B] ∂return/∂action of each decision, unit RMS over the rollout (the pathwise term)
    slopes: Tensor | None = None

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

        def pick(x: Tensor, dim: int = 1) -> Tensor:
            return x.index_select(dim, idx)

        return ChunkBatch(
            obs=pick(self.obs),
            actions=pick(self.actions),
            old_log_probs=pick(self.old_log_probs),
            advantages=pick(self.advantages),
            targets=pick(self.targets),
            old_critic=pick(self.old_critic, 2),
            episode_starts=pick(self.episode_starts),
            state=self.state.select(idx),
            raw_advantages=pick(self.raw_advantages),
            risk_targets=None if self.risk_targets is None else pick(self.risk_targets),
            slopes=None if self.slopes is None else pick(self.slopes),
        )

    def minibatches(
        self, chunks_per_batch: int, generator: torch.Generator
    ) -> Iterator[ChunkBatch]:
        """Shuffled minibatches of ``chunks_per_batch`` chunks (one epoch)."""
        # on the buffer's device once per epoch (select's move is then a no-op per minibatch)
        perm = torch.randperm(self.n_chunks, generator=generator).to(self.obs.device)
        for start in range(0, self.n_chunks, chunks_per_batch):
            yield self.select(perm[start : start + chunks_per_batch])
