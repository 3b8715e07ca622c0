"""Every term of the minibatch loss — PPO, value, the risk head's and the AWR behaviour-cloning
term — written once, shared by the eager update (:func:`riskppo.algo.update.minibatch_loss`),
the compiled one (:func:`riskppo.algo.compiled.traced_minibatch_loss`) and BC
(:func:`riskppo.algo.bc.bc_term`), so that they cannot drift apart.

Both paths collect the terms in a :class:`LossTerms` and :func:`total` sums them, in one fixed
order (as TorchRL's PPO objectives return named loss terms that the caller sums)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from riskppo import core
from riskppo.algo.buffer import ChunkBatch
from riskppo.config import Config
from riskppo.nn.critics import Critic
from riskppo.nn.distributions import ActionDistribution
from riskppo.nn.policy import RecurrentActorCritic

__all__ = [
    "LossTerms",
    "LossWeights",
    "PPOTerms",
    "awr_loss",
    "base_stats",
    "bc_loss_ratio",
    "other_terms_size",
    "pathwise_loss",
    "ppo_terms",
    "risk_head_loss",
    "total",
    "with_pathwise",
    "with_risk_head",
]


class PPOTerms(NamedTuple):
    """One minibatch's forward pass and its PPO terms (``T·B`` flattened samples)."""

    dist: ActionDistribution  # the policy over the T·B steps
    out: Tensor  # [C (+1 risk), T, B, K] critic outputs (normalised units)
    log_prob: Tensor  # [T·B] log π(a|s) of the stored actions
    pg_loss: Tensor  # clipped surrogate (R-ALG-9)
    pg: core.PolicyLossStats
    entropy: Tensor  # mean policy entropy
    vf_loss: Tensor  # mean of the value critics' (clipped) losses (R-ALG-4)
    vf_clip: Tensor  # fraction of value samples clipped


def ppo_terms(
    cfg: Config, policy: RecurrentActorCritic, critic: Critic, mb: ChunkBatch
) -> PPOTerms:
    p = cfg.ppo
    dist, out = policy.evaluate_sequences(mb.obs, mb.episode_starts, mb.state)
    log_prob = dist.log_prob(mb.actions.reshape(-1, *mb.actions.shape[2:]))
    pg_loss, pg = core.ppo_policy_loss(
        log_prob, mb.old_log_probs.reshape(-1), mb.advantages.reshape(-1), p.clip_range,
        p.log_ratio_clip,
    )  # fmt: skip
    K, C = out.shape[-1], policy.n_critics
    # R-ALG-4: the value loss is the average of the critics' losses, each clipped against its own
    # old prediction. The critics are stacked along the batch ([C·N, K], the target repeated), so
    # one loss call gives exactly that average (every critic has the same N samples).
    vf_loss, vf_clip = critic.value_loss(
        policy.value_outputs(out).reshape(-1, K),
        policy.value_outputs(mb.old_critic).reshape(-1, K),
        mb.targets.reshape(-1).repeat(C),
        p.clip_range_vf,
        p.vf_clip_mode,
    )
    return PPOTerms(dist, out, log_prob, pg_loss, pg, dist.entropy().mean(), vf_loss, vf_clip)


class LossTerms(NamedTuple):
    """The terms of one minibatch's loss (0-dim tensors; None: the term is off), unweighted
    except ``bc``. :func:`total` is the loss."""

    policy: Tensor  # clipped surrogate L_clip (R-ALG-9)
    value: Tensor  # the value critics' loss L_V (R-ALG-4)
    entropy: Tensor  # mean policy entropy H
    risk_head: Tensor | None = None  # the risk head's quantile loss (docs/risk.md)
    sa_kl: Tensor | None = None  # SA-PPO regulariser max_δ KL(π(s) ‖ π(s+δ)) (Zhang et al. 2020)
    bc: Tensor | None = None  # the BC term, already times its scheduled coefficient
    pathwise: Tensor | None = None  # −mean(∂R/∂a · μ(s)): the reward's own gradient (below)

    @property
    def critic(self) -> Tensor:
        """``L_V + L_risk``: what ``vf_coef`` weights and ``value_loss`` logs."""
        return self.value if self.risk_head is None else self.value + self.risk_head


class LossWeights(NamedTuple):
    """The coefficients of :class:`LossTerms` in :func:`total`."""

    vf_coef: float  # c_v
    ent_coef: float | Tensor  # c_e (a 0-dim tensor in the compiled loss, so it never recompiles)
    sa_kappa: float = 0.0  # κ of the SA-PPO regulariser
    pathwise_coef: float = 0.0  # c_p of the pathwise term


def total(t: LossTerms, w: LossWeights) -> Tensor:
    """``L = L_clip + c_v·(L_V + L_risk) − c_e·H + κ·KL_SA + BC + c_p·L_path``, summed left to
    right in this order (which fixes the float rounding: the eager and compiled paths add
    alike)."""
    loss = t.policy + w.vf_coef * t.critic - w.ent_coef * t.entropy
    if t.sa_kl is not None:
        loss = loss + w.sa_kappa * t.sa_kl
    if t.bc is not None:
        loss = loss + t.bc
    if t.pathwise is not None:
        loss = loss + w.pathwise_coef * t.pathwise
    return loss


