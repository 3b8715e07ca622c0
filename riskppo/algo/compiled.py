"""The opt-in compiled minibatch loss (``compile: true``).

:func:`traced_minibatch_loss` is :func:`riskppo.algo.update.minibatch_loss` written without
host syncs or data-dependent Python branches, so ``torch.compile`` (inductor) captures the whole
forward — the LSTM recurrence (:func:`riskppo.nn.lstm_kernel.masked_lstm_recurrence`: the C
kernel as one custom op with its registered backward, or, without it, the recurrence unrolled
over the chunk), heads, PPO, value and risk losses, the BC term — as one graph, and AOTAutograd
compiles its backward. The update loop is unchanged: it calls the
compiled function where it would call the eager one, then ``backward`` as before. On a CUDA
device both are replayed as CUDA graphs (inductor's ``reduce-overhead`` mode; ``cuda_graphs:
false`` turns that off): the loop reads the loss and stats of a minibatch before the next call,
as CUDA graphs require, since a replay reuses its outputs' memory.

What differs from eager, by float rounding only (the tests check losses and gradients to
``rtol=1e-4, atol=1e-5`` in float32 and the CartPole trajectory to ``atol=1e-4``):
inductor's fused kernels for the heads and losses (and the unrolled LSTM where the C kernel is
unavailable), and the risk head's loss as a masked mean instead of a mean over the selected
rows. The eager path stays the default and the reference.

Not compiled (the update runs eager, and the reason is logged once per model): the SA-PPO
regulariser (its PGD inner loop takes ``autograd.grad`` and draws from a generator), BC from
demonstration files or a teacher (chunks sampled with a generator per minibatch), and a
compile that fails (e.g. no C++ compiler: the error is logged). The first call pays the
compile (``compile_seconds``); inductor's disk cache makes later processes' compiles cheap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from riskppo.algo.buffer import ChunkBatch
from riskppo.algo.losses import (
    LossWeights,
    awr_loss,
    base_stats,
    bc_loss_ratio,
    other_terms_size,
    ppo_terms,
    total,
    with_pathwise,
    with_risk_head,
)
from riskppo.algo.update import minibatch_loss
from riskppo.config import Config
from riskppo.nn.critics import Critic
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.nn.recurrent import LSTMState

__all__ = ["CompiledLoss", "compile_mode", "fallback_reason", "traced_minibatch_loss"]

log = logging.getLogger("riskppo")


def fallback_reason(cfg: Config, ctx: Any) -> str | None:
    """Why the update cannot use the compiled loss (None: it can)."""
    if cfg.adversarial.kappa > 0 and ctx.sa_eps > 0:
        return (
            "the SA-PPO regulariser (adversarial.kappa > 0) runs a PGD inner loop "
            "(autograd.grad, generator draws) that is not compiled"
        )
    if ctx.bc is not None and ctx.bc.from_demos:
        return (
            "BC from demonstrations (bc.source: file | teacher) samples chunks with a "
            "generator per minibatch, which is not compiled"
        )
    return None


def traced_minibatch_loss(
    cfg: Config,
    policy: RecurrentActorCritic,
    critic: Critic,
    mb: ChunkBatch,
    ent_coef: Tensor,
    bc_coef: Tensor | None,
) -> tuple[Tensor, dict[str, Tensor], Tensor]:
    """:func:`~riskppo.algo.update.minibatch_loss` without syncs: same loss and stats; the count
    of non-finite log-ratios as a 0-dim tensor; ``ent_coef`` and ``bc_coef`` (None: no BC term)
    as 0-dim tensors so that their schedules do not recompile."""
    t = ppo_terms(cfg, policy, critic, mb)
    # the risk head's loss as a masked mean (0 when no segment ended): no host sync
    terms = with_pathwise(with_risk_head(cfg, policy, t, mb, masked=True), t, mb)
    weights = LossWeights(cfg.ppo.vf_coef, ent_coef, pathwise_coef=cfg.ppo.pathwise_coef)
    stats = base_stats(t, terms)
    if bc_coef is not None:  # R-ALG-12, rollout source (AWR): see riskppo.algo.bc.bc_term
        others = other_terms_size(terms, weights)
        bc_loss = awr_loss(mb.raw_advantages, t.log_prob, cfg.bc.beta, cfg.bc.max_weight)
        bc_loss = torch.where(bc_coef != 0.0, bc_loss, torch.zeros_like(bc_loss))
        term = bc_coef * bc_loss
        stats["bc_loss"] = bc_loss.detach()
        stats["bc_loss_ratio"] = bc_loss_ratio(term, others)
        stats["bc_coef"] = bc_coef.to(term.dtype)
        terms = terms._replace(bc=term)
    return total(terms, weights), stats, t.pg.n_nonfinite


def _flat(mb: ChunkBatch) -> list[Tensor | None]:
    s = mb.state
    return [
        mb.obs,
        mb.actions,
        mb.old_log_probs,
        mb.advantages,
        mb.targets,
        mb.old_critic,
        mb.episode_starts,
        s.pi.h,
        s.pi.c,
        mb.raw_advantages,
        mb.risk_targets,
        mb.slopes,
        *(t for v in s.vf for t in (v.h, v.c)),
    ]


def _unflat(xs: tuple[Tensor | None, ...]) -> ChunkBatch:
    vf = tuple(LSTMState(xs[i], xs[i + 1]) for i in range(12, len(xs), 2))  # type: ignore[arg-type]
    return ChunkBatch(
        obs=xs[0],  # type: ignore[arg-type]
        actions=xs[1],  # type: ignore[arg-type]
        old_log_probs=xs[2],  # type: ignore[arg-type]
        advantages=xs[3],  # type: ignore[arg-type]
        targets=xs[4],  # type: ignore[arg-type]
        old_critic=xs[5],  # type: ignore[arg-type]
        episode_starts=xs[6],  # type: ignore[arg-type]
        state=RecurrentState(LSTMState(xs[7], xs[8]), vf),  # type: ignore[arg-type]
        raw_advantages=xs[9],  # type: ignore[arg-type]
        risk_targets=xs[10],
        slopes=xs[11],
    )


def _traced(
    policy: RecurrentActorCritic,
    critic: Critic,
    cfg: Config,
    ent_coef: Tensor,
    bc_coef: Tensor | None,
    *xs: Tensor | None,
) -> tuple[Tensor, dict[str, Tensor], Tensor]:
    return traced_minibatch_loss(cfg, policy, critic, _unflat(xs), ent_coef, bc_coef)


_COMPILED: dict[str, Callable[..., Any]] = {}  # torch.compile(_traced) per mode, on first use


def _compiled(mode: str) -> Callable[..., Any]:
    if mode not in _COMPILED:
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
        reason = self.failed or fallback_reason(ctx.cfg, ctx)
        if reason is not None:
            self._log_once(reason)
            return minibatch_loss(ctx, mb)
        # the coefficients on the model's device: a CPU scalar among CUDA inputs would keep
        # inductor from using CUDA graphs
        like = mb.advantages
        ent = like.new_tensor(float(ctx.ent_coef))
        bc = None if ctx.bc is None else like.new_tensor(float(ctx.bc.coef))
        xs = _flat(mb)
        key = tuple(None if x is None else (tuple(x.shape), x.dtype) for x in xs)
        first = key not in self._shapes
        t0 = time.perf_counter()
        try:
            fn = _compiled(compile_mode(ctx.cfg, like.device))
            loss, stats, n_bad = fn(ctx.policy, ctx.critic, ctx.cfg, ent, bc, *xs)
        except Exception as exc:  # any compile failure falls back to eager
            self.failed = f"torch.compile failed ({type(exc).__name__}: {exc})".split("\n")[0]
            self._log_once(self.failed)
            return minibatch_loss(ctx, mb)
        if first:
            self._shapes.add(key)
            dt = time.perf_counter() - t0
            self.compile_seconds += dt
            log.info("compile: minibatch loss compiled in %.1f s (shapes %s)", dt, key[0])
        return loss, stats, int(n_bad)
