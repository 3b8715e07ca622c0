"""The first layer of ``K`` LSTMs that read one input, its input projection inside the C kernel.

Why: the first layer's input projection ``x W_ihᵀ + b`` is a matmul with a narrow inner dimension
(4 for CartPole) and a wide output (``T·B × K·4H``): as a PyTorch ``addmm`` it writes and the
recurrence reads back a buffer the size of all the gates, and its backward adds a matmul and a
sum over that buffer. In C (``riskppo_lstm_layer_forward``, ``riskppo_lstm_input_grad`` in
``riskppo/nn/native/lstm.c``) each step's projection goes straight into its gates, and the
gradients of ``W_ih`` and ``b`` are one product over the backward's ``dz``.

:func:`lstm_layer` is the entry point: the C kernel for float32 on the CPU (as an autograd
function in eager mode, as custom ops under ``torch.compile``), else :func:`projected_recurrence`
(the projection in PyTorch, then :func:`~riskppo.nn.lstm_kernel.masked_lstm_recurrence`). Same
equations and results to float rounding; both are tested against a float64 reference
(``tests/unit/nn/test_lstm_layer.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from riskppo.nn import lstm_kernel, native
from riskppo.nn.c_args import check
from riskppo.nn.lstm_kernel import (
    _check,
    _native_backward,
    _ptr,
    _Saved,
    masked_lstm_recurrence,
    native_applies,
)

__all__ = ["lstm_layer", "projected_recurrence"]

_WHERE = "the C LSTM layer"


def lstm_layer(
    x: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor]:
    """Run ``K`` LSTM layers over one input with per-step state masking.

    Args:
        x: ``[T, B, D]`` the input every LSTM reads.
        w_ih: ``[K, 4H, D]`` input weights; ``bias``: ``[K, 4H]`` (``b_ih + b_hh``).
        w_hh: ``[K, 4H, H]`` recurrent weights.
        h0, c0: ``[K, B, H]`` states entering step 0 (before the step-0 mask).
        keep: ``[T, B]`` 1 to keep the state entering step t, 0 to reset it.

    Returns:
        ``(hs, cs)``: ``[T, K, B, H]`` hidden and cell states after every step.
    """
    keep = keep.to(x.dtype)
    if native_applies(x):
        if torch.compiler.is_compiling():  # under torch.compile (riskppo.algo.compiled)
            hs, cs, _, _ = _layer_op(x, w_ih, bias, w_hh, h0, c0, keep)
            return hs, cs
        tensors = (x, w_ih, bias, w_hh, h0, c0)
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            out: tuple[Tensor, Tensor] = _LSTMLayer.apply(x, w_ih, bias, w_hh, h0, c0, keep)
            return out
        hs, cs, _, _ = _forward(x, w_ih, bias, w_hh, h0, c0, keep)
        return hs, cs
    return projected_recurrence(x, w_ih, bias, w_hh, h0, c0, keep)


def projected_recurrence(
    x: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor]:
    """:func:`lstm_layer` with the input projection in PyTorch, then
    :func:`~riskppo.nn.lstm_kernel.masked_lstm_recurrence`: the path where the C layer does not
    apply (float64, CUDA, no compiler), and what it replaced (``benchmarks/lstm_kernel.py``)."""
    T, B, D = x.shape
    K, G, _ = w_hh.shape
    # W_ihᵀ as a contiguous [D, K·4H] (not a transposed view): autograd then forms its gradient
    # as xᵀ·dz, not (dzᵀ·x)ᵀ, a skinny matmul that the CPU BLAS runs several times slower.
    w_in = w_ih.reshape(K * G, D).T.contiguous()
    proj = torch.addmm(bias.reshape(-1), x.reshape(T * B, D), w_in)
    xproj = proj.view(T, B, K, G).transpose(1, 2)  # a view; the kernel copes
    return masked_lstm_recurrence(xproj, w_hh, h0, c0, keep.to(x.dtype))


def _forward(
    x: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``riskppo_lstm_layer_forward``: ``hs, cs, acts, tanh_c`` as
    :func:`~riskppo.nn.lstm_kernel._native_forward` returns them."""
    T, B, D = x.shape
    K, G, H = w_hh.shape
    # Bound to names until the call returns: C reads these (copies where not contiguous).
    x, w_ih, bias, w_hh, h0, c0, keep = (
        t.contiguous() for t in (x, w_ih, bias, w_hh, h0, c0, keep)
    )
    for name, t, dims, shape in (
        ("x", x, "[T, B, D]", (T, B, D)),
        ("w_ih", w_ih, "[K, 4H, D]", (K, G, D)),
        ("bias", bias, "[K, 4H]", (K, G)),
        ("w_hh", w_hh, "[K, 4H, H]", (K, G, H)),
        ("h0", h0, "[K, B, H]", (K, B, H)),
        ("c0", c0, "[K, B, H]", (K, B, H)),
        ("keep", keep, "[T, B]", (T, B)),
    ):
        check(_WHERE, name, t, dims, shape)
    hs, cs, tanh_c = (x.new_empty(T, K, B, H) for _ in range(3))
    acts = x.new_empty(T, K, B, G)
    pointers = map(_ptr, (x, w_ih, bias, w_hh, h0, c0, keep, hs, cs, acts, tanh_c))
    lib = native.kernel()
    assert lib is not None
    _check(lib.riskppo_lstm_layer_forward(T, K, B, H, D, *pointers))
    return hs, cs, acts, tanh_c


