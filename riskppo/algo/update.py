"""Update step: PPO epochs over minibatches of whole chunks (R-ALG-9 … R-ALG-15).

Per minibatch: ``grad_accum_steps`` micro-batches, each loss weighted by its share of the
minibatch's samples, so the accumulated gradient equals the full-minibatch gradient (R-ALG-13);
non-finite log-ratios / losses / gradients skip the step (R-ALG-9, R-REL-6); a k3 KL estimate
above ``target_kl`` stops the epoch loop before the step (R-ALG-11); then the optional
variance gradient scaler, gradient clipping at ``max_grad_norm`` (R-ALG-14; per clip group, see
:func:`clip_groups`, or globally: ``ppo.grad_clip``) and the optimizer step.
:func:`ppo_update` returns an :class:`UpdateMetrics`; the caller logs it. With ``compile: true``
the tail after the backward (norms, guard, clipping, Adam) is one C call where it applies.
The norms, the clipping and the step, and which of their paths runs, are
:func:`riskppo.optim.step.adam_step`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from riskppo.algo.bc import BCInputs
from riskppo.algo.buffer import ChunkBatch
from riskppo.algo.constraints import constraint_for
from riskppo.algo.log import CLIP_NORM
from riskppo.algo.losses import LossTerm, LossWeights, assemble
from riskppo.algo.terms import update_terms
from riskppo.config import Config
from riskppo.nn.critics import Critic
from riskppo.nn.policy import RecurrentActorCritic
from riskppo.optim.step import AdamLists, AdamTail, CAdam, adam_step

LossFn = Callable[[Any, ChunkBatch], tuple[Tensor, dict[str, Tensor], int]]
"""A minibatch loss: ``(context, minibatch) -> (loss, stats, non-finite log-ratio count)``."""


class NonFiniteTrainingError(RuntimeError):
    """Too many consecutive updates had to be skipped because of non-finite values."""


@dataclass
class UpdateMetrics:
    """Averages over the minibatches that were applied, plus counters."""

    means: dict[str, float] = field(default_factory=dict)
    n_applied: int = 0
    n_skipped_nonfinite_ratio: int = 0
    n_skipped_nonfinite_loss: int = 0
    early_stop_epoch: int | None = None  # epoch whose minibatch exceeded target_kl (R-ALG-11)
    early_stop_kl: float | None = None  # that minibatch's k3 KL estimate (it was not applied)
    max_loss: float = 0.0
    # Non-finite skips in a row at the end of this update, counted across updates (R-ALG-9,
    # R-REL-6): the caller passes it into the next update's context.
    consecutive_skips: int = 0


@dataclass
class UpdateContext:
    """Everything :func:`ppo_update` needs besides the data; also the
    :class:`~riskppo.optim.step.ParamLayout` that the optimizer step reads."""

    cfg: Config
    policy: RecurrentActorCritic
    critic: Critic
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    ent_coef: float
    vgs: Any | None = None  # riskppo.optim.VarianceGradientScaler
    sa_eps: float = 0.0  # current ε of the SA-PPO regulariser (R-ADV; 0 = off)
    bc: BCInputs | None = None  # this update's behaviour-cloning term (R-ALG-12; None = off)
    # non-finite skips in a row carried in from the previous updates (``UpdateMetrics``)
    consecutive_skips: int = 0
    groups: dict[str, list[nn.Parameter]] = field(default_factory=dict)
    # id(parameter) → index of its group in ``groups`` (parameters of no group: absent)
    group_index: dict[int, int] = field(default_factory=dict)
    # the minibatch loss: :func:`minibatch_loss` (None) or a compiled equivalent
    # (:mod:`riskppo.algo.compiled`)
    loss_fn: LossFn | None = None
    # Taken once per update (listing them per minibatch cost more than its small ops): the
    # policy's parameters, the group index of each ([len(params)], len(groups) for none), and
    # the fused Adam's per-parameter lists (:func:`riskppo.optim.step.optimizer_step`; the
    # optimizer state is only replaced between updates, e.g. by a checkpoint load).
    params: list[nn.Parameter] = field(init=False)
    owner: Tensor = field(init=False)
    # the clip groups (:func:`clip_groups`) by name, and each parameter's clip group ([len(params)])
    clip_names: list[str] = field(init=False)
    clip_owner: Tensor = field(init=False)
    adam: AdamLists | None = None
    c_adam: CAdam | None = None  # ``adam`` as C pointer arrays (compile: true, the C tail)
    # the constraint's auxiliary loss terms (riskppo.algo.constraints), after the registered ones
    constraint_terms: tuple[LossTerm, ...] = field(init=False)

    def __post_init__(self) -> None:
        constraint = constraint_for(self.cfg)
        self.constraint_terms = constraint.loss_terms() if constraint is not None else ()
        self.groups = param_groups(self.policy)
        self.group_index = {id(q): i for i, ps in enumerate(self.groups.values()) for q in ps}
        self.params = list(self.policy.parameters())
        n = len(self.groups)
        self.owner = torch.tensor([self.group_index.get(id(q), n) for q in self.params])
        clip = clip_groups(self.policy)
        self.clip_names = list(clip)
        where = {id(q): i for i, ps in enumerate(clip.values()) for q in ps}
        self.clip_owner = torch.tensor([where[id(q)] for q in self.params])

    def clear_grads(self) -> None:
        """``optimizer.zero_grad(set_to_none=True)`` for the policy's parameters (the optimizer
        holds exactly those), without its per-call bookkeeping."""
        for q in self.params:
            q.grad = None


def param_groups(policy: RecurrentActorCritic) -> dict[str, list[nn.Parameter]]:
    """Each module's own parameters, each parameter counted once (design §5)."""
    groups: dict[str, list[nn.Parameter]] = {
        f"lstm_{name}": list(m.parameters()) for name, m in policy.lstm_modules().items()
    }
    for i in range(policy.n_critics):
        own = [*policy.critic_mlps[i].parameters(), *policy.critic_outs[i].parameters()]
        if len(policy.critic_lstms) == policy.n_critics:
            own += list(policy.critic_lstms[i].parameters())
        groups[f"critic{i + 1}"] = own
    if policy.has_risk_head:
        c = policy.n_critics
        groups["risk_head"] = [
            *policy.critic_mlps[c].parameters(),
            *policy.critic_outs[c].parameters(),
        ]
    return groups


