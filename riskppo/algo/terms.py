"""The auxiliary loss terms: the one place they are registered (:data:`LOSS_TERMS`).

The eager and the compiled minibatch loss iterate the terms of an update
(:func:`update_terms`): the registered ones that are on, in registration order, then the
constraint's (:meth:`riskppo.algo.constraints.Constraint.loss_terms`). Built in:

* ``sa_kl``: the SA-PPO regulariser ``κ · max_δ KL(π(s) ‖ π(s+δ))`` (Zhang et al. 2020), while
  ``adversarial.kappa > 0`` and its ε is above 0 (not compiled: a PGD inner loop);
* ``bc``: behaviour cloning (:class:`riskppo.algo.bc.BCTerm`, R-ALG-12);
* ``pathwise``: ``c_p · L_path``, the reward's own gradient in the action
  (:func:`riskppo.algo.losses.pathwise_loss`), where the env reports reward slopes — or, with
  ``ppo.pathwise_utility: sharpe``, the Sharpe ratio's
  (:func:`riskppo.algo.losses.sharpe_slopes`, its moments remembered across rollouts at the rate
  ``ppo.sharpe_rate``).

A new term is a :class:`~riskppo.algo.losses.LossTerm` in one file and one
:func:`register_loss_term` call (as TorchRL adds a loss term as one key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from riskppo.adversarial.regularizer import sa_regularizer
from riskppo.algo.bc import BCTerm
from riskppo.algo.buffer import Rollout
from riskppo.algo.losses import LossTerm, TermInput, pathwise_loss, sharpe_slopes
from riskppo.algo.returns import RewardMoments
from riskppo.config import Config

__all__ = [
    "LOSS_TERMS",
    "SLOPES",
    "PathwiseTerm",
    "SAPPOTerm",
    "register_loss_term",
    "rollout_inputs",
    "unregister_loss_term",
    "update_terms",
]

SLOPES = "slopes"
"""``ChunkBatch.aux`` key of the pathwise term's reward slopes ``[L, B]`` (``[L, B, A]``)."""


class SAPPOTerm(LossTerm):
    """The SA-PPO regulariser (R-ADV), weighted by ``adversarial.kappa``."""

    name = "sa_kl"

    def enabled(self, ctx: Any) -> bool:
        return bool(ctx.cfg.adversarial.kappa > 0 and ctx.sa_eps > 0)

    def coef(self, ctx: Any) -> float:
        return float(ctx.cfg.adversarial.kappa)

    def not_compiled(self, ctx: Any) -> str | None:
        return (
            "the SA-PPO regulariser (adversarial.kappa > 0) runs a PGD inner loop "
            "(autograd.grad, generator draws) that is not compiled"
        )

    def compute(self, x: TermInput) -> tuple[Tensor, dict[str, Tensor]]:
        sa, mb = x.cfg.adversarial, x.mb
        sa_kl = sa_regularizer(
            x.policy,
            mb.obs,
            mb.episode_starts,
            mb.state.pi,
            x.fwd.dist,
            eps=x.ctx.sa_eps,
            steps=sa.pgd_steps,
            step_size=sa.pgd_step_size,
            generator=x.ctx.generator,
        )
        return x.coef * sa_kl, {"sa_kl": sa_kl.detach()}


class PathwiseTerm(LossTerm):
    """``c_p · L_path`` (``ppo.pathwise_coef``) on the reward slopes the env reports."""

    name = "pathwise"

    def enabled(self, ctx: Any) -> bool:
        return bool(ctx.cfg.ppo.pathwise_coef != 0)

    def coef(self, ctx: Any) -> float:
        return float(ctx.cfg.ppo.pathwise_coef)

    def rollout_inputs(
        self,
        cfg: Config,
        rollout: Rollout,
        scale_return: Callable[[Tensor], Tensor],
        moments: RewardMoments,
    ) -> dict[str, Tensor]:
        """The slopes ``[T, N]`` (``[T, N, A]`` for an action of ``A > 1`` numbers) at unit RMS
        over the rollout (so ``pathwise_coef`` weighs them as normalised advantages are
        weighed), scaled by the constraint as the return's part of the advantage is; none when
        the term is off, for a discrete action, or when the env reports no slopes. The Sharpe
        utility weighs them with the risk aversion of ``moments`` (this rollout's included)."""
        a = rollout.actions
        slopes = rollout.reward_slopes
        if slopes is None or not a.is_floating_point() or cfg.ppo.pathwise_coef == 0:
            return {}
        if slopes.shape[2:] != a.shape[2:] and not (slopes.dim() == 2 and a.shape[2:] == (1,)):
            return {}  # slopes of another action than the one the policy takes
        if cfg.ppo.pathwise_utility == "sharpe" and rollout.reward_slopes_next is not None:
            slopes = sharpe_slopes(
                rollout.rewards, slopes, rollout.reward_slopes_next, moments.aversion
            )
        rms = slopes.pow(2).mean().sqrt()
        unit = slopes / rms if rms > 0 else torch.zeros_like(slopes)
        return {SLOPES: scale_return(unit)}

    def compute(self, x: TermInput) -> tuple[Tensor, dict[str, Tensor]] | None:
        slopes = x.mb.aux.get(SLOPES)
        if slopes is None:
            return None
        term = pathwise_loss(x.fwd.dist.mode(), slopes)  # the Gaussian's mean [N, A]
        return x.coef * term, {"pathwise_loss": term.detach()}


LOSS_TERMS: dict[str, LossTerm] = {}
"""The registered auxiliary terms by name, in the order they enter the loss."""


def register_loss_term(term: LossTerm) -> LossTerm:
    """Add ``term`` after the registered ones (``ValueError`` if its name is taken)."""
    if not term.name or term.name in LOSS_TERMS:
        raise ValueError(f"a loss term needs a new name, not {term.name!r}")
    if term.part not in ("critic", "loss"):
        raise ValueError(f"loss term {term.name!r}: part must be 'critic' or 'loss'")
    LOSS_TERMS[term.name] = term
    return term


def unregister_loss_term(name: str) -> None:
    """Remove the term ``name`` (``KeyError`` if none)."""
    del LOSS_TERMS[name]


for _term in (SAPPOTerm(), BCTerm(), PathwiseTerm()):
    register_loss_term(_term)


def update_terms(ctx: Any, extra: Iterable[LossTerm] = ()) -> list[tuple[LossTerm, float]]:
    """The terms on at the update ``ctx`` with their coefficients: the registered ones, then
    ``extra`` (the constraint's)."""
    return [(t, t.coef(ctx)) for t in (*LOSS_TERMS.values(), *extra) if t.enabled(ctx)]


def rollout_inputs(
    cfg: Config,
    rollout: Rollout,
    scale_return: Callable[[Tensor], Tensor],
    moments: RewardMoments,
    extra: Iterable[LossTerm] = (),
) -> dict[str, Tensor]:
    """Every term's per-step inputs ``[T, N, ...]`` of ``rollout`` (for ``ChunkBatch.aux``)."""
    out: dict[str, Tensor] = {}
    for term in (*LOSS_TERMS.values(), *extra):
        out.update(term.rollout_inputs(cfg, rollout, scale_return, moments))
    return out