def _input_grads(x: Tensor, dz: Tensor) -> tuple[Tensor, Tensor]:
    """``riskppo_lstm_input_grad``: the gradients of ``w_ih`` ``[K, 4H, D]`` and ``bias``
    ``[K, 4H]`` from ``dz`` ``[T, K, B, 4H]`` in the ``[T, B, K, 4H]`` memory that
    :func:`~riskppo.nn.lstm_kernel._native_backward` writes (C reads it as ``T·B`` rows)."""
    T, K, B, G = dz.shape
    D = x.shape[-1]
    x = x.contiguous()
    check(_WHERE, "x", x, "[T, B, D]", (T, B, D))
    check(_WHERE, "dz", dz, "[T, K, B, 4H]", (T, K, B, G), layout="any")  # its strides: next
    if dz.stride() != (B * K * G, G, K * G, 1):
        raise ValueError(
            f"{_WHERE}: dz has strides {list(dz.stride())}, expected [T, B, K, 4H] memory"
        )
    dw, db = x.new_empty(K, G, D), x.new_empty(K, G)
    lib = native.kernel()
    assert lib is not None
    _check(lib.riskppo_lstm_input_grad(
        T, K, B, G // 4, D, x.data_ptr(), dz.data_ptr(), G, K * G, dw.data_ptr(), db.data_ptr()
    ))  # fmt: skip
    return dw, db


def _input_of(dz: Tensor, w_ih: Tensor) -> Tensor:
    """The gradient of ``x`` ``[T, B, D]``: ``Σ_k dz_k W_ih,k`` (only when ``x`` asks for one,
    e.g. the adversarial regulariser's attack on the observations)."""
    return torch.einsum("tkbg,kgd->tbd", dz, w_ih)


class _LSTMLayer(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor,
        keep: Tensor,
    ) -> tuple[Tensor, Tensor]:  # fmt: skip
        hs, cs, acts, tanh_c = _forward(x, w_ih, bias, w_hh, h0, c0, keep)
        ctx.save_for_backward(x, w_ih, hs, cs, acts, tanh_c, h0, c0, w_hh, keep)
        ctx.mark_non_differentiable(keep)
        ctx.set_materialize_grads(False)  # unused outputs (usually ``cs``) get None, not zeros
        return hs, cs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_hs: Tensor | None, d_cs: Tensor | None) -> tuple[Tensor | None, ...]:
        x, w_ih, *rest = ctx.saved_tensors
        dz, dh0, dc0, dw_hh = _native_backward(_Saved(*rest), d_hs, d_cs)
        dw_ih, db = _input_grads(x, dz)
        dx = _input_of(dz, w_ih) if ctx.needs_input_grad[0] else None
        return dx, dw_ih, db, dw_hh, dh0, dc0, None