def clip_groups(policy: RecurrentActorCritic) -> dict[str, list[nn.Parameter]]:
    """The parameters clipped together under ``ppo.grad_clip: per_group``, a partition of the
    policy's parameters: ``critic`` (the value critics' LSTMs and heads), ``risk_head`` (its
    head, when there is one) and ``actor`` (everything else: actor LSTM, MLP and action head, and
    the LSTM shared by all heads under ``policy.lstm_sharing: all``).

    The quantile critics' and the risk head's gradients are typically two orders of magnitude
    above the actor's (docs/clipping.md, section 7); one global clip scales the actor's gradient
    down with theirs, below Adam's ``eps``, which then shrinks the actor's step."""
    c = policy.n_critics
    critic = [
        *(q for m in policy.critic_lstm_list for q in m.parameters()),
        *(q for m in list(policy.critic_mlps)[:c] for q in m.parameters()),
        *(q for m in list(policy.critic_outs)[:c] for q in m.parameters()),
    ]
    risk = [
        q for ms in (policy.critic_mlps, policy.critic_outs) for m in list(ms)[c:]
        for q in m.parameters()
    ]  # fmt: skip
    taken = {id(q) for q in (*critic, *risk)}
    groups = {"actor": [q for q in policy.parameters() if id(q) not in taken], "critic": critic}
    if risk:
        groups["risk_head"] = risk
    return groups


def minibatch_loss(ctx: UpdateContext, mb: ChunkBatch) -> tuple[Tensor, dict[str, Tensor], int]:
    """Loss of one (micro-)batch and its stats (:func:`riskppo.algo.losses.assemble` with the
    update's terms, :func:`riskppo.algo.terms.update_terms`); also the count of non-finite
    log-ratios."""
    weights = LossWeights(ctx.cfg.ppo.vf_coef, ctx.ent_coef)
    terms = update_terms(ctx, ctx.constraint_terms)
    loss, stats, n_bad = assemble(
        ctx.cfg, ctx.policy, ctx.critic, mb, weights, terms, traced=False, ctx=ctx
    )
    return loss, stats, int(n_bad)


def split_micro(mb: ChunkBatch, n: int) -> list[ChunkBatch]:
    if n == 1:
        return [mb]
    idx = torch.arange(mb.n_chunks).chunk(n)
    return [mb.select(i) for i in idx]


@dataclass
class MinibatchStats:
    """One applied minibatch's numbers as one tensor (``names[i]`` ↔ ``values[i]``): kept on the
    device until the update ends, so a minibatch costs no host sync for its logging."""

    names: list[str]
    values: Tensor

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, self.values.tolist()))


def apply_minibatch(
    ctx: UpdateContext, mb: ChunkBatch, m: UpdateMetrics
) -> dict[str, float] | None:
    """Accumulate gradients over micro-batches, guard, scale, clip and step.

    ``None`` = not applied: skipped for non-finite values, or (``m.early_stop_kl`` set) its KL
    exceeds ``target_kl``.
    """
    out = _apply_minibatch(ctx, mb, m)
    return None if out is None else out.as_dict()


