"""Update step: PPO epochs over minibatches of whole chunks (R-ALG-9 … R-ALG-15).

Per minibatch: ``grad_accum_steps`` micro-batches, each loss weighted by its share of the
minibatch's samples, so the accumulated gradient equals the full-minibatch gradient (R-ALG-13);
non-finite log-ratios / losses / gradients skip the step (R-ALG-9, R-REL-6); a k3 KL estimate
above ``target_kl`` stops the epoch loop before the step (R-ALG-11); then the optional
variance gradient scaler, gradient clipping at ``max_grad_norm`` (R-ALG-14; per clip group, see
:func:`clip_groups`, or globally: ``ppo.grad_clip``) and the optimizer step.
:func:`ppo_update` returns an :class:`UpdateMetrics`; the caller logs it. With ``compile: true``
the tail after the backward (norms, guard, clipping, Adam) is one C call where it applies
(:func:`_clip_adam_in_c`); the PyTorch tail (:func:`_clip_and_step`) is the reference.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.optim.optimizer as _optim_mod
from torch import Tensor, nn

from riskppo.adversarial.regularizer import sa_regularizer
from riskppo.algo.bc import BCInputs, bc_term
from riskppo.algo.buffer import ChunkBatch
from riskppo.algo.log import CLIP_NORM
from riskppo.algo.losses import base_stats, other_terms_size, ppo_terms, risk_head_loss
from riskppo.config import Config
from riskppo.nn import native
from riskppo.nn.c_args import check
from riskppo.nn.critics import Critic
from riskppo.nn.policy import RecurrentActorCritic

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
    """Everything :func:`ppo_update` needs besides the data."""

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
    # the fused Adam's per-parameter lists (:func:`optimizer_step`; the optimizer state is only
    # replaced between updates, e.g. by a checkpoint load).
    params: list[nn.Parameter] = field(init=False)
    owner: Tensor = field(init=False)
    # the clip groups (:func:`clip_groups`) by name, and each parameter's clip group ([len(params)])
    clip_names: list[str] = field(init=False)
    clip_owner: Tensor = field(init=False)
    adam: AdamLists | None = None
    c_adam: _CAdam | None = None  # ``adam`` as C pointer arrays (compile: true, _clip_adam_in_c)

    def __post_init__(self) -> None:
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


def group_grad_norms(groups: dict[str, list[nn.Parameter]]) -> dict[str, float]:
    """L2 norm of each group's gradients: one fused ``_foreach_norm``, one ``index_add_``."""
    names = list(groups)
    flat = [(i, p.grad) for i, ps in enumerate(groups.values()) for p in ps if p.grad is not None]
    if not flat:
        return {name: 0.0 for name in names}
    norms = torch.stack(torch._foreach_norm([g for _, g in flat])).double()
    owner = torch.tensor([i for i, _ in flat], device=norms.device)
    sq = norms.new_zeros(len(names)).index_add_(0, owner, norms * norms)
    return dict(zip(names, sq.sqrt().tolist()))


