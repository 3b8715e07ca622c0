"""A fused, masked LSTM recurrence for ``K`` independent LSTMs at once (R-ALG-1, R-ALG-15).

Why: PyTorch's CPU LSTM records several autograd nodes per time step, and resetting the state at
episode starts forces the sequence to be cut into pieces. Here the recurrence of ``K`` LSTMs
(e.g. the actor's and both critics', which all read the same observations) runs in one loop of
batched ops, the episode-start mask is applied inside the loop, and the backward pass is written
by hand (one loop, gradients of the weights as single matmuls at the end). Each LSTM keeps its
own parameters; nothing is shared between the ``K`` groups.

For float32 on the CPU both loops run in C (:mod:`riskppo.nn.native`; under ``torch.compile`` as
custom ops); the PyTorch loops here are the fallback (no C compiler, float64, CUDA) and the
reference the C kernel is tested against.

Gate layout follows ``torch.nn.LSTM``: ``[i, f, g, o]``. Per step ``t`` and group ``k``::

    h', c' = keep_t · h_{t-1}, keep_t · c_{t-1}        (reset where an episode starts)
    z      = xproj_t + h' W_hhᵀ                        (xproj = x W_ihᵀ + b_ih + b_hh)
    i,f,o  = σ(z_i), σ(z_f), σ(z_o);  g = tanh(z_g)
    c_t    = f ⊙ c' + i ⊙ g;          h_t = o ⊙ tanh(c_t)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from riskppo.nn import native
from riskppo.nn.c_args import check


def _gate_scale(like: Tensor, H: int) -> Tensor:
    """``[4H]`` ones with 2 on the ``g`` gate: ``tanh(z) = 2σ(2z) − 1`` lets one ``sigmoid``
    cover all four gates (``torch.tanh`` is several times slower than ``torch.sigmoid`` on CPU)."""
    scale = like.new_ones(4 * H)
    scale[2 * H : 3 * H] = 2.0
    return scale


def doubled_t(w: Tensor) -> Tensor:
    """Gate weights ``[K, 4H, n]`` as the C kernel reads them: ``[K, n, 4H]``, transposed and
    contiguous, the ``g`` gate doubled (:func:`_gate_scale`)."""
    G = w.shape[1]
    return (w * _gate_scale(w, G // 4).view(1, G, 1)).transpose(1, 2).contiguous()


def _resets(keep: Tensor) -> list[bool]:
    """``[T]``: whether any state is reset entering step ``t`` (masking is skipped otherwise)."""
    resets: list[bool] = (keep < 1).any(dim=1).tolist()
    return resets


def _recurrence(
    xproj: Tensor,
    w_hh: Tensor,
    h0: Tensor,
    c0: Tensor,
    keep: Tensor,
    resets: list[bool],
    save: bool,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """Forward loop; time-major ``[T, K, B, ·]`` buffers written in place to keep the number of
    ops per step small (``xproj`` may be a strided view, e.g. of a ``[T, B, K, 4H]`` tensor).

    Returns ``hs, cs`` and, when ``save``, the gate activations ``[i, f, s, o]``
    (``s = σ(2 z_g)``, so ``g = 2s − 1``) and ``tanh(c)`` for the backward pass.

    With ``g = 2s − 1`` the cell update is ``c = f ⊙ c' + i ⊙ g = (f ⊙ c' − i) + 2 i ⊙ s``.
    """
    T, K, B, G = xproj.shape
    H = G // 4
    scale = _gate_scale(xproj, H)
    w_t = (w_hh * scale.view(1, G, 1)).transpose(1, 2)  # [K, H, 4H]
    hs = xproj.new_empty(T, K, B, H)
    cs = xproj.new_empty(T, K, B, H)
    # The gates are computed in place: acts starts as the input projection (g doubled) and
    # each step adds h W_hhᵀ to its slice, then applies the sigmoid.
    acts = torch.mul(xproj, scale, out=xproj.new_empty(T, K, B, G))
    tanh_c = xproj.new_empty(T, K, B, H)
    # Per-step views made once up front: a view costs about as much as a small op.
    a_t, h_t, c_t, tc_t = (v.unbind(0) for v in (acts, hs, cs, tanh_c))
    i_t, f_t, s_t, o_t = (v.unbind(0) for v in acts.split(H, dim=-1))
    keep_t = keep.view(T, 1, B, 1).unbind(0)
    h, c = h0, c0
    for t in range(T):
        if resets[t]:
            h, c = h * keep_t[t], c * keep_t[t]
        a_t[t].baddbmm_(h, w_t).sigmoid_()
        fc = torch.mul(f_t[t], c).sub_(i_t[t])
        c = torch.addcmul(fc, i_t[t], s_t[t], value=2.0, out=c_t[t])
        h = torch.mul(o_t[t], torch.tanh(c, out=tc_t[t]), out=h_t[t])
    if not save:
        return hs, cs, None, None
    return hs, cs, acts, tanh_c


class _Saved(NamedTuple):
    """What the forward keeps for the backward (``[T, K, B, ·]`` trajectories, the inputs)."""

    hs: Tensor
    cs: Tensor
    acts: Tensor  # gate activations [i, f, s, o], s = σ(2 z_g)
    tanh_c: Tensor
    h0: Tensor
    c0: Tensor
    w_hh: Tensor
    keep: Tensor


def _weight_grad(saved: _Saved, dz: Tensor) -> Tensor:
    """``d W_hh`` ``[K, 4H, H]`` as one matmul over all steps: ``Σ_t dz_tᵀ h'_t`` (``h'``: the
    state entering step ``t`` after the mask)."""
    T, K, B, G = dz.shape
    H = G // 4
    h_prev = torch.cat([saved.h0.unsqueeze(0), saved.hs[:-1]]) * saved.keep.view(T, 1, B, 1)
    return torch.bmm(
        dz.transpose(0, 1).reshape(K, T * B, G).transpose(1, 2),
        h_prev.transpose(0, 1).reshape(K, T * B, H),
    )


def _native_built() -> bool:
    return native.kernel() is not None


# torch.compile must take whether the C kernel exists as a constant, not trace a call into it.
# Marking it so imports torch._dynamo (seconds at every start of the command line), so the mark
# is set before the first compile (riskppo.algo.compiled), not at import.
_native_available: Callable[[], bool] = _native_built


def treat_native_check_as_constant() -> None:
    """Before ``torch.compile`` traces code that calls :func:`native_applies`: the check for the
    C kernel becomes a constant of the graph (idempotent)."""
    global _native_available
    if _native_available is _native_built:
        _native_available = torch.compiler.assume_constant_result(_native_built)


def native_applies(x: Tensor) -> bool:
    """Whether the C kernel (:mod:`riskppo.nn.native`) runs an LSTM on ``x``: float32 on the
    CPU, when it could be built."""
    return x.dtype == torch.float32 and x.device.type == "cpu" and _native_available()


def _ptr(x: Tensor | None) -> int | None:
    return None if x is None else x.data_ptr()


def _native_forward(
    xproj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`_recurrence` (with ``save``) in C: ``hs, cs, acts, tanh_c``, the same quantities
    to float rounding."""
    T, K, B, G = xproj.shape
    H = G // 4
    if xproj.stride(-1) != 1:
        xproj = xproj.contiguous()
    where = "the C LSTM forward"
    check(where, "w_hh", w_hh, "[K, 4H, H]", (K, 4 * H, H), layout="any")
    w_t = doubled_t(w_hh)
    # Bound to names until the call returns: C reads these copies.
    h0, c0, keep = h0.contiguous(), c0.contiguous(), keep.contiguous()
    check(where, "xproj", xproj, "[T, K, B, 4H]", (T, K, B, 4 * H), layout="rows")
    for name, x, dims, shape in (
        ("w_t", w_t, "[K, H, 4H]", (K, H, G)),
        ("h0", h0, "[K, B, H]", (K, B, H)),
        ("c0", c0, "[K, B, H]", (K, B, H)),
        ("keep", keep, "[T, B]", (T, B)),
    ):
        check(where, name, x, dims, shape)
    hs, cs, tanh_c = (xproj.new_empty(T, K, B, H) for _ in range(3))  # contiguous
    acts = xproj.new_empty(T, K, B, G)
    pointers = map(_ptr, (w_t, h0, c0, keep, hs, cs, acts, tanh_c))
    lib = native.kernel()
    assert lib is not None
    _check(
        lib.riskppo_lstm_forward(T, K, B, H, xproj.data_ptr(), *xproj.stride()[:3], *pointers, 0)
    )
    return hs, cs, acts, tanh_c


