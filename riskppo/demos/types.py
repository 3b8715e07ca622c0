"""The demonstration set's types (R-ALG-12): :class:`Demonstrations` and its error, shared by
the safetensors and the Parquet readers (:mod:`riskppo.demos.files`,
:mod:`riskppo.demos.parquet`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from riskppo.core.chunks import to_chunks

__all__ = ["DemonstrationError", "Demonstrations"]


class DemonstrationError(ValueError):
    """A demonstration file or set that cannot be used; the message names file and field."""


@dataclass
class Demonstrations:
    """Time-major demonstrations (see the module docstring for the fields)."""

    observations: Tensor  # [T, N, D] float32, raw
    actions: Tensor  # [T, N, *A] float32 (Box) or int64 (Discrete)
    episode_starts: Tensor  # [T, N] bool
    returns: Tensor | None = None  # [T, N] float32

    @property
    def shape(self) -> tuple[int, int]:
        """``(T, N)``: steps per sequence and number of sequences."""
        return int(self.observations.shape[0]), int(self.observations.shape[1])

    def chunks(self, chunk_len: int) -> Demonstrations:
        """The last ``T // L * L`` steps cut into ``[L, (T // L) * N, ...]`` chunks: column
        ``j * N + i`` = chunk ``j`` of sequence ``i`` (:func:`~riskppo.core.chunks.to_chunks`)."""
        T = self.shape[0] // chunk_len * chunk_len
        if T == 0:
            raise DemonstrationError(
                f"demonstrations of {self.shape[0]} steps are shorter than one chunk of "
                f"{chunk_len} steps (ppo.bptt_len)"
            )

        def cut(x: Tensor) -> Tensor:
            return to_chunks(x[x.shape[0] - T :], chunk_len)

        return Demonstrations(
            cut(self.observations),
            cut(self.actions),
            cut(self.episode_starts),
            None if self.returns is None else cut(self.returns),
        )