def total_grad_norm(grads: list[Tensor]) -> Tensor:
    """Global L2 norm of ``grads`` (non-finite if any entry is)."""
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


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
    """Loss of one (micro-)batch and its stats; also the count of non-finite log-ratios."""
    cfg, policy = ctx.cfg, ctx.policy
    p = cfg.ppo
    t = ppo_terms(cfg, policy, ctx.critic, mb)
    dist, out, log_prob, pg_loss, pg, entropy, vf_loss, _ = t
    if mb.risk_targets is not None:  # R-RISK-2: risk head ← segment return-to-go quantiles
        q = policy.risk_output(out).reshape(-1, out.shape[-1])
        vf_loss = vf_loss + risk_head_loss(q, mb.risk_targets, cfg.critic.kappa)
    loss = pg_loss + p.vf_coef * vf_loss - ctx.ent_coef * entropy
    sa = cfg.adversarial
    if sa.kappa > 0 and ctx.sa_eps > 0:  # R-ADV: SA-PPO, κ · max_δ KL(π(s) ‖ π(s+δ))
        sa_kl = sa_regularizer(
            policy,
            mb.obs,
            mb.episode_starts,
            mb.state.pi,
            dist,
            eps=ctx.sa_eps,
            steps=sa.pgd_steps,
            step_size=sa.pgd_step_size,
            generator=ctx.generator,
        )
        loss = loss + sa.kappa * sa_kl
    stats = base_stats(t, vf_loss)
    if sa.kappa > 0 and ctx.sa_eps > 0:
        stats["sa_kl"] = sa_kl.detach()
    if ctx.bc is not None:  # R-ALG-12: rollout (AWR), demonstration file or teacher source
        others = other_terms_size(pg_loss, vf_loss, entropy, p.vf_coef, ctx.ent_coef)
        bc_loss_term, bc_stats = bc_term(ctx, mb, log_prob, others)
        stats.update(bc_stats)
        loss = loss + bc_loss_term
    return loss, stats, int(pg.n_nonfinite)


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


class GradNorms(NamedTuple):
    """The L2 norms of one minibatch's gradients (no host sync): ``total`` (float32, as
    :func:`total_grad_norm`), ``groups`` ``[len(ctx.groups)]`` (as :func:`group_grad_norms`) and
    ``clip`` ``[len(ctx.clip_names)]`` (the clip groups), both float64; ``clip_owner``: the clip
    group of each gradient."""

    total: Tensor
    groups: Tensor
    clip: Tensor
    clip_owner: Tensor


def _grad_norms(ctx: UpdateContext, grads: list[Tensor], params: list[nn.Parameter]) -> GradNorms:
    """:class:`GradNorms` of ``grads`` (of ``params``) from one fused ``_foreach_norm``."""
    norms = torch.stack(torch._foreach_norm(grads))
    total = torch.linalg.vector_norm(norms)
    n_groups = len(ctx.groups)
    owner, clip_owner = ctx.owner, ctx.clip_owner
    if len(params) != len(ctx.params):  # some parameters have no gradient
        owner = torch.tensor([ctx.group_index.get(id(q), n_groups) for q in params])
        keep = {id(q) for q in params}
        clip_owner = clip_owner[[id(q) in keep for q in ctx.params]]
    owner, clip_owner = owner.to(norms.device), clip_owner.to(norms.device)
    n2 = norms.double()
    sq = n2.new_zeros(n_groups + 1).index_add_(0, owner, n2 * n2)
    clip = n2.new_zeros(len(ctx.clip_names)).index_add_(0, clip_owner, n2 * n2)
    return GradNorms(total, sq[:n_groups].sqrt(), clip.sqrt(), clip_owner)