def native_step(zx: Tensor, w_t: Tensor, h0: Tensor, c0: Tensor) -> Tensor:
    """One LSTM step in C for the rollout (:func:`riskppo.nn.recurrent.fused_lstm_step`; check
    :func:`native_applies` first).

    ``zx`` ``[B, 4H]``: the input part of the gates with the ``g`` gate already doubled;
    ``w_t`` ``[H, 4H]``: ``W_hhᵀ`` with the ``g`` gate doubled (both as in
    :meth:`~riskppo.nn.recurrent.MaskedLSTM.step_weights`); ``h0``, ``c0`` ``[B, H]`` the state
    entering the step (resets already applied). Returns ``h, c`` as one ``[2, 1, B, H]`` tensor
    (each an :class:`~riskppo.nn.recurrent.LSTMState` field of a one-layer LSTM).

    The rollout's hot path (one call per env step): pointers into two fresh buffers, no op
    that is not needed."""
    B, G = zx.shape
    H = G // 4
    inputs = [_contiguous(x) for x in (zx, w_t, h0, c0)]  # alive until the call returns
    zx, w_t, h0, c0 = inputs
    check("native_step", "zx", zx, "[B, 4H]", (B, 4 * H))
    check("native_step", "w_t", w_t, "[H, 4H]", (H, G))
    check("native_step", "h0", h0, "[B, H]", (B, H))
    check("native_step", "c0", c0, "[B, H]", (B, H))
    out = zx.new_empty(2, 1, B, H)
    scratch = zx.new_empty(B * (G + H))  # the gates and tanh(c), not kept
    o, s, size = out.data_ptr(), scratch.data_ptr(), out.element_size()
    lib = native.kernel()
    assert lib is not None
    zx_p, w_p, h_p, c_p = (x.data_ptr() for x in inputs)
    _check(lib.riskppo_lstm_forward(
        1, 1, B, H, zx_p, 0, 0, G, w_p, h_p, c_p, None, o, o + B * H * size, s, s + B * G * size,
        1,
    ))  # fmt: skip
    return out


