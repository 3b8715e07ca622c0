"""The checks on every tensor handed to the C kernels (``riskppo/nn/native/*.c``).

C reads a tensor through a bare pointer with the sizes it is told: a tensor of another shape is
read or written out of bounds (a crash, or silently wrong numbers), a float64 one is misread as
float32, a strided one is read as if it were dense, a tensor that is not in CPU memory is not
memory at all. So each caller states what C will read — every tensor's shape in the sizes passed
to C, float32, the CPU, dense row-major memory — and :func:`check` raises a ``ValueError``
naming the argument before any ``data_ptr()`` is taken.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = ["check"]

_INT_MAX = 2**31 - 1  # the C sizes are ``int``


def check(
    where: str,
    name: str,
    t: Tensor,
    dims: str,
    shape: tuple[int, ...],
    *,
    layout: Literal["dense", "rows", "any"] = "dense",
    dtype: torch.dtype = torch.float32,
    device: torch.device | None = None,
) -> None:
    """Raise ``ValueError`` (``"{where}: {name} ..."``) unless ``t`` is a ``dtype`` tensor on
    ``device`` (None: the CPU) of exactly ``shape`` (named ``dims``, e.g. ``"[K, B, H]"``),
    laid out as C reads it: ``"dense"`` row-major memory, ``"rows"`` a last stride of 1 (C is
    told the other strides), ``"any"`` (not for C: the same checks for the PyTorch kernel)."""
    if (
        device is None
        and layout == "dense"
        and t.is_cpu
        and t.dtype == dtype
        and t.shape == shape
        and t.is_contiguous()
        and max(shape, default=0) <= _INT_MAX
    ):
        return  # the common case in few operations: the rollout calls C once per step
    problem = None
    if (not t.is_cpu) if device is None else t.device != device:
        problem = f"is on {t.device}, expected {device or 'the CPU'}"
    elif t.dtype != dtype:
        problem = f"is {t.dtype}, expected {dtype}"
    elif t.shape != shape:
        problem = f"has shape {list(t.shape)}, expected {dims} = {list(shape)}"
    elif layout != "any" and max(shape, default=0) > _INT_MAX:
        problem = f"has shape {list(shape)}: the C kernel takes sizes below 2**31"
    elif layout == "dense" and not t.is_contiguous():
        problem = f"has strides {list(t.stride())}, expected contiguous memory"
    elif layout == "rows" and t.numel() and t.stride(-1) != 1:
        problem = f"has strides {list(t.stride())}, expected a last stride of 1"
    if problem is not None:
        raise ValueError(f"{where}: {name} {problem}")
