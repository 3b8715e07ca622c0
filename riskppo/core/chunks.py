"""Time-major sequences cut into equal chunks for truncated BPTT (docs/design.md, the rollout
layout): a ``[T, N, ...]`` rollout (steps × envs) becomes ``[L, n_chunks * N, ...]`` columns."""

from __future__ import annotations

from torch import Tensor

__all__ = ["to_chunks"]


def to_chunks(x: Tensor, chunk_len: int) -> Tensor:
    """``[T, N, *F]`` → ``[L, (T // L) * N, *F]``; column ``j * N + i`` = chunk j of env i."""
    T, N = x.shape[:2]
    n_chunks = T // chunk_len
    y = x.reshape(n_chunks, chunk_len, N, *x.shape[2:]).transpose(0, 1)
    return y.reshape(chunk_len, n_chunks * N, *x.shape[2:])