def _check(status: int) -> None:
    if status == -2:  # riskppo_lstm_backward: dz's rows as _native_backward lays them out
        raise ValueError("the C LSTM backward: dz's rows must be evenly spaced (dz_t = B * dz_b)")
    if status != 0:
        raise MemoryError("the C LSTM kernel could not allocate its scratch memory")


def _contiguous(x: Tensor) -> Tensor:
    return x if x.is_contiguous() else x.contiguous()


def _native_backward(
    saved: _Saved, d_hs: Tensor | None, d_cs: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The backward recursion and the recurrent weights' gradient in C: ``dz`` (``[T, K, B, 4H]``,
    in ``[T, B, K, 4H]`` memory as :func:`_python_backward`), ``dh0``, ``dc0`` and ``d_w_hh``
    (``[K, 4H, H]``, what :func:`_weight_grad` gives, to float rounding)."""
    s = saved
    T, K, B, G = s.acts.shape
    H = G // 4
    dz = s.acts.new_empty(T, B, K, G).transpose(1, 2)
    # C writes dense arrays: fresh contiguous tensors (not empty_like(c0), which keeps the
    # strides of a permuted c0).
    dh0, dc0, dw = (s.acts.new_empty(shape) for shape in ((K, B, H), (K, B, H), (K, G, H)))
    # Bound to a name until the call returns: a contiguous copy would otherwise be freed as soon
    # as its pointer is taken, and C would read freed memory.
    inputs = [s.w_hh, s.h0, s.c0, s.keep, s.hs, s.cs, s.acts, s.tanh_c, d_hs, d_cs]
    inputs = [None if x is None else _contiguous(x) for x in inputs]
    seq, kbh = ("[T, K, B, H]", (T, K, B, H)), ("[K, B, H]", (K, B, H))
    shapes = [("[K, 4H, H]", (K, G, H)), kbh, kbh, ("[T, B]", (T, B)), seq, seq,
              ("[T, K, B, 4H]", (T, K, B, G)), seq, seq, seq]  # fmt: skip
    for name, x, (dims, shape) in zip(_BACKWARD_ARGS, inputs, shapes):
        if x is not None:
            check("the C LSTM backward", name, x, dims, shape)
    lib = native.kernel()
    assert lib is not None
    _check(lib.riskppo_lstm_backward(
        T, K, B, H, *map(_ptr, inputs), dz.data_ptr(), *dz.stride()[:3], dh0.data_ptr(),
        dc0.data_ptr(), dw.data_ptr(),
    ))  # fmt: skip
    return dz, dh0, dc0, dw


_BACKWARD_ARGS = ("w_hh", "h0", "c0", "keep", "hs", "cs", "acts", "tanh_c", "d_hs", "d_cs")


def _python_backward(
    saved: _Saved, resets: list[bool], d_hs: Tensor | None, d_cs: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """The backward recursion with PyTorch ops: ``dz`` (``[T, K, B, 4H]`` in ``[T, B, K, 4H]``
    memory: the layout of the input projection it flows back into, see ``run_lstms``, so
    neither the transpose there nor ``d_w_hh`` needs a copy), ``dh0``, ``dc0``."""
    cs, acts, tanh_c, _, c0, w_hh, keep = saved[1:]
    T, K, B, G = acts.shape
    H = G // 4
    k4 = keep.view(T, 1, B, 1)
    c_prev = torch.cat([c0.unsqueeze(0), cs[:-1]]) * k4
    i, f, s, o = acts.split(H, dim=-1)
    g = 2.0 * s - 1.0
    # Everything that does not depend on the backward recursion, for all steps at once:
    # ∂c/∂z for the i, f, g gates ([T, K, B, 3, H]) and ∂h/∂z_o, ∂h/∂c.
    dc_dz = torch.stack([g * i * (1 - i), c_prev * f * (1 - f), i * (1 - g * g)], dim=3)
    dh_dzo = tanh_c * o * (1 - o)
    o_dtanh = o * (1 - tanh_c * tanh_c)
    f_keep = f * k4
    dz = acts.new_empty(T, B, K, G).transpose(1, 2)
    # Per-step views made once up front (a view costs about as much as a small op).
    dz_ifg = dz[..., : 3 * H].view(T, K, B, 3, H).unbind(0)
    dz_o = dz[..., 3 * H :].unbind(0)
    dz_t, dc_dz_t, dh_dzo_t, o_dtanh_t, f_keep_t, keep_t = (
        v.unbind(0) for v in (dz, dc_dz, dh_dzo, o_dtanh, f_keep, k4)
    )
    d_hs_t = d_hs.unbind(0) if d_hs is not None else None
    d_cs_t = d_cs.unbind(0) if d_cs is not None else None
    # dh: gradient w.r.t. the output h_t from later steps and from d_hs[t] (summed below).
    dh = acts.new_zeros(K, B, H) if d_hs_t is None else d_hs_t[T - 1]
    dc = acts.new_zeros(K, B, H)
    for t in range(T - 1, -1, -1):
        if d_cs_t is not None:
            dc = dc + d_cs_t[t]
        dc_t = torch.addcmul(dc, dh, o_dtanh_t[t])
        torch.mul(dc_t.unsqueeze(2), dc_dz_t[t], out=dz_ifg[t])
        torch.mul(dh, dh_dzo_t[t], out=dz_o[t])
        if d_hs_t is None or resets[t] or t == 0:
            dh = torch.bmm(dz_t[t], w_hh)
            if resets[t]:
                dh = dh * keep_t[t]
            if d_hs_t is not None and t > 0:
                dh = dh + d_hs_t[t - 1]
        else:  # the next step's output gradient folded into the matmul
            dh = torch.baddbmm(d_hs_t[t - 1], dz_t[t], w_hh)
        dc = dc_t * f_keep_t[t]
    return dz, dh, dc


class _MaskedLSTMRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,  # FunctionCtx plus ``resets`` (None: the C kernel ran), reused by backward
        xproj: Tensor,
        w_hh: Tensor,
        h0: Tensor,
        c0: Tensor,
        keep: Tensor,
    ) -> tuple[Tensor, Tensor]:
        if native_applies(xproj):
            resets = None
            hs, cs, acts, tanh_c = _native_forward(xproj, w_hh, h0, c0, keep)
        else:
            resets = _resets(keep)
            hs, cs, acts_, tanh_c_ = _recurrence(xproj, w_hh, h0, c0, keep, resets, save=True)
            assert acts_ is not None and tanh_c_ is not None
            acts, tanh_c = acts_, tanh_c_
        ctx.save_for_backward(hs, cs, acts, tanh_c, h0, c0, w_hh, keep)
        ctx.resets = resets
        ctx.mark_non_differentiable(keep)
        ctx.set_materialize_grads(False)  # unused outputs (usually ``cs``) get None, not zeros
        return hs, cs

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, d_hs: Tensor | None, d_cs: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, None]:
        saved = _Saved(*ctx.saved_tensors)
        if ctx.resets is None:
            dz, dh, dc, dw = _native_backward(saved, d_hs, d_cs)
            return dz, dw, dh, dc, None
        dz, dh, dc = _python_backward(saved, ctx.resets, d_hs, d_cs)
        return dz, _weight_grad(saved, dz), dh, dc, None


# The C kernel as custom ops, for torch.compile: one opaque call each way, with the backward
# registered, instead of the unrolled recurrence that autograd would differentiate step by step.
# Inductor's on-disk caches (shared by every process and riskppo version of a user) key a graph on
# its ops' names only, not on their fake functions or registered backward: a compiled backward
# cached by another version of this file would call that version's ops. The names therefore carry
# a digest of this file, so that any change to it compiles afresh.
_OPS_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


@torch.library.custom_op(f"riskppo::lstm_recurrence_{_OPS_VERSION}", mutates_args=())
def _lstm_op(
    xproj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`_native_forward`: ``hs, cs, acts, tanh_c``."""
    return _native_forward(xproj, w_hh, h0, c0, keep)