def _apply_minibatch(ctx: UpdateContext, mb: ChunkBatch, m: UpdateMetrics) -> MinibatchStats | None:
    """:func:`apply_minibatch` with its numbers left as one tensor (:class:`MinibatchStats`)."""
    ctx.clear_grads()
    stats_sum, names = _accumulate(ctx, mb)
    if stats_sum is None:  # a non-finite log-ratio
        m.n_skipped_nonfinite_ratio += 1
        _skip(ctx, m)
        return None
    names = ["loss", *names, *(f"{g}_grad_norm" for g in ctx.groups),
             *(f"{g}{CLIP_NORM}" for g in ctx.clip_names),
             "grad_norm_pre_clip", "grad_norm_post_clip"]  # fmt: skip
    tail = _tail(ctx, m, stats_sum, names)
    out = adam_step(ctx, stats_sum, tail)
    if out.norms is None:
        if out.path == "nonfinite":
            m.n_skipped_nonfinite_loss += 1
            _skip(ctx, m)
        return None
    ctx.consecutive_skips = 0
    return MinibatchStats(names, torch.cat([stats_sum.to(out.norms.dtype), out.norms]))


def _tail(ctx: UpdateContext, m: UpdateMetrics, stats_sum: Tensor, names: list[str]) -> AdamTail:
    """What :func:`riskppo.optim.step.adam_step` does after the finite guard: (like SB3) the
    minibatch whose k3 KL estimate — measured before its step, on the parameters the
    previous minibatches left — exceeds target_kl (factor 1) is not applied and the caller stops
    the epoch loop; then the VGS (before clipping, so clipping still bounds the final norm),
    both after the guard so that the VGS's statistics are never polluted; then the clip at
    ``ppo.max_grad_norm`` and the step, in C under ``compile: true`` where neither hook is set."""
    cfg = ctx.cfg
    target_kl = cfg.ppo.target_kl

    def kl_stop() -> bool:
        kl = float(stats_sum[names.index("approx_kl_k3")])
        if target_kl is None or kl <= target_kl:
            return False
        ctx.clear_grads()
        m.early_stop_kl = kl
        return True

    return AdamTail(
        cfg.ppo.max_grad_norm,
        cfg.ppo.grad_clip == "per_group",
        allow_c=cfg.compile,
        stop=None if target_kl is None else kl_stop,
        scale=None if ctx.vgs is None else ctx.vgs.scale_,
    )


def _accumulate(ctx: UpdateContext, mb: ChunkBatch) -> tuple[Tensor | None, list[str]]:
    """Backward over the micro-batches, each loss weighted by its share of the minibatch's
    samples (R-ALG-13), so the gradient equals the full-minibatch one. Returns the share-weighted
    ``[loss, *stats]`` as one tensor and the stats' names; ``None`` on a non-finite log-ratio."""
    stats_sum: Tensor | None = None
    names: list[str] = []
    loss_fn = ctx.loss_fn or minibatch_loss
    micros = split_micro(mb, ctx.cfg.ppo.grad_accum_steps)
    for micro in micros:
        loss, stats, n_bad = loss_fn(ctx, micro)
        if n_bad:
            return None, names
        names = list(stats)
        vec = torch.stack([loss.detach(), *stats.values()])
        if len(micros) > 1:  # R-ALG-13: weight by the share of samples
            share = micro.n_samples / mb.n_samples
            loss, vec = loss * share, vec * share
        loss.backward()
        stats_sum = vec if stats_sum is None else stats_sum + vec
    return stats_sum, names


def _skip(ctx: UpdateContext, m: UpdateMetrics) -> None:
    ctx.clear_grads()
    ctx.consecutive_skips += 1
    if ctx.consecutive_skips >= ctx.cfg.ppo.max_nonfinite_updates:
        raise NonFiniteTrainingError(
            f"{ctx.consecutive_skips} consecutive minibatches had non-finite log-ratios, losses "
            "or gradients and were skipped (ppo.max_nonfinite_updates="
            f"{ctx.cfg.ppo.max_nonfinite_updates}); lower the learning rate or check the env"
        )


def ppo_update(ctx: UpdateContext, data: ChunkBatch) -> UpdateMetrics:
    """``n_epochs`` passes over ``data`` in shuffled minibatches of whole chunks."""
    p = ctx.cfg.ppo
    chunk_len = data.obs.shape[0]
    chunks_per_batch = p.batch_size // chunk_len
    m = UpdateMetrics()
    applied: list[MinibatchStats] = []
    for epoch in range(p.n_epochs):
        for mb in data.minibatches(chunks_per_batch, ctx.generator):
            stats = _apply_minibatch(ctx, mb, m)
            if m.early_stop_kl is not None:  # R-ALG-11: KL above target_kl, not applied
                m.early_stop_epoch = epoch
                break
            if stats is None:  # skipped: non-finite values
                continue
            m.n_applied += 1
            applied.append(stats)
        if m.early_stop_epoch is not None:
            break
    if applied:  # one host sync for the whole update
        table = torch.stack([a.values for a in applied])
        names = applied[0].names
        m.means = dict(zip(names, (table.sum(0) / len(applied)).tolist()))
        m.max_loss = float(table[:, names.index("loss")].abs().max())
    m.consecutive_skips = ctx.consecutive_skips
    return m
