"""The rollout's actor step in one C call: LSTM step, MLP, action head, the sampled action and
its log-probability (``riskppo_actor_step`` and ``riskppo_actor_step_gauss`` in
``riskppo/nn/native/actor_step.c``).

Why: a step of 8 envs is ~20 PyTorch ops on ``[8, 64]`` tensors, each costing more in dispatch
than in arithmetic; in C it is one call. It serves the common actor — float32 on the CPU, a
one-layer LSTM, an MLP of ``Linear`` layers with one activation (tanh or ReLU), a ``Discrete``
action (categorical head) or a ``Box`` action (diagonal Gaussian head, its log-std a parameter or
a clamped linear layer of the latent) — where no gradient is asked for (the rollout runs in
inference mode); anything else takes the PyTorch step (:func:`~riskppo.nn.recurrent.fused_lstm_step`
and the module-free MLP of :class:`~riskppo.nn.policy.RolloutActor`), which stays the reference.

Same results as that step to float rounding: the same random numbers from the same generator in
the same order (:func:`~riskppo.nn.distributions.categorical_uniforms`, the inverse-CDF rule;
:func:`~riskppo.nn.distributions.gaussian_noise`, ``mean + noise * exp(log_std)``), the same
log-probability formulas; only the matmuls' summation order and the exp/log/tanh approximations
differ (tested against float64). Box actions are returned unclipped, as the PyTorch step returns
them: the rollout clips only what the env receives (``env_actions``, as SB3 does) and keeps the
sampled action and its log-probability.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from riskppo.nn import native
from riskppo.nn.c_args import check
from riskppo.nn.distributions import ActionHead, categorical_uniforms, gaussian_noise
from riskppo.nn.lstm_kernel import native_applies
from riskppo.nn.recurrent import LSTMState

__all__ = ["CActorStep", "GaussianHead"]

_ACT_CODES = {nn.Tanh: 1, nn.ReLU: 2}  # riskppo_actor_step's `act`
_WHERE = "the C actor step"


class GaussianHead(NamedTuple):
    """The log-std of a diagonal Gaussian head (:class:`~riskppo.nn.distributions.ActionHead`
    on a ``Box``) as C reads it: exactly one of the two is given."""

    log_std: Tensor | None  # [A]: the state-independent parameter
    std_layer: tuple[Tensor, Tensor] | None  # weight [F, A], bias [A]: of the head's input

    @staticmethod
    def of(head: ActionHead) -> GaussianHead:
        """The log-std of ``head`` (a ``Box`` head), detached: the state-dependent layer's
        weight transposed to ``[F, A]``, or the parameter."""
        layer = head.log_std_layer
        if layer is not None:
            return GaussianHead(None, (layer.weight.detach().t(), layer.bias.detach()))
        assert head.log_std is not None
        return GaussianHead(head.log_std.detach(), None)

    def tensors(self) -> list[Tensor]:
        """The tensors given (the parameter, or the layer's weight and bias)."""
        return [self.log_std] if self.log_std is not None else [*(self.std_layer or ())]


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
    H = dims[0]
    check(_WHERE, "LSTM step weight", w, "[D + H, 4H]", (w.shape[0], 4 * H))
    check(_WHERE, "LSTM step bias", b, "[4H]", (4 * H,))
    for layer, (wt, bias) in enumerate(zip(ws, bs)):
        n_in, n_out = dims[layer], dims[layer + 1]
        check(_WHERE, f"layer {layer} weight", wt, f"[{n_in}, {n_out}]", (n_in, n_out))
        check(_WHERE, f"layer {layer} bias", bias, f"[{n_out}]", (n_out,))


def _gaussian_pointers(gauss: GaussianHead, dims: list[int]) -> tuple[list[Tensor], list[int]]:
    """The Gaussian head's tensors (dense copies where needed, checked against the head's
    ``A = dims[-1]`` outputs and ``F = dims[-2]`` inputs) and the pointers ``log_std``,
    ``w_std``, ``b_std`` of ``riskppo_actor_step_gauss`` (0: NULL)."""
    A, F = dims[-1], dims[-2]
    if (gauss.log_std is None) == (gauss.std_layer is None):
        raise ValueError(f"{_WHERE}: a Gaussian head takes exactly one of log_std and std_layer")
    if gauss.log_std is not None:
        log_std = gauss.log_std.contiguous()
        check(_WHERE, "log_std", log_std, "[A]", (A,))
        return [log_std], [log_std.data_ptr(), 0, 0]
    assert gauss.std_layer is not None
    w, b = (t.contiguous() for t in gauss.std_layer)
    check(_WHERE, "log-std layer weight", w, "[F, A]", (F, A))
    check(_WHERE, "log-std layer bias", b, "[A]", (A,))
    return [w, b], [0, w.data_ptr(), b.data_ptr()]


class CActorStep:
    """The C actor step for one rollout's weights (a snapshot, like
    :meth:`~riskppo.nn.recurrent.MaskedLSTM.step_weights`). Build with :meth:`build`.
    ``gauss`` None: a categorical head (``linears[-1]`` gives the logits); else a diagonal
    Gaussian head (``linears[-1]`` gives the mean) with this log-std."""

    def __init__(
        self,
        lstm: tuple[Tensor, Tensor],
        linears: list[tuple[Tensor, Tensor]],
        act: int,
        gauss: GaussianHead | None = None,
    ) -> None:
        w, b = (t.contiguous() for t in lstm)
        self.H = w.shape[1] // 4
        self.D = w.shape[0] - self.H
        ws = [wt.contiguous() for wt, _ in linears]
        bs = [bias.contiguous() for _, bias in linears]
        dims = [self.H, *(wt.shape[1] for wt in ws)]
        _check_weights(w, b, ws, bs, dims)
        head, self._head = ([], []) if gauss is None else _gaussian_pointers(gauss, dims)
        self._alive = [w, b, *ws, *bs, *head]  # C reads these through the pointers below
        self._lstm = (w.data_ptr(), b.data_ptr(), w[self.D :].data_ptr())  # w_in, b_in, w_t
        self.n_layers = len(linears)
        self.A = dims[-1]
        self._dims = (ctypes.c_int * len(dims))(*dims)
        self._ws = (ctypes.c_void_p * len(ws))(*(t.data_ptr() for t in ws))
        self._bs = (ctypes.c_void_p * len(bs))(*(t.data_ptr() for t in bs))
        self.act = act
        self.gaussian = gauss is not None
        lib = native.kernel()
        assert lib is not None  # the step is built only where native_applies
        self._c_step = lib.riskppo_actor_step_gauss if self.gaussian else lib.riskppo_actor_step

    @staticmethod
    def build(
        step_weights: list[tuple[Tensor, Tensor]], mlp: nn.Sequential, head: ActionHead
    ) -> CActorStep | None:
        """The C step for this actor, or None where it does not apply (see the module doc)."""
        act = _mlp_activation(mlp)
        if head.kind == "multidiscrete" or len(step_weights) != 1 or act is None:
            return None
        if not native_applies(step_weights[0][0]):
            return None
        layers = [*(m for m in mlp if isinstance(m, nn.Linear)), head.net]
        linears = [(m.weight.detach().t(), m.bias.detach()) for m in layers]
        gauss = None if head.kind == "discrete" else GaussianHead.of(head)
        params = [t for wb in linears for t in wb] + (gauss.tensors() if gauss else [])
        if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in params):
            return None
        return CActorStep(step_weights[0], linears, act, gauss)

    def __call__(
        self,
        obs: Tensor,
        state: LSTMState,
        episode_start: Tensor | np.ndarray,
        generator: torch.Generator | None,
        deterministic: bool,
    ) -> tuple[Tensor, Tensor, LSTMState]:
        """``obs`` ``[B, D]`` float32 → actions (categorical: ``[B]`` int64; Gaussian: ``[B, A]``
        float32, unclipped), their log-probabilities ``[B]`` and the LSTM state after the step
        (``[1, B, H]`` each). Deterministic: the most likely action (argmax; the mean)."""
        B = obs.shape[0]
        keep = _keep(episode_start)  # C resets the state where an episode starts
        x, h, c = (t.contiguous() for t in (obs, state.h, state.c))  # alive until C returns
        check(_WHERE, "obs", x, "[B, D]", (B, self.D))
        check(_WHERE, "state.h", h, "[1, B, H]", (1, B, self.H))
        check(_WHERE, "state.c", c, "[1, B, H]", (1, B, self.H))
        if keep is not None:
            check(_WHERE, "episode_start", keep, "[B]", (B,))
        hc = x.new_empty(2, 1, B, self.H)
        log_prob = x.new_empty(B)
        actions = x.new_empty(B, self.A) if self.gaussian else torch.empty(B, dtype=torch.int64)
        draws = None if deterministic else self._draws(B, generator)
        status = self._c_step(
            B, self.D, self.H, x.data_ptr(), *self._lstm, h.data_ptr(), c.data_ptr(),
            None if keep is None else keep.data_ptr(), hc.data_ptr(), self.n_layers, self._dims,
            self._ws, self._bs, self.act, *self._head,
            None if draws is None else draws.data_ptr(), actions.data_ptr(), log_prob.data_ptr(),
        )  # fmt: skip
        if status != 0:
            raise MemoryError("the C actor step could not allocate its scratch memory")
        return actions, log_prob, LSTMState(*hc.unbind(0))

    def _draws(self, B: int, generator: torch.Generator | None) -> Tensor:
        """The random numbers the PyTorch step draws for ``B`` rows, in its order: for the
        Gaussian head the normals ``[B, A]``, for the categorical head the uniforms ``[B, 1]``."""
        cpu = torch.device("cpu")
        if self.gaussian:
            eps = gaussian_noise((B, self.A), generator, torch.float32, cpu)
            check(_WHERE, "eps", eps, "[B, A]", (B, self.A))
            return eps
        u = categorical_uniforms((B,), generator, torch.float32, cpu)
        check(_WHERE, "u", u, "[B, 1]", (B, 1))
        return u


def _keep(episode_start: Tensor | np.ndarray) -> Tensor | None:
    """``[B]`` float32: 0 where an episode starts (the state entering the step is reset), else 1;
    None where none starts (a NumPy ``episode_start`` decides that without a tensor op)."""
    if not episode_start.any():
        return None
    if isinstance(episode_start, np.ndarray):
        return torch.from_numpy(np.logical_not(episode_start).astype(np.float32))
    return torch.logical_not(episode_start.reshape(-1)).to("cpu", torch.float32)
