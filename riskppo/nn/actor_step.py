"""The rollout's actor step in one C call: LSTM step, MLP, action head, categorical
sample and its log-probability (:func:`riskppo_actor_step` in ``riskppo/nn/native/lstm.c``).

Why: a step of 8 CartPole envs is ~20 PyTorch ops on ``[8, 64]`` tensors, each costing more
in dispatch than in arithmetic; in C it is one call. It serves the common actor — float32 on the
CPU, a one-layer LSTM, an MLP of ``Linear`` layers with one activation (tanh or ReLU), a
``Discrete`` action — where no gradient is asked for (the rollout runs in inference mode);
anything else takes the PyTorch step (:func:`~riskppo.nn.recurrent.fused_lstm_step` and the
module-free MLP of :class:`~riskppo.nn.policy.RolloutActor`), which stays the reference.

Same results as that step to float rounding: the same uniforms from the same generator
(:func:`~riskppo.nn.distributions.categorical_uniforms`), the same inverse-CDF rule; only the
matmuls' summation order and the exp/log/tanh approximations differ (tested against float64).
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch
from torch import Tensor, nn

from riskppo.nn import native
from riskppo.nn.c_args import check
from riskppo.nn.distributions import categorical_uniforms
from riskppo.nn.lstm_kernel import native_applies
from riskppo.nn.recurrent import LSTMState, reset_where_starting

__all__ = ["CActorStep"]

_ACT_CODES = {nn.Tanh: 1, nn.ReLU: 2}  # riskppo_actor_step's `act`


def _mlp_activation(mlp: nn.Sequential) -> int | None:
    """The C code of the one activation between the ``Linear`` layers of ``mlp`` (``Linear``,
    activation, ``Linear``, activation, ...), or None when the C step does not cover it."""
    layers = list(mlp)
    linears, acts = layers[0::2], layers[1::2]
    if len(acts) != len(linears) or not all(isinstance(m, nn.Linear) for m in linears):
        return None
    codes = {_ACT_CODES.get(type(m)) for m in acts}
    if None in codes or len(codes) > 1:
        return None
    return codes.pop() if codes else 1  # no hidden layer: the code is not used


def _check_weights(
    w: Tensor, b: Tensor, ws: list[Tensor], bs: list[Tensor], dims: list[int]
) -> None:
    """The weights as ``riskppo_actor_step`` reads them: the fused LSTM step's ``w``
    ``[D + H, 4H]`` and ``b`` ``[4H]``, then per linear layer ``l`` its ``[dims[l], dims[l + 1]]``
    weight and ``[dims[l + 1]]`` bias (``dims[0] = H``), all float32, CPU, contiguous."""
    where, H = "the C actor step", dims[0]
    check(where, "LSTM step weight", w, "[D + H, 4H]", (w.shape[0], 4 * H))
    check(where, "LSTM step bias", b, "[4H]", (4 * H,))
    for layer, (wt, bias) in enumerate(zip(ws, bs)):
        n_in, n_out = dims[layer], dims[layer + 1]
        check(where, f"layer {layer} weight", wt, f"[{n_in}, {n_out}]", (n_in, n_out))
        check(where, f"layer {layer} bias", bias, f"[{n_out}]", (n_out,))


class CActorStep:
    """The C actor step for one rollout's weights (a snapshot, like
    :meth:`~riskppo.nn.recurrent.MaskedLSTM.step_weights`). Build with :meth:`build`."""

    def __init__(
        self, lstm: tuple[Tensor, Tensor], linears: list[tuple[Tensor, Tensor]], act: int
    ) -> None:
        w, b = (t.contiguous() for t in lstm)
        self.H = w.shape[1] // 4
        self.D = w.shape[0] - self.H
        ws = [wt.contiguous() for wt, _ in linears]
        bs = [bias.contiguous() for _, bias in linears]
        dims = [self.H, *(wt.shape[1] for wt in ws)]
        _check_weights(w, b, ws, bs, dims)
        self._alive = [w, b, *ws, *bs]  # C reads these through the pointers below
        self._lstm = (w.data_ptr(), b.data_ptr(), w[self.D :].data_ptr())  # w_in, b_in, w_t
        self.n_layers = len(linears)
        self._dims = (ctypes.c_int * len(dims))(*dims)
        self._ws = (ctypes.c_void_p * len(ws))(*(t.data_ptr() for t in ws))
        self._bs = (ctypes.c_void_p * len(bs))(*(t.data_ptr() for t in bs))
        self.act = act

    @staticmethod
    def build(
        step_weights: list[tuple[Tensor, Tensor]], mlp: nn.Sequential, head: nn.Linear
    ) -> CActorStep | None:
        """The C step for this actor, or None where it does not apply (see the module doc)."""
        act = _mlp_activation(mlp)
        if len(step_weights) != 1 or act is None or not native_applies(step_weights[0][0]):
            return None
        linears = [(m.weight.t(), m.bias) for m in mlp if isinstance(m, nn.Linear)]
        linears.append((head.weight.t(), head.bias))
        params = [t for wb in linears for t in wb]
        if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in params):
            return None
        return CActorStep(step_weights[0], [(w.detach(), b.detach()) for w, b in linears], act)

    def __call__(
        self,
        obs: Tensor,
        state: LSTMState,
        episode_start: Tensor | np.ndarray,
        generator: torch.Generator | None,
        deterministic: bool,
    ) -> tuple[Tensor, Tensor, LSTMState]:
        """``obs`` ``[B, D]`` float32 → actions ``[B]`` (int64), their log-probabilities ``[B]``
        and the LSTM state after the step (``[1, B, H]`` each)."""
        B = obs.shape[0]
        h0, c0 = reset_where_starting(state, episode_start)
        x, h, c = (t.contiguous() for t in (obs, h0, c0))  # alive until the call returns
        where = "the C actor step"
        check(where, "obs", x, "[B, D]", (B, self.D))
        check(where, "state.h", h, "[1, B, H]", (1, B, self.H))
        check(where, "state.c", c, "[1, B, H]", (1, B, self.H))
        hc = x.new_empty(2, 1, B, self.H)
        log_prob = x.new_empty(B)
        actions = torch.empty(B, dtype=torch.int64)
        u = None if deterministic else categorical_uniforms((B,), generator, x.dtype, x.device)
        if u is not None:
            check(where, "u", u, "[B, 1]", (B, 1))
        lib = native.kernel()
        assert lib is not None
        status = lib.riskppo_actor_step(
            B, self.D, self.H, x.data_ptr(), *self._lstm, h.data_ptr(),
            c.data_ptr(), hc.data_ptr(), self.n_layers, self._dims, self._ws, self._bs, self.act,
            None if u is None else u.data_ptr(), actions.data_ptr(), log_prob.data_ptr(),
        )  # fmt: skip
        if status != 0:
            raise MemoryError("the C actor step could not allocate its scratch memory")
        return actions, log_prob, LSTMState(hc[0], hc[1])
