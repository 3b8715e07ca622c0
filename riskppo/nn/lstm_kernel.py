"""A fused, masked LSTM recurrence for ``K`` independent LSTMs at once (R-ALG-1, R-ALG-15).

Why: PyTorch's CPU LSTM records several autograd nodes per time step, and resetting the state at
episode starts forces the sequence to be cut into pieces. Here the recurrence of ``K`` LSTMs
(e.g. the actor's and both critics', which all read the same observations) runs in one loop of
batched ops, the episode-start mask is applied inside the loop, and the backward pass is written
by hand (one loop, gradients of the weights as single matmuls at the end). Each LSTM keeps its
own parameters; nothing is shared between the ``K`` groups.

Gate layout follows ``torch.nn.LSTM``: ``[i, f, g, o]``. Per step ``t`` and group ``k``::

    h', c' = keep_t · h_{t-1}, keep_t · c_{t-1}        (reset where an episode starts)
    z      = xproj_t + h' W_hhᵀ                        (xproj = x W_ihᵀ + b_ih + b_hh)
    i,f,o  = σ(z_i), σ(z_f), σ(z_o);  g = tanh(z_g)
    c_t    = f ⊙ c' + i ⊙ g;          h_t = o ⊙ tanh(c_t)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable


class _MaskedLSTMRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx,
        xproj: Tensor,
        w_hh: Tensor,
        h0: Tensor,
        c0: Tensor,
        keep: Tensor,
    ) -> tuple[Tensor, Tensor]:
        K, T, B, G = xproj.shape
        H = G // 4
        w_t = w_hh.transpose(1, 2)  # [K, H, 4H]
        acts = xproj.new_empty(K, T, B, G)
        hs = xproj.new_empty(K, T, B, H)
        cs = xproj.new_empty(K, T, B, H)
        h_prev_m = xproj.new_empty(K, T, B, H)
        c_prev_m = xproj.new_empty(K, T, B, H)
        h, c = h0, c0
        for t in range(T):
            k = keep[t].view(1, B, 1)
            h = h * k
            c = c * k
            h_prev_m[:, t] = h
            c_prev_m[:, t] = c
            z = torch.baddbmm(xproj[:, t], h, w_t)
            a = torch.sigmoid(z)
            a[..., 2 * H : 3 * H] = torch.tanh(z[..., 2 * H : 3 * H])
            i, f, g, o = a.split(H, dim=-1)
            c = torch.addcmul(f * c, i, g)
            h = o * torch.tanh(c)
            acts[:, t] = a
            hs[:, t] = h
            cs[:, t] = c
        ctx.save_for_backward(acts, cs, h_prev_m, c_prev_m, w_hh, keep)
        ctx.mark_non_differentiable(keep)
        return hs, cs

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: Any, d_hs: Tensor | None, d_cs: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, None]:
        acts, cs, h_prev_m, c_prev_m, w_hh, keep = ctx.saved_tensors
        K, T, B, G = acts.shape
        H = G // 4
        i, f, g, o = acts.split(H, dim=-1)
        tanh_c = torch.tanh(cs)
        # Derivatives of the activations w.r.t. their pre-activations, for all steps at once.
        d_act = torch.cat([i * (1 - i), f * (1 - f), 1 - g * g, o * (1 - o)], dim=-1)
        dz = acts.new_empty(K, T, B, G)
        dh = acts.new_zeros(K, B, H)
        dc = acts.new_zeros(K, B, H)
        for t in range(T - 1, -1, -1):
            dh_t = dh if d_hs is None else dh + d_hs[:, t]
            dc_t = dc if d_cs is None else dc + d_cs[:, t]
            dc_t = dc_t + dh_t * o[:, t] * (1 - tanh_c[:, t] * tanh_c[:, t])
            da = torch.cat(
                [dc_t * g[:, t], dc_t * c_prev_m[:, t], dc_t * i[:, t], dh_t * tanh_c[:, t]],
                dim=-1,
            )
            dz_t = da * d_act[:, t]
            dz[:, t] = dz_t
            k = keep[t].view(1, B, 1)
            dh = torch.bmm(dz_t, w_hh) * k
            dc = dc_t * f[:, t] * k
        d_w_hh = torch.bmm(dz.reshape(K, T * B, G).transpose(1, 2), h_prev_m.reshape(K, T * B, H))
        return dz, d_w_hh, dh, dc, None


def masked_lstm_recurrence(
    xproj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor]:
    """Run ``K`` LSTM recurrences with per-step state masking.

    Args:
        xproj: ``[K, T, B, 4H]`` input projections ``x W_ihᵀ + b_ih + b_hh`` per group.
        w_hh: ``[K, 4H, H]`` recurrent weights per group.
        h0, c0: ``[K, B, H]`` states entering step 0 (before the step-0 mask).
        keep: ``[T, B]`` 1 to keep the state entering step t, 0 to reset it (episode start).

    Returns:
        ``(hs, cs)``: ``[K, T, B, H]`` hidden and cell states after every step.
    """
    keep = keep.to(xproj.dtype)
    if torch.is_grad_enabled() and any(
        x.requires_grad for x in (xproj, w_hh, h0, c0)
    ):
        out: tuple[Tensor, Tensor] = _MaskedLSTMRecurrence.apply(xproj, w_hh, h0, c0, keep)  # type: ignore[no-untyped-call]
        return out
    return _forward_only(xproj, w_hh, h0, c0, keep)


def _forward_only(
    xproj: Tensor, w_hh: Tensor, h0: Tensor, c0: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor]:
    """Same recurrence without saving anything for backward (rollouts, evaluation)."""
    K, T, B, G = xproj.shape
    H = G // 4
    w_t = w_hh.transpose(1, 2)
    hs = xproj.new_empty(K, T, B, H)
    cs = xproj.new_empty(K, T, B, H)
    h, c = h0, c0
    for t in range(T):
        k = keep[t].view(1, B, 1)
        z = torch.baddbmm(xproj[:, t], h * k, w_t)
        a = torch.sigmoid(z)
        a[..., 2 * H : 3 * H] = torch.tanh(z[..., 2 * H : 3 * H])
        i, f, g, o = a.split(H, dim=-1)
        c = torch.addcmul(f * (c * k), i, g)
        h = o * torch.tanh(c)
        hs[:, t] = h
        cs[:, t] = c
    return hs, cs