@_lstm_op.register_fake
def _(xproj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor) -> tuple[Tensor, ...]:
    T, K, B, G = xproj.shape
    hs, cs, tanh_c = (xproj.new_empty(T, K, B, G // 4) for _ in range(3))
    return hs, cs, xproj.new_empty(T, K, B, G), tanh_c


@torch.library.custom_op(f"riskppo::lstm_recurrence_grad_{_OPS_VERSION}", mutates_args=())
def _lstm_backward_op(
    hs: Tensor, cs: Tensor, acts: Tensor, tanh_c: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor,
    keep: Tensor, d_hs: Tensor, d_cs: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """:func:`_native_backward` of the :class:`_Saved` fields: ``dz`` as the contiguous
    ``[T, B, K, 4H]`` tensor it is written into (an op returns no views), ``dh0``, ``dc0``,
    ``d_w_hh``."""
    saved = _Saved(hs, cs, acts, tanh_c, h0, c0, w_hh, keep)
    dz, dh0, dc0, dw = _native_backward(saved, d_hs, d_cs)
    return dz.transpose(1, 2), dh0, dc0, dw


@_lstm_backward_op.register_fake
def _(hs: Tensor, cs: Tensor, acts: Tensor, *_: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    T, K, B, G = acts.shape
    state = hs.shape[1:]
    return (
        acts.new_empty(T, B, K, G),
        hs.new_empty(state),
        hs.new_empty(state),
        acts.new_empty(K, G, G // 4),
    )


def _op_setup(ctx: Any, inputs: tuple[Tensor, ...], output: tuple[Tensor, ...]) -> None:
    _, w_hh, h0, c0, keep = inputs
    hs, cs, acts, tanh_c = output
    ctx.save_for_backward(hs, cs, acts, tanh_c, h0, c0, w_hh, keep)


def _op_backward(ctx: Any, d_hs: Tensor, d_cs: Tensor, *_: Tensor) -> tuple[Tensor | None, ...]:
    s = _Saved(*ctx.saved_tensors)
    dz_tbkg, dh0, dc0, dw = _lstm_backward_op(*s, d_hs, d_cs)
    dz = dz_tbkg.transpose(1, 2)  # [T, K, B, 4H] in the input projection's layout (run_lstms)
    return dz, dw, dh0, dc0, None


_lstm_op.register_autograd(_op_backward, setup_context=_op_setup)


def masked_lstm_recurrence(
    xproj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor]:
    """Run ``K`` LSTM recurrences with per-step state masking.

    Args:
        xproj: ``[T, K, B, 4H]`` input projections ``x W_ihᵀ + b_ih + b_hh`` per group.
        w_hh: ``[K, 4H, H]`` recurrent weights per group.
        h0, c0: ``[K, B, H]`` states entering step 0 (before the step-0 mask).
        keep: ``[T, B]`` 1 to keep the state entering step t, 0 to reset it (episode start).

    Returns:
        ``(hs, cs)``: ``[T, K, B, H]`` hidden and cell states after every step.
    """
    keep = keep.to(xproj.dtype)
    _check_args(xproj, w_hh, h0, c0, keep)
    if torch.compiler.is_compiling():  # under torch.compile (riskppo.algo.compiled)
        if native_applies(xproj):
            hs, cs, _, _ = _lstm_op(xproj, w_hh, h0, c0, keep)
            return hs, cs
        return unrolled_recurrence(xproj, w_hh, h0, c0, keep)
    if torch.is_grad_enabled() and any(x.requires_grad for x in (xproj, w_hh, h0, c0)):
        out: tuple[Tensor, Tensor] = _MaskedLSTMRecurrence.apply(xproj, w_hh, h0, c0, keep)
        return out
    if native_applies(xproj):
        hs, cs, _, _ = _native_forward(xproj, w_hh, h0, c0, keep)
    else:
        hs, cs, _, _ = _recurrence(xproj, w_hh, h0, c0, keep, _resets(keep), save=False)
    return hs, cs


def _check_args(xproj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor) -> None:
    """The shapes, dtype and device of :func:`masked_lstm_recurrence`'s arguments: one
    ``ValueError`` naming the argument, the same on the C and the PyTorch path."""
    where = "masked_lstm_recurrence"
    if xproj.dim() != 4 or xproj.shape[-1] % 4:
        raise ValueError(f"{where}: xproj has shape {list(xproj.shape)}, expected [T, K, B, 4H]")
    T, K, B, G = xproj.shape
    H = G // 4
    for name, x, dims, shape in (
        ("w_hh", w_hh, "[K, 4H, H]", (K, G, H)),
        ("h0", h0, "[K, B, H]", (K, B, H)),
        ("c0", c0, "[K, B, H]", (K, B, H)),
        ("keep", keep, "[T, B]", (T, B)),
    ):
        check(where, name, x, dims, shape, layout="any", dtype=xproj.dtype, device=xproj.device)


def unrolled_recurrence(
    xproj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor]:
    """:func:`masked_lstm_recurrence` as plain differentiable ops unrolled over ``T`` (no host
    sync, no in-place writes): what ``torch.compile`` traces, autograd differentiates and
    inductor fuses. Equal to the kernel up to float rounding."""
    T = xproj.shape[0]
    w_t = w_hh.transpose(1, 2)  # [K, H, 4H]
    h, c = h0, c0
    hs, cs = [], []
    for t in range(T):
        k = keep[t].view(1, -1, 1)
        h, c = h * k, c * k
        i, f, g, o = torch.baddbmm(xproj[t], h, w_t).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        hs.append(h)
        cs.append(c)
    return torch.stack(hs), torch.stack(cs)