def _clip_(ctx: UpdateContext, grads: list[Tensor], g: GradNorms) -> Tensor:
    """Clip ``grads`` in place at ``ppo.max_grad_norm`` (R-ALG-14): each clip group on its own
    (``grad_clip: per_group``) or all together (``global``). Returns the total norm after."""
    max_norm = ctx.cfg.ppo.max_grad_norm
    if ctx.cfg.ppo.grad_clip == "global":
        coef = (max_norm / (g.total + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_(grads, coef)
        return (g.total * coef).double()
    coefs = (max_norm / (g.clip + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(grads, list(coefs.float()[g.clip_owner].unbind()))
    return torch.linalg.vector_norm(g.clip * coefs.float().double())


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
    in_c = _clip_adam_in_c(ctx, stats_sum)
    if in_c is not None:  # compile: true, the common optimizer: the whole tail in one C call
        norms, stepped = in_c
        if not stepped:
            m.n_skipped_nonfinite_loss += 1
            _skip(ctx, m)
            return None
        ctx.consecutive_skips = 0
        return MinibatchStats(names, torch.cat([stats_sum.to(norms.dtype), norms]))
    params = [q for q in ctx.params if q.grad is not None]
    grads: list[Tensor] = [q.grad for q in params]  # type: ignore[misc]
    values = _clip_and_step(ctx, m, stats_sum, names, params, grads)
    return None if values is None else MinibatchStats(names, values)


def _clip_and_step(
    ctx: UpdateContext, m: UpdateMetrics, stats_sum: Tensor, names: list[str],
    params: list[nn.Parameter], grads: list[Tensor],
) -> Tensor | None:  # fmt: skip
    """Guard, KL check, VGS, clip and step; the minibatch's numbers (``names``; None: not
    applied)."""
    cfg = ctx.cfg
    # R-REL-6: check before the VGS sees the gradients, so its statistics are never polluted.
    g = _grad_norms(ctx, grads, params)
    if not bool(torch.isfinite(stats_sum[0]) & torch.isfinite(g.total)):
        m.n_skipped_nonfinite_loss += 1
        _skip(ctx, m)
        return None
    # R-ALG-11 (like SB3): the minibatch whose k3 KL estimate — measured before its step, on
    # the parameters the previous minibatches left — exceeds target_kl (factor 1) is not applied;
    # the caller stops the epoch loop. Checked before the VGS sees the gradients.
    target_kl = cfg.ppo.target_kl
    if target_kl is not None:
        kl = float(stats_sum[names.index("approx_kl_k3")])
        if kl > target_kl:
            ctx.clear_grads()
            m.early_stop_kl = kl
            return None
    ctx.consecutive_skips = 0
    if ctx.vgs is not None:
        ctx.vgs.scale_()  # R-OPT-2: before clipping, so clipping still bounds the final norm
        g = _grad_norms(ctx, grads, params)
    post = _clip_(ctx, grads, g)  # R-ALG-14; the optimizer steps afterwards
    values = torch.cat(
        [stats_sum.to(g.groups.dtype), g.groups, g.clip, torch.stack([g.total.double(), post])]
    )
    ctx.adam = optimizer_step(ctx.optimizer, ctx.adam)
    return values


class _CAdam(NamedTuple):
    """:class:`AdamLists` as the pointer arrays of ``riskppo_clip_adam`` (made once per lists)."""

    lists: AdamLists
    arrays: tuple[Any, ...]  # sizes, params, exp_avgs, exp_avg_sqs, steps, owner, clip owner


def _c_adam(ctx: UpdateContext) -> _CAdam | None:
    """The pointer arrays for ``ctx.adam`` when the C tail applies to it: float32 contiguous
    CPU parameters, moments and step counts. Everything, the group of each parameter included,
    is in the order of the optimizer's lists."""
    lists = ctx.adam
    if lists is None or not _same(lists.params, ctx.optimizer):
        return None
    if ctx.c_adam is not None and ctx.c_adam.lists is lists:
        return ctx.c_adam
    tensors = [*lists.params, *lists.exp_avgs, *lists.exp_avg_sqs, *lists.steps]
    if not all(map(_c_readable, tensors)):
        return None
    _check_adam_state(lists)
    n, none = len(lists.params), len(ctx.groups)
    ptrs = [(ctypes.c_void_p * n)(*(t.data_ptr() for t in ts)) for ts in lists[1:]]
    sizes = (ctypes.c_int64 * n)(*(q.numel() for q in lists.params))
    owner = (ctypes.c_int64 * n)(*(ctx.group_index.get(id(q), none) for q in lists.params))
    clip_of = dict(zip(map(id, ctx.params), ctx.clip_owner.tolist()))
    clip_owner = (ctypes.c_int64 * n)(*(clip_of[id(q)] for q in lists.params))
    ctx.c_adam = _CAdam(lists, (sizes, *ptrs, owner, clip_owner))
    return ctx.c_adam


_IN_C, _PARAM_SHAPE = "the C Adam step", "the parameter's shape"  # for its ValueErrors


def _c_readable(t: Tensor) -> bool:
    """Whether C can read ``t`` as it is: float32, CPU, contiguous (else the PyTorch tail)."""
    return t.dtype == torch.float32 and t.is_cpu and t.is_contiguous()


def _check_adam_state(lists: AdamLists) -> None:
    """``riskppo_clip_adam`` reads and writes each parameter's moments as arrays of the
    parameter's size and its step count as one float: a state of other shapes (e.g. loaded from
    another model's optimizer) raises ``ValueError`` instead of being read out of bounds."""
    for i, (q, m, v, step) in enumerate(zip(*lists[1:])):
        for name, t in (("exp_avg", m), ("exp_avg_sq", v)):
            check(_IN_C, f"{name} of parameter {i}", t, _PARAM_SHAPE, tuple(q.shape))
        if step.numel() != 1:
            raise ValueError(
                f"{_IN_C}: step of parameter {i} has shape {list(step.shape)}, expected one element"
            )


def _clip_adam_in_c(ctx: UpdateContext, stats_sum: Tensor) -> tuple[Tensor, bool] | None:
    """``compile: true`` with Adam/AdamW, no VGS, no target_kl: the group and total gradient
    norms, the finite check (R-REL-6), clipping (R-ALG-14, as :func:`_clip_`) and the Adam step
    in one C call (``riskppo_clip_adam``; the same arithmetic as torch's fused Adam, to float
    rounding), over the parameters that have gradients. Returns the norms
    ``[len(groups) + len(clip_names) + 2]`` (float64: groups, clip groups, pre-clip, post-clip)
    and whether the step was taken; None where it does not apply (the PyTorch tail runs)."""
    cfg = ctx.cfg
    if not cfg.compile or ctx.vgs is not None or cfg.ppo.target_kl is not None:
        return None
    lib = native.kernel()
    if lib is None or (c := _c_adam(ctx)) is None:
        return None
    grads: list[Tensor] = [q.grad for q in c.lists.params]  # type: ignore[misc]
    if not all(map(_c_readable, grads)):
        return None
    for i, (q, g) in enumerate(zip(c.lists.params, grads)):
        check(_IN_C, f"the gradient of parameter {i}", g, _PARAM_SHAPE, tuple(q.shape))
    group = c.lists.group
    sizes, p_ptrs, m_ptrs, v_ptrs, s_ptrs, owner, clip_owner = c.arrays
    g_ptrs = (ctypes.c_void_p * len(grads))(*(g.data_ptr() for g in grads))
    n_clip = len(ctx.clip_names)
    norms = torch.empty(len(ctx.groups) + n_clip + 2, dtype=torch.float64)
    beta1, beta2 = group["betas"]
    stepped = lib.riskppo_clip_adam(
        len(grads), sizes, g_ptrs, p_ptrs, m_ptrs, v_ptrs, s_ptrs, owner, len(ctx.groups),
        clip_owner, n_clip, int(cfg.ppo.grad_clip == "per_group"), float(stats_sum[0]),
        cfg.ppo.max_grad_norm, group["lr"], beta1, beta2, group["eps"], group["weight_decay"],
        int(group["decoupled_weight_decay"]), norms.data_ptr(),
    )  # fmt: skip
    if stepped < 0:
        raise ValueError(f"{_IN_C}: {n_clip} clip groups, expected 1 to 8")
    return norms, bool(stepped)


def _accumulate(ctx: UpdateContext, mb: ChunkBatch) -> tuple[Tensor | None, list[str]]:
    """Backward over the micro-batches, each loss weighted by its share of the minibatch's
    samples (R-ALG-13), so the gradient equals the full-minibatch one. Returns the share-weighted
    ``[loss, *stats]`` as one tensor and the stats' names; ``None`` on a non-finite log-ratio."""
    stats_sum: Tensor | None = None
    names: list[str] = []
    loss_fn = ctx.loss_fn or minibatch_loss
    for micro in split_micro(mb, ctx.cfg.ppo.grad_accum_steps):
        loss, stats, n_bad = loss_fn(ctx, micro)
        if n_bad:
            return None, names
        share = micro.n_samples / mb.n_samples  # R-ALG-13: weight by the share of samples
        (loss * share).backward()
        names = list(stats)
        vec = torch.stack([loss.detach(), *stats.values()]) * share
        stats_sum = vec if stats_sum is None else stats_sum + vec
    return stats_sum, names


class AdamLists(NamedTuple):
    """Torch's fused Adam's per-parameter lists, for :func:`optimizer_step`."""

    group: dict[str, Any]
    params: list[Tensor]
    exp_avgs: list[Tensor]
    exp_avg_sqs: list[Tensor]
    steps: list[Tensor]


def optimizer_step(
    optimizer: torch.optim.Optimizer, lists: AdamLists | None = None
) -> AdamLists | None:
    """``optimizer.step()``; for torch's fused Adam/AdamW (what ``optim.optimizer: adam|adamw``
    builds) its kernel is called directly — the same ``_foreach_add_`` of the step counts and the
    same ``_fused_adam(w)_`` call that ``step()`` makes, bit for bit, without its per-call Python
    bookkeeping (about half a millisecond per minibatch on a 2-core CPU). Anything else (state
    not yet created, hooks, several groups or devices/dtypes, amsgrad, …) takes ``step()``.

    ``lists``: what the previous call returned, reused while the parameters that have gradients
    are the same ones (the caller drops it whenever the optimizer state may have been replaced);
    returns the lists to pass next time (None: ``step()`` was taken)."""
    if lists is None or not _same(lists.params, optimizer):
        lists = _fused_adam_lists(optimizer)
    if lists is None:
        optimizer.step()
        return None
    g = lists.group
    torch._foreach_add_(lists.steps, 1)
    fn = torch._fused_adamw_ if g["decoupled_weight_decay"] else torch._fused_adam_
    beta1, beta2 = g["betas"]
    fn(
        lists.params,
        [q.grad for q in lists.params],  # type: ignore[misc]
        lists.exp_avgs,
        lists.exp_avg_sqs,
        [],
        lists.steps,
        amsgrad=False,
        lr=g["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=g["weight_decay"],
        eps=g["eps"],
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )
    return lists


def _same(params: list[Tensor], opt: torch.optim.Optimizer) -> bool:
    """Whether ``params`` are still exactly the optimizer's parameters that have gradients."""
    with_grad = [q for q in opt.param_groups[0]["params"] if q.grad is not None]
    return len(with_grad) == len(params) and all(a is b for a, b in zip(with_grad, params))


def _fused_adam_lists(opt: torch.optim.Optimizer) -> AdamLists | None:
    if not isinstance(opt, torch.optim.Adam) or len(opt.param_groups) != 1:
        return None
    g = opt.param_groups[0]
    if (
        not g["fused"]
        or g["amsgrad"]
        or g["maximize"]
        or g["differentiable"]
        or g["capturable"]
        or isinstance(g["lr"], Tensor)
        or opt._optimizer_step_pre_hooks
        or opt._optimizer_step_post_hooks
        or _optim_mod._global_optimizer_pre_hooks
        or _optim_mod._global_optimizer_post_hooks
    ):
        return None
    params = [q for q in g["params"] if q.grad is not None]
    if not params:
        return None
    state = opt.state
    try:
        sts = [state[q] for q in params]
        lists = AdamLists(
            g,
            params,
            [st["exp_avg"] for st in sts],
            [st["exp_avg_sq"] for st in sts],
            [st["step"] for st in sts],
        )
    except KeyError:  # no state yet: the first step creates it
        return None
    first = params[0]
    if any(q.device != first.device or q.dtype != first.dtype or q.grad.is_sparse for q in params):
        return None
    return lists


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