# The C layer as custom ops for torch.compile, named with a digest of this file and of the
# kernel's (whose backward they call), as riskppo.nn.lstm_kernel explains.
_OPS_VERSION = hashlib.sha256(
    Path(__file__).read_bytes() + Path(lstm_kernel.__file__).read_bytes()
).hexdigest()[:12]


@torch.library.custom_op(f"riskppo::lstm_layer_{_OPS_VERSION}", mutates_args=())
def _layer_op(
    x: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`_forward`: ``hs, cs, acts, tanh_c``."""
    return _forward(x, w_ih, bias, w_hh, h0, c0, keep)


@_layer_op.register_fake
def _(x: Tensor, w_ih: Tensor, bias: Tensor, w_hh: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
    T, B = x.shape[:2]
    K, G, H = w_hh.shape
    hs, cs, tanh_c = (x.new_empty(T, K, B, H) for _ in range(3))
    return hs, cs, x.new_empty(T, K, B, G), tanh_c


@torch.library.custom_op(f"riskppo::lstm_layer_grad_{_OPS_VERSION}", mutates_args=())
def _layer_backward_op(
    x: Tensor, hs: Tensor, cs: Tensor, acts: Tensor, tanh_c: Tensor, h0: Tensor, c0: Tensor,
    w_hh: Tensor, keep: Tensor, d_hs: Tensor, d_cs: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``dz`` as the contiguous ``[T, B, K, 4H]`` tensor it is written into (an op returns no
    views), ``dh0``, ``dc0``, ``d_w_hh``, ``d_w_ih``, ``d_bias``."""
    saved = _Saved(hs, cs, acts, tanh_c, h0, c0, w_hh, keep)
    dz, dh0, dc0, dw_hh = _native_backward(saved, d_hs, d_cs)
    dw_ih, db = _input_grads(x, dz)
    return dz.transpose(1, 2), dh0, dc0, dw_hh, dw_ih, db


@_layer_backward_op.register_fake
def _(x: Tensor, hs: Tensor, cs: Tensor, acts: Tensor, *_: Tensor) -> tuple[Tensor, ...]:
    T, K, B, G = acts.shape
    state = hs.shape[1:]
    dz = acts.new_empty(T, B, K, G)
    return (
        dz,
        hs.new_empty(state),
        hs.new_empty(state),
        acts.new_empty(K, G, G // 4),
        acts.new_empty(K, G, x.shape[-1]),
        acts.new_empty(K, G),
    )


def _op_setup(ctx: Any, inputs: tuple[Tensor, ...], output: tuple[Tensor, ...]) -> None:
    x, w_ih, _, w_hh, h0, c0, keep = inputs
    hs, cs, acts, tanh_c = output
    ctx.save_for_backward(x, w_ih, hs, cs, acts, tanh_c, h0, c0, w_hh, keep)


def _op_backward(ctx: Any, d_hs: Tensor, d_cs: Tensor, *_: Tensor) -> tuple[Tensor | None, ...]:
    x, w_ih, *rest = ctx.saved_tensors
    dz_tbkg, dh0, dc0, dw_hh, dw_ih, db = _layer_backward_op(x, *rest, d_hs, d_cs)
    dx = None
    if ctx.needs_input_grad[0]:
        dx = _input_of(dz_tbkg.transpose(1, 2), w_ih)
    return dx, dw_ih, db, dw_hh, dh0, dc0, None


_layer_op.register_autograd(_op_backward, setup_context=_op_setup)
