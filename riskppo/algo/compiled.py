"""The opt-in compiled minibatch loss (``compile: true``).

:func:`traced_minibatch_loss` is :func:`riskppo.algo.update.minibatch_loss` written without
host syncs or data-dependent Python branches, so ``torch.compile`` (inductor) captures the whole
forward — the LSTM recurrence (:func:`riskppo.nn.lstm_kernel.masked_lstm_recurrence`: the C
kernel as one custom op with its registered backward, or, without it, the recurrence unrolled
over the chunk), heads, PPO and value losses, the auxiliary terms that say they can be compiled
(:class:`~riskppo.algo.losses.LossTerm`: the risk head's, AWR, pathwise) — as one graph, and
AOTAutograd compiles its backward. It is the eager loss's own assembler
(:func:`riskppo.algo.losses.assemble`), traced; the batch goes in as its flat form
(:meth:`~riskppo.algo.buffer.ChunkBatch.flat`). The update loop is unchanged: it calls the
compiled function where it would call the eager one, then ``backward`` as before. On a CUDA
device both are replayed as CUDA graphs (inductor's ``reduce-overhead`` mode; ``cuda_graphs:
false`` turns that off): the loop reads the loss and stats of a minibatch before the next call,
as CUDA graphs require, since a replay reuses its outputs' memory.

What differs from eager, by float rounding only (the tests check losses and gradients to
``rtol=1e-4, atol=1e-5`` in float32 and the CartPole trajectory to ``atol=1e-4``):
inductor's fused kernels for the heads and losses (and the unrolled LSTM where the C kernel is
unavailable), and the risk head's loss as a masked mean instead of a mean over the selected
rows. The eager path stays the default and the reference.

Not compiled (the update runs eager, and the reason is logged once per model): a term whose
``not_compiled`` says why — the SA-PPO regulariser (its PGD inner loop takes ``autograd.grad``
and draws from a generator), BC from demonstration files or a teacher (chunks sampled with a
generator per minibatch) — and a compile that fails (e.g. no C++ compiler: the error is
logged). The first call pays the compile (``compile_seconds``); inductor's disk cache makes
later processes' compiles cheap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from riskppo.algo.buffer import ChunkBatch, Layout, Leaf
from riskppo.algo.losses import LossTerm, LossWeights, TracedContext, assemble
from riskppo.algo.terms import update_terms
from riskppo.algo.update import minibatch_loss
from riskppo.config import Config
from riskppo.nn.critics import Critic
from riskppo.nn.lstm_kernel import treat_native_check_as_constant
from riskppo.nn.policy import RecurrentActorCritic

__all__ = ["CompiledLoss", "compile_mode", "fallback_reason", "traced_minibatch_loss"]

log = logging.getLogger("riskppo")


def fallback_reason(ctx: Any, terms: list[tuple[LossTerm, float]]) -> str | None:
    """Why the update cannot use the compiled loss (None: it can): the first term of the update
    that the compiled loss cannot capture."""
    for term, _ in terms:
        reason = term.not_compiled(ctx)
        if reason is not None:
            return reason
    return None


def traced_minibatch_loss(
    cfg: Config,
    policy: RecurrentActorCritic,
    critic: Critic,
    mb: ChunkBatch,
    ent_coef: Tensor,
    terms: tuple[tuple[LossTerm, Tensor], ...],
) -> tuple[Tensor, dict[str, Tensor], Tensor]:
    """:func:`~riskppo.algo.update.minibatch_loss` without syncs: same loss and stats; the count
    of non-finite log-ratios as a 0-dim tensor; ``ent_coef`` and the terms' coefficients as 0-dim
    tensors so that their schedules do not recompile."""
    weights = LossWeights(cfg.ppo.vf_coef, ent_coef)
    ctx = TracedContext(cfg, policy)
    return assemble(cfg, policy, critic, mb, weights, terms, traced=True, ctx=ctx)


def _traced(
    policy: RecurrentActorCritic,
    critic: Critic,
    cfg: Config,
    terms: tuple[LossTerm, ...],
    layout: Layout,
    ent_coef: Tensor,
    coefs: tuple[Tensor, ...],
    *xs: Leaf,
) -> tuple[Tensor, dict[str, Tensor], Tensor]:
    mb = ChunkBatch.from_flat(xs, layout)
    return traced_minibatch_loss(cfg, policy, critic, mb, ent_coef, tuple(zip(terms, coefs)))


_COMPILED: dict[str, Callable[..., Any]] = {}  # torch.compile(_traced) per mode, on first use


def _compiled(mode: str) -> Callable[..., Any]:
    if mode not in _COMPILED:
        treat_native_check_as_constant()
        _COMPILED[mode] = torch.compile(_traced, mode=mode, dynamic=False)
    return _COMPILED[mode]


def compile_mode(cfg: Config, device: torch.device) -> str:
    """Inductor's mode: ``reduce-overhead`` (CUDA graphs) on a CUDA device unless
    ``cuda_graphs: false`` or gradients are accumulated over micro-batches, else ``default``.
    (A replay reuses its outputs' memory, and a parameter's first gradient *is* the backward's
    output: a second micro-batch would overwrite the gradient it accumulates into.)"""
    graphs = device.type == "cuda" and cfg.cuda_graphs and cfg.ppo.grad_accum_steps == 1
    return "reduce-overhead" if graphs else "default"


class CompiledLoss:
    """The compiled minibatch loss of one model; falls back to eager (logged once) when a feature
    is not compiled or compiling fails. ``compile_seconds``: the time the calls that compiled
    took (the first per input shape). Holds no reference to the policy."""

    def __init__(self) -> None:
        self.compile_seconds = 0.0
        self.failed: str | None = None
        self._logged: set[str] = set()
        self._shapes: set[tuple[Any, ...]] = set()

    def _log_once(self, reason: str) -> None:
        if reason not in self._logged:
            self._logged.add(reason)
            log.warning("compile: the update runs eager: %s", reason)

    def __call__(self, ctx: Any, mb: ChunkBatch) -> tuple[Tensor, dict[str, Tensor], int]:
        active = update_terms(ctx, ctx.constraint_terms)
        reason = self.failed or fallback_reason(ctx, active)
        if reason is not None:
            self._log_once(reason)
            return minibatch_loss(ctx, mb)
        # the coefficients on the model's device: a CPU scalar among CUDA inputs would keep
        # inductor from using CUDA graphs
        like = mb.advantages
        ent = like.new_tensor(float(ctx.ent_coef))
        terms = tuple(t for t, _ in active)
        coefs = tuple(like.new_tensor(float(c)) for _, c in active)
        xs, layout = mb.flat()
        key = (layout, *(None if x is None else (tuple(x.shape), x.dtype) for x in xs))
        first = key not in self._shapes
        t0 = time.perf_counter()
        try:
            fn = _compiled(compile_mode(ctx.cfg, like.device))
            loss, stats, n_bad = fn(ctx.policy, ctx.critic, ctx.cfg, terms, layout, ent, coefs, *xs)
        except Exception as exc:  # any compile failure falls back to eager
            self.failed = f"torch.compile failed ({type(exc).__name__}: {exc})".split("\n")[0]
            self._log_once(self.failed)
            return minibatch_loss(ctx, mb)
        if first:
            self._shapes.add(key)
            dt = time.perf_counter() - t0
            self.compile_seconds += dt
            log.info("compile: minibatch loss compiled in %.1f s (shapes %s)", dt, key[1])
        return loss, stats, int(n_bad)