def pathwise_loss(mean: Tensor, slopes: Tensor) -> Tensor:
    """The pathwise (reparameterised) policy-gradient term ``−mean(g · μ(s))`` of the policy's
    action means ``mean`` ``[N, 1]`` and the slopes ``g`` ``[N]`` (``∂return/∂action`` of each
    decision, constants): its gradient moves every mean the way the realised return rises.

    Where the environment's reward is a known function of the action and its inputs do not
    depend on the actions — a price taker's trades — ``g`` is exact and the term is an unbiased
    estimate of the gradient of the immediate return without the score function's sampling
    noise: direct reinforcement (Moody & Saffell 2001), as in deterministic policy gradients
    (Silver et al. 2014) with the model's derivative instead of a learned critic's."""
    if mean.dim() != 2 or mean.shape[1] != 1 or slopes.reshape(-1).shape[0] != mean.shape[0]:
        raise ValueError(
            f"pathwise_loss: means [N, 1] and slopes [N] expected, got {tuple(mean.shape)} and "
            f"{tuple(slopes.shape)}"
        )
    return -(slopes.reshape(-1) * mean[:, 0]).mean()


def with_pathwise(terms: LossTerms, t: PPOTerms, mb: ChunkBatch) -> LossTerms:
    """``terms`` with the pathwise term when the batch has reward slopes (else unchanged)."""
    if mb.slopes is None:
        return terms
    mean = t.dist.mode()  # the Gaussian's mean [N, 1]
    return terms._replace(pathwise=pathwise_loss(mean, mb.slopes))


def with_risk_head(
    cfg: Config, policy: RecurrentActorCritic, t: PPOTerms, mb: ChunkBatch, *, masked: bool
) -> LossTerms:
    """The PPO forward's terms, and the risk head's loss when the batch has its targets
    (``masked``: see :func:`risk_head_loss`)."""
    risk = None
    if mb.risk_targets is not None:  # R-RISK-2: risk head ← segment return-to-go quantiles
        q = policy.risk_output(t.out).reshape(-1, t.out.shape[-1])
        risk = risk_head_loss(q, mb.risk_targets, cfg.critic.kappa, masked=masked)
    return LossTerms(t.pg_loss, t.vf_loss, t.entropy, risk)


def base_stats(t: PPOTerms, terms: LossTerms) -> dict[str, Tensor]:
    """The minibatch's logged numbers (``value_loss``: with the risk head's part, when there is
    one), as tensors: nothing is synchronised with the host here."""
    stats = {
        "policy_loss": t.pg_loss.detach(),
        "value_loss": terms.critic.detach(),
        "entropy": t.entropy.detach(),
        "clip_fraction": t.pg.clip_fraction,
        "log_ratio_clamp_frac": t.pg.clamp_fraction,
        "large_log_ratio_count": t.pg.n_large_log_ratio.float(),
        "approx_kl_k1": t.pg.approx_kl_k1,
        "approx_kl_k3": t.pg.approx_kl_k3,
        "vf_clip_fraction": t.vf_clip.detach(),
    }
    if terms.pathwise is not None:
        stats["pathwise_loss"] = terms.pathwise.detach()
    return stats


def risk_head_loss(q: Tensor, targets: Tensor, kappa: float, *, masked: bool = False) -> Tensor:
    """Quantile-Huber loss of the risk head's quantiles ``q`` ``[N, K]`` (normalised units) against
    the segment returns-to-go ``targets`` (``N`` values; NaN where no segment ended): the mean over
    the ended samples, 0 (with a gradient path) when none ended (docs/risk.md).

    ``masked=False`` (the eager reference) keeps the ended rows, which costs one host sync;
    ``masked=True`` is the same mean as a masked sum, without host syncs or data-dependent shapes
    (what ``torch.compile`` captures whole), equal up to float rounding."""
    y = targets.reshape(-1)
    done = torch.isfinite(y)
    if masked:
        target = torch.where(done, y, torch.zeros_like(y)).unsqueeze(-1)
        per = core.quantile_huber_loss(q, target, kappa=kappa)
        w = done.to(per.dtype)
        return (per * w).sum() / w.sum().clamp(min=1.0)
    q = q[done]
    if bool(done.any()):
        return core.quantile_huber_loss(q, y[done].unsqueeze(-1), kappa=kappa).mean()
    return q.sum() * 0.0


def awr_loss(raw_advantages: Tensor, log_prob: Tensor, beta: float, max_weight: float) -> Tensor:
    """Advantage-weighted behaviour cloning on the rollout (Peng et al. 2019):
    ``−mean(w · log π(a|s))`` with ``w = min(exp(A/β), max_weight)`` of the raw (unnormalised)
    advantages ``[L, B]`` and ``log_prob`` ``[L·B]`` of the rollout's actions."""
    weights = core.awr_weights(raw_advantages.reshape(-1), beta=beta, max_weight=max_weight)
    return -(weights * log_prob).mean()


def other_terms_size(t: LossTerms, w: LossWeights) -> Tensor:
    """``|L_clip| + c_v·|L_V + L_risk| + c_e·|H|`` (0-dim): the size of the loss terms besides
    BC."""
    return t.policy.abs() + w.vf_coef * t.critic.abs() + w.ent_coef * t.entropy.abs()


def bc_loss_ratio(term: Tensor, others: Tensor) -> Tensor:
    """The BC term's share of the loss's size, ``|term| / (others + |term|)`` (0-dim, detached)."""
    return (term.abs() / (others.detach() + term.abs() + 1e-8)).detach()
