"""The optimizer step after the backward, in one place: gradient norms (per parameter group,
per clip group and in total), the finite guard, clipping at ``max_grad_norm`` and the Adam
step, behind one function, :func:`adam_step`. It takes one of three paths (:data:`StepPath`):

========  ==============================================================  ==================
path      when                                                            numbers
========  ==============================================================  ==================
``c``     ``compile: true``, no hook between the guard and the clip       torch's fused Adam
          (VGS, the ``target_kl`` check), the C kernel loaded, torch's    to float rounding
          fused Adam/AdamW with its state made and float32 contiguous
          CPU tensors: norms, guard, clip and Adam in one C call
          (:func:`clip_adam_in_c`)
``fused`` otherwise, for torch's fused Adam/AdamW with its state made:    ``optimizer.step()``
          the PyTorch norms, guard and clip, then the fused kernel        bit for bit
          called directly (:func:`optimizer_step`)
``torch`` otherwise (another optimizer, the first step, hooks, …): the    the reference
          same, then ``optimizer.step()``
========  ==============================================================  ==================

The direct kernel call only saves ``step()``'s per-call Python bookkeeping (about half a
millisecond per minibatch on a 2-core CPU); the C tail saves ~20 PyTorch ops. The caller
(:mod:`riskppo.algo.update`) keeps the counters; what this module reads of its context is
:class:`ParamLayout`. ``tests/unit/algo/test_fused_step.py`` checks each path against
``torch.optim.Adam``/``AdamW``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Protocol

import torch
import torch.optim.optimizer as _optim_mod
from torch import Tensor, nn

from riskppo.nn import native
from riskppo.nn.c_args import check


class ParamLayout(Protocol):
    """The policy's parameters as the step sees them (an update's context provides it):
    ``params`` in the optimizer's order; ``groups`` (logged norms) with ``group_index`` (id of
    a parameter → its group; absent: none) and ``owner`` (``[len(params)]``, ``len(groups)`` for
    none); ``clip_names`` with ``clip_owner`` (``[len(params)]``, the clip group of each); the
    cached fused-Adam lists ``adam`` and their C pointer arrays ``c_adam``."""

    optimizer: torch.optim.Optimizer
    params: list[nn.Parameter]
    groups: dict[str, list[nn.Parameter]]
    group_index: dict[int, int]
    owner: Tensor
    clip_names: list[str]
    clip_owner: Tensor
    adam: AdamLists | None
    c_adam: CAdam | None


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


class GradNorms(NamedTuple):
    """The L2 norms of one minibatch's gradients (no host sync): ``total`` (float32, as
    :func:`total_grad_norm`), ``groups`` ``[len(ctx.groups)]`` (as :func:`group_grad_norms`) and
    ``clip`` ``[len(ctx.clip_names)]`` (the clip groups), both float64; ``clip_owner``: the clip
    group of each gradient."""

    total: Tensor
    groups: Tensor
    clip: Tensor
    clip_owner: Tensor


def grad_norms(ctx: ParamLayout, grads: list[Tensor], params: list[nn.Parameter]) -> GradNorms:
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


def clip_(grads: list[Tensor], g: GradNorms, max_norm: float, grad_clip: str) -> Tensor:
    """Clip ``grads`` in place at ``max_norm`` (``ppo.max_grad_norm``, R-ALG-14): each clip group
    on its own (``grad_clip: per_group``) or all together (``global``). Returns the total norm
    after."""
    if grad_clip == "global":
        coef = (max_norm / (g.total + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_(grads, coef)
        return (g.total * coef).double()
    coefs = (max_norm / (g.clip + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(grads, list(coefs.float()[g.clip_owner].unbind()))
    return torch.linalg.vector_norm(g.clip * coefs.float().double())


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


class CAdam(NamedTuple):
    """:class:`AdamLists` as the pointer arrays of ``riskppo_clip_adam`` (made once per lists)."""

    lists: AdamLists
    arrays: tuple[Any, ...]  # sizes, params, exp_avgs, exp_avg_sqs, steps, owner, clip owner


def _c_adam(ctx: ParamLayout) -> CAdam | None:
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
    ctx.c_adam = CAdam(lists, (sizes, *ptrs, owner, clip_owner))
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


def clip_adam_in_c(
    ctx: ParamLayout, stats_sum: Tensor, max_norm: float, per_group: bool
) -> tuple[Tensor, bool] | None:
    """The group and total gradient norms, the finite check (R-REL-6) of them and of the loss
    ``stats_sum[0]``, clipping at ``max_norm`` (R-ALG-14, as :func:`clip_`; ``per_group``: each
    clip group on its own) and the Adam step in one C call (``riskppo_clip_adam``; the same
    arithmetic as torch's fused Adam, to float rounding), over the parameters that have
    gradients. Returns the norms ``[len(groups) + len(clip_names) + 2]`` (float64: groups, clip
    groups, pre-clip, post-clip) and whether the step was taken; None where it does not apply
    (no C kernel, another optimizer, tensors C cannot read as they are)."""
    lib = native.kernel()
    if lib is None or (c := _c_adam(ctx)) is None:
        return None
    grads: list[Tensor] = [q.grad for q in c.lists.params]  # type: ignore[misc]
    if not all(map(_c_readable, grads)):
        return None
    for i, (q, g) in enumerate(zip(c.lists.params, grads)):
        if g.shape != q.shape:  # dtype, device and layout: _c_readable; the sizes C reads: q's
            check(_IN_C, f"the gradient of parameter {i}", g, _PARAM_SHAPE, tuple(q.shape))
    group = c.lists.group
    sizes, p_ptrs, m_ptrs, v_ptrs, s_ptrs, owner, clip_owner = c.arrays
    g_ptrs = (ctypes.c_void_p * len(grads))(*(g.data_ptr() for g in grads))
    n_clip = len(ctx.clip_names)
    norms = torch.empty(len(ctx.groups) + n_clip + 2, dtype=torch.float64)
    beta1, beta2 = group["betas"]
    stepped = lib.riskppo_clip_adam(
        len(grads), sizes, g_ptrs, p_ptrs, m_ptrs, v_ptrs, s_ptrs, owner, len(ctx.groups),
        clip_owner, n_clip, int(per_group), float(stats_sum[0]),
        max_norm, group["lr"], beta1, beta2, group["eps"], group["weight_decay"],
        int(group["decoupled_weight_decay"]), norms.data_ptr(),
    )  # fmt: skip
    if stepped < 0:
        raise ValueError(f"{_IN_C}: {n_clip} clip groups, expected 1 to 8")
    return norms, bool(stepped)


StepPath = Literal["c", "fused", "torch", "nonfinite", "stopped"]  # the last two: no step


class AdamTail(NamedTuple):
    """What the update asks of :func:`adam_step`: clip at ``max_norm`` (``ppo.max_grad_norm``)
    per clip group (``per_group``) or globally; ``allow_c``: the C tail may run (``compile:
    true``); ``stop``: called once the gradients are known finite, True = do not apply this
    minibatch (the ``target_kl`` check); ``scale``: rescales the gradients in place before the
    clip (the variance gradient scaler). Either hook rules the C tail out."""

    max_norm: float
    per_group: bool
    allow_c: bool = False
    stop: Callable[[], bool] | None = None
    scale: Callable[[], None] | None = None


class Stepped(NamedTuple):
    """:func:`adam_step`'s outcome: the path taken and, when a step was taken, the norms
    ``[len(groups) + len(clip_names) + 2]`` (float64: groups, clip groups, the total before and
    after clipping; None for ``nonfinite`` and ``stopped``)."""

    path: StepPath
    norms: Tensor | None


def adam_step(ctx: ParamLayout, stats_sum: Tensor, tail: AdamTail) -> Stepped:
    """The whole tail after the backward over the parameters that have gradients: norms, the
    finite guard (the loss ``stats_sum[0]`` and every gradient), ``tail.stop``, ``tail.scale``,
    the clip and the Adam step, on the path the module's table states."""
    if tail.allow_c and tail.stop is None and tail.scale is None:
        in_c = clip_adam_in_c(ctx, stats_sum, tail.max_norm, tail.per_group)
        if in_c is not None:
            return Stepped("c", in_c[0]) if in_c[1] else Stepped("nonfinite", None)
    params = [q for q in ctx.params if q.grad is not None]
    grads: list[Tensor] = [q.grad for q in params]  # type: ignore[misc]
    g = grad_norms(ctx, grads, params)
    if not bool(torch.isfinite(stats_sum[0]) & torch.isfinite(g.total)):
        return Stepped("nonfinite", None)
    if tail.stop is not None and tail.stop():
        return Stepped("stopped", None)
    if tail.scale is not None:
        tail.scale()
        g = grad_norms(ctx, grads, params)
    post = clip_(grads, g, tail.max_norm, "per_group" if tail.per_group else "global")
    norms = torch.cat([g.groups, g.clip, torch.stack([g.total.double(), post])])
    ctx.adam = optimizer_step(ctx.optimizer, ctx.adam)
    return Stepped("torch" if ctx.adam is None else "fused", norms)
