"""LSTM with per-step episode-start masking, done inside the module (R-ALG-1).

The state entering step ``t`` is multiplied by ``1 - episode_start[t]`` before the cell runs, so a
replay of a stored sequence that crosses episode boundaries reproduces the rollout exactly.

For speed (R-ALG-15) the recurrence of several LSTMs that read the same input (actor and critics)
runs as one fused loop with a hand-written backward (:mod:`riskppo.nn.lstm_kernel`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from riskppo.nn.lstm_kernel import (
    _gate_scale,
    masked_lstm_recurrence,
    native_applies,
    native_step,
)
from riskppo.nn.lstm_layer import lstm_layer


class LSTMState(NamedTuple):
    """Recurrent state of one LSTM: ``h`` and ``c`` are ``[n_layers, batch, hidden]``."""

    h: Tensor
    c: Tensor

    def select(self, idx: Tensor | slice) -> LSTMState:
        """Select batch entries (dim 1)."""
        if isinstance(idx, Tensor):
            return LSTMState(self.h.index_select(1, idx), self.c.index_select(1, idx))
        return LSTMState(self.h[:, idx], self.c[:, idx])

    def reset(self, starts: Tensor) -> LSTMState:
        """Zero the entries where ``starts`` (``[batch]``, bool or 0/1) marks an episode start."""
        mask = starts.view(1, -1, 1).bool()
        return LSTMState(self.h.masked_fill(mask, 0.0), self.c.masked_fill(mask, 0.0))


class MaskedLSTM(nn.Module):
    """Time-major LSTM whose state is reset where ``episode_starts`` is 1.

    Parameters follow ``torch.nn.LSTM`` (names, gate order ``[i, f, g, o]``, uniform init in
    ``±1/sqrt(H)``); the recurrence runs in :mod:`riskppo.nn.lstm_kernel`. Shapes: ``x``
    ``[T, B, in]``, ``episode_starts`` ``[T, B]``, state :class:`LSTMState` ``[L, B, H]``.
    """

    def __init__(self, input_size: int, hidden_size: int, n_layers: int = 1) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.n_layers = n_layers
        bound = 1.0 / math.sqrt(hidden_size)
        for layer in range(n_layers):
            in_size = input_size if layer == 0 else hidden_size
            for name, shape in [
                (f"weight_ih_l{layer}", (4 * hidden_size, in_size)),
                (f"weight_hh_l{layer}", (4 * hidden_size, hidden_size)),
                (f"bias_ih_l{layer}", (4 * hidden_size,)),
                (f"bias_hh_l{layer}", (4 * hidden_size,)),
            ]:
                self.register_parameter(
                    name, nn.Parameter(torch.empty(shape).uniform_(-bound, bound))
                )

    def layer_params(self, layer: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(W_ih [4H, in], W_hh [4H, H], b [4H])`` of one layer (both biases summed)."""
        w_ih: Tensor = getattr(self, f"weight_ih_l{layer}")
        w_hh: Tensor = getattr(self, f"weight_hh_l{layer}")
        bias = getattr(self, f"bias_ih_l{layer}") + getattr(self, f"bias_hh_l{layer}")
        return w_ih, w_hh, bias

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
        """Run the sequence and return ``(out, final_state, captured)`` (see :func:`run_lstms`)."""
        return run_lstms([self], x, [state], episode_starts, capture)[0]

    def step_weights(self) -> list[tuple[Tensor, Tensor]]:
        """Per layer ``(W [in + H, 4H], b [4H])`` for :func:`fused_lstm_step`: ``[W_ih, W_hh]ᵀ``
        stacked so one matmul covers input and state, both biases summed, the ``g`` gate doubled
        (``tanh(z) = 2σ(2z) − 1``: one ``sigmoid`` for all gates, as in the sequence kernel).

        A snapshot: take it once per rollout (the weights do not change during one)."""
        scale = None
        out = []
        for layer in range(self.n_layers):
            w_ih, w_hh, bias = self.layer_params(layer)
            if scale is None:
                scale = _gate_scale(bias, self.hidden_size)
            w = torch.cat([w_ih, w_hh], dim=1).T * scale
            out.append((w.contiguous(), bias * scale))
        return out

    def step(
        self,
        x: Tensor,
        state: LSTMState,
        episode_start: Tensor | np.ndarray,
        weights: list[tuple[Tensor, Tensor]] | None = None,
    ) -> tuple[Tensor, LSTMState]:
        """One step for a batch: ``x`` ``[B, in]``, ``episode_start`` ``[B]`` → ``[B, H]``.

        The rollout hot path (:func:`fused_lstm_step`): one matmul per layer, the same gate
        equations as the sequence kernel (results agree to float rounding). ``weights``: a
        :meth:`step_weights` snapshot (taken now if not given); a NumPy ``episode_start``
        decides the reset without a tensor op.
        """
        return fused_lstm_step(
            self.step_weights() if weights is None else weights, x, state, episode_start
        )


def reset_where_starting(state: LSTMState, episode_start: Tensor | np.ndarray) -> LSTMState:
    """``state`` with the envs whose episode starts reset to zeros (R-ALG-15); ``state`` itself
    when none does (a NumPy ``episode_start`` decides that without a tensor op)."""
    if not episode_start.any():
        return state
    mask = episode_start
    if isinstance(mask, np.ndarray):
        mask = torch.from_numpy(mask).to(state.h.device)
    return state.reset(mask)


