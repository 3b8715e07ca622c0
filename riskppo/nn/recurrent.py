"""LSTM with per-step episode-start masking, done inside the module (R-ALG-1).

The state entering step ``t`` is multiplied by ``1 - episode_start[t]`` before the cell runs, so a
replay of a stored sequence that crosses episode boundaries reproduces the rollout exactly.

For speed (R-ALG-15) a sequence is cut only at the time indices where *some* sequence of the batch
starts an episode; between two such indices no state is reset, so PyTorch's fused ``nn.LSTM`` runs
the whole stretch in one call. The result is the same as a step-by-step loop with masking.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch
from torch import Tensor, nn


class LSTMState(NamedTuple):
    """Recurrent state of one LSTM: ``h`` and ``c`` are ``[n_layers, batch, hidden]``."""

    h: Tensor
    c: Tensor

    def index(self, idx: Tensor | slice) -> LSTMState:
        """Select batch entries (dim 1)."""
        return LSTMState(self.h[:, idx], self.c[:, idx])

    def masked(self, keep: Tensor) -> LSTMState:
        """Zero the entries where ``keep`` (``[batch]``, 1 = keep) is 0."""
        k = keep.view(1, -1, 1).to(self.h.dtype)
        return LSTMState(self.h * k, self.c * k)


def stack_states(states: list[LSTMState], dim: int = 1) -> LSTMState:
    return LSTMState(
        torch.cat([s.h for s in states], dim=dim), torch.cat([s.c for s in states], dim=dim)
    )


class MaskedLSTM(nn.Module):
    """Time-major LSTM whose state is reset where ``episode_starts`` is 1.

    Shapes: ``x`` ``[T, B, in]``, ``episode_starts`` ``[T, B]`` (bool or 0/1 float),
    ``state`` :class:`LSTMState` ``[L, B, H]``. Returns ``out`` ``[T, B, H]`` and the final state.
    """

    def __init__(self, input_size: int, hidden_size: int, n_layers: int = 1) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.n_layers = n_layers
        self.lstm = nn.LSTM(input_size, hidden_size, n_layers)

    def initial_state(self, batch: int, device: torch.device | None = None) -> LSTMState:
        z = torch.zeros(self.n_layers, batch, self.hidden_size, device=device)
        return LSTMState(z, z.clone())

    def forward(
        self,
        x: Tensor,
        state: LSTMState,
        episode_starts: Tensor,
        capture: Iterable[int] = (),
    ) -> tuple[Tensor, LSTMState, dict[int, LSTMState]]:
        """Run the sequence and return ``(out, final_state, captured)``.

        ``captured[t]`` is the state *entering* step ``t`` before the episode-start mask, i.e. the
        state after processing step ``t - 1`` (``t == T`` gives the final state). The rollout
        stores such states as chunk initial states, and the time-limit bootstrap evaluates a
        truncated episode's final observation with them (R-ALG-6).
        """
        T = x.shape[0]
        if episode_starts.shape != x.shape[:2]:
            raise ValueError(
                f"episode_starts shape {tuple(episode_starts.shape)} != x[:2] {tuple(x.shape[:2])}"
            )
        keep = 1.0 - episode_starts.to(x.dtype)
        wanted = set(capture)
        any_start = episode_starts.reshape(T, -1).bool().any(dim=1)
        cuts = set(torch.nonzero(any_start).flatten().tolist()) | {0} | (wanted - {T})
        bounds = [*sorted(cuts), T]
        outs: list[Tensor] = []
        captured: dict[int, LSTMState] = {}
        h, c = state
        for a, b in zip(bounds[:-1], bounds[1:]):
            if a in wanted:
                captured[a] = LSTMState(h, c)
            k = keep[a].view(1, -1, 1)
            out, (h, c) = self.lstm(x[a:b], (h * k, c * k))
            outs.append(out)
        final = LSTMState(h, c)
        if T in wanted:
            captured[T] = final
        return torch.cat(outs, dim=0) if len(outs) > 1 else outs[0], final, captured

    def step(self, x: Tensor, state: LSTMState, episode_start: Tensor) -> tuple[Tensor, LSTMState]:
        """One step for a batch: ``x`` ``[B, in]``, ``episode_start`` ``[B]`` → ``[B, H]``."""
        k = (1.0 - episode_start.to(x.dtype)).view(1, -1, 1)
        out, (h, c) = self.lstm(x.unsqueeze(0), (state.h * k, state.c * k))
        return out[0], LSTMState(h, c)
