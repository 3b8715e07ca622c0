"""Every term of the minibatch loss — PPO, value, the risk head's and the AWR behaviour-cloning
term — written once, shared by the eager update (:func:`riskppo.algo.update.minibatch_loss`),
the compiled one (:func:`riskppo.algo.compiled.traced_minibatch_loss`) and BC
(:func:`riskppo.algo.bc.bc_term`), so that they cannot drift apart."""

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
    "PPOTerms",
    "awr_loss",
    "base_stats",
    "bc_loss_ratio",
    "other_terms_size",
    "ppo_terms",
    "risk_head_loss",
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


def base_stats(t: PPOTerms, vf_loss: Tensor) -> dict[str, Tensor]:
    """The minibatch's logged numbers (``vf_loss``: with the risk head's part, when there is
    one), as tensors: nothing is synchronised with the host here."""
    return {
        "policy_loss": t.pg_loss.detach(),
        "value_loss": vf_loss.detach(),
        "entropy": t.entropy.detach(),
        "clip_fraction": t.pg.clip_fraction,
        "log_ratio_clamp_frac": t.pg.clamp_fraction,
        "large_log_ratio_count": t.pg.n_large_log_ratio.float(),
        "approx_kl_k1": t.pg.approx_kl_k1,
        "approx_kl_k3": t.pg.approx_kl_k3,
        "vf_clip_fraction": t.vf_clip.detach(),
    }


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


def other_terms_size(
    pg_loss: Tensor, vf_loss: Tensor, entropy: Tensor, vf_coef: float, ent_coef: float | Tensor
) -> Tensor:
    """``|L_clip| + c_v·|L_V| + c_e·|H|`` (0-dim): the size of the loss terms besides BC."""
    return pg_loss.abs() + vf_coef * vf_loss.abs() + ent_coef * entropy.abs()


def bc_loss_ratio(term: Tensor, others: Tensor) -> Tensor:
    """The BC term's share of the loss's size, ``|term| / (others + |term|)`` (0-dim, detached)."""
    return (term.abs() / (others.detach() + term.abs() + 1e-8)).detach()