def fused_lstm_step(
    weights: list[tuple[Tensor, Tensor]],
    x: Tensor,
    state: LSTMState,
    episode_start: Tensor | np.ndarray,
) -> tuple[Tensor, LSTMState]:
    """One LSTM step from :meth:`MaskedLSTM.step_weights`. Float32 on the CPU without gradients:
    per layer the input part of the gates by one ``addmm``, the rest in C (:func:`native_step`,
    the sequence kernel's step). Otherwise per layer ``z = [x, h] W + b`` (one ``addmm``), ``σ``
    in place over all four gates, then the cell update of the sequence kernel
    (``c = (f ⊙ c' − i) + 2 i ⊙ s``, ``h = o ⊙ tanh c``). ``state`` is never modified."""
    h0, c0 = reset_where_starting(state, episode_start)
    H = h0.shape[-1]
    hs, cs = [], []
    inp = x
    # the C step has no backward: it runs where nothing asks for gradients (the rollout)
    needs_grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (x, h0, c0, *(t for wb in weights for t in wb))
    )
    in_c = native_applies(x) and not needs_grad
    for layer, (w, b) in enumerate(weights):
        if in_c:
            d = inp.shape[1]
            hc = native_step(torch.addmm(b, inp, w[:d]), w[d:], h0[layer], c0[layer])
            if len(weights) == 1:  # the rollout hot path: the state is hc's two halves
                return hc[0, 0], LSTMState(*hc.unbind(0))
            inp, c = hc[0, 0], hc[1, 0]
        else:
            z = torch.addmm(b, torch.cat([inp, h0[layer]], dim=1), w).sigmoid_()
            i, f, s, o = z.split(H, dim=1)
            c = torch.mul(f, c0[layer]).sub_(i).addcmul_(i, s, value=2.0)
            inp = torch.mul(o, torch.tanh(c))
        hs.append(inp)
        cs.append(c)
    if len(weights) == 1:  # a view instead of a one-element stack (the rollout hot path)
        return inp, LSTMState(inp.unsqueeze(0), cs[0].unsqueeze(0))
    return inp, LSTMState(torch.stack(hs), torch.stack(cs))


def run_lstms(
    lstms: Sequence[MaskedLSTM],
    x: Tensor,
    states: Sequence[LSTMState],
    episode_starts: Tensor,
    capture: Iterable[int] = (),
) -> list[tuple[Tensor, LSTMState, dict[int, LSTMState]]]:
    """Run several independent LSTMs over the same input sequence in one fused recurrence.

    Per LSTM returns ``(out [T, B, H], final_state, captured)`` where ``captured[t]`` is the
    state *entering* step ``t`` before the episode-start mask — the state after step ``t - 1``
    (``t == T`` gives the final state). Rollouts store such states as chunk initial states, and
    the time-limit bootstrap evaluates a truncated episode's final observation with them
    (R-ALG-6). All LSTMs must have the same hidden size and number of layers.
    """
    T, B = x.shape[:2]
    if episode_starts.shape != (T, B):
        raise ValueError(f"episode_starts shape {tuple(episode_starts.shape)} != x[:2] {(T, B)}")
    K = len(lstms)
    keep = 1.0 - episode_starts.to(x.dtype)
    layer_in: Tensor | None = None  # [T, K, B, H] input of layers > 0
    hs_layers, cs_layers = [], []
    for layer in range(lstms[0].n_layers):
        w_ih, w_hh, bias = zip(*(m.layer_params(layer) for m in lstms))
        h0 = torch.stack([s.h[layer] for s in states])
        c0 = torch.stack([s.c[layer] for s in states])
        if layer_in is None:  # a shared input: its projection inside the kernel (lstm_layer)
            hs, cs = lstm_layer(
                x, torch.stack(w_ih), torch.stack(bias), torch.stack(w_hh), h0, c0, keep
            )
        else:
            xproj = torch.matmul(
                layer_in.transpose(0, 1), torch.stack(w_ih).transpose(1, 2).unsqueeze(1)
            )
            xproj = (xproj + torch.stack(bias).view(K, 1, 1, -1)).transpose(0, 1).contiguous()
            hs, cs = masked_lstm_recurrence(xproj, torch.stack(w_hh), h0, c0, keep)
        hs_layers.append(hs)
        cs_layers.append(cs)
        layer_in = hs
    results = []
    for k, state in enumerate(states):
        captured = {}
        for t in capture:
            if t == 0:
                captured[0] = state
            else:
                captured[t] = _state_at(hs_layers, cs_layers, t - 1, k)
        results.append((hs_layers[-1][:, k], _state_at(hs_layers, cs_layers, T - 1, k), captured))
    return results


def _state_at(hs: list[Tensor], cs: list[Tensor], t: int, k: int) -> LSTMState:
    """State of LSTM ``k`` after step ``t`` from per-layer ``[T, K, B, H]`` trajectories."""
    return LSTMState(torch.stack([h[t, k] for h in hs]), torch.stack([c[t, k] for c in cs]))
