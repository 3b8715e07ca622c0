"""Every term of the minibatch loss, and the one function that assembles them.

:func:`assemble` is the loss of one (micro-)batch for the eager update
(:func:`riskppo.algo.update.minibatch_loss`) and the compiled one
(:func:`riskppo.algo.compiled.traced_minibatch_loss`) alike, so that they cannot drift apart:
the PPO forward's terms (clipped surrogate, value, entropy), then each auxiliary
:class:`LossTerm` of the update — the SA-PPO regulariser, behaviour cloning, the pathwise
term, a constraint's terms (:mod:`riskppo.algo.terms`), a user's — in one fixed order. As TorchRL's
PPO objectives return named loss terms that the caller sums, a term is an object with a name,
a ``compute`` and whether the compiled loss can capture it: a new one is one file.

The pure loss functions (pathwise, risk head, AWR) are here too, with their shapes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from riskppo import core
from riskppo.algo.buffer import ChunkBatch
from riskppo.algo.returns import RewardMoments
from riskppo.config import Config
from riskppo.nn.critics import Critic
from riskppo.nn.distributions import ActionDistribution
from riskppo.nn.policy import RecurrentActorCritic

__all__ = [
    "LossTerm",
    "LossTerms",
    "LossWeights",
    "PPOTerms",
    "TermInput",
    "TracedContext",
    "assemble",
    "awr_loss",
    "base_stats",
    "bc_loss_ratio",
    "other_terms_size",
    "pathwise_loss",
    "ppo_terms",
    "risk_head_loss",
    "sharpe_slopes",
    "total",
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
    """The terms of one minibatch's loss (0-dim tensors). :func:`total` is the loss."""

    policy: Tensor  # clipped surrogate L_clip (R-ALG-9)
    # the value critics' loss L_V plus the auxiliary terms of the critic part (e.g. the risk
    # head's loss): what ``vf_coef`` weights and ``value_loss`` logs
    critic: Tensor
    entropy: Tensor  # mean policy entropy H
    aux: tuple[Tensor, ...] = ()  # the auxiliary terms of the loss part, weighted, in order


class LossWeights(NamedTuple):
    """The coefficients of :class:`LossTerms` in :func:`total`."""

    vf_coef: float  # c_v
    ent_coef: float | Tensor  # c_e (a 0-dim tensor in the compiled loss, so it never recompiles)


def total(t: LossTerms, w: LossWeights) -> Tensor:
    """``L = L_clip + c_v·L_critic − c_e·H + Σ aux``, summed left to right in this order (which
    fixes the float rounding: the eager and compiled paths add alike)."""
    loss = t.policy + w.vf_coef * t.critic - w.ent_coef * t.entropy
    for term in t.aux:
        loss = loss + term
    return loss


# ---- auxiliary terms as plug-ins ---------------------------------------------------------------

Part = Literal["critic", "loss"]
"""Where a term's value goes: into the critic's loss (weighted by ``vf_coef``, logged in
``value_loss``) or straight into the loss."""


class TracedContext(NamedTuple):
    """The update context a term sees inside the compiled loss: no generator, no
    demonstrations, no SA-PPO (the features that are not compiled)."""

    cfg: Config
    policy: RecurrentActorCritic
    generator: None = None
    bc: None = None
    sa_eps: float = 0.0


@dataclass(frozen=True)
class TermInput:
    """What a :class:`LossTerm` reads of one (micro-)batch."""

    cfg: Config
    policy: RecurrentActorCritic
    mb: ChunkBatch
    fwd: PPOTerms  # the PPO forward pass over ``mb``: distribution, critic outputs, log-probs
    base: LossTerms  # the PPO terms (with the critic part's terms, for the loss part's terms)
    weights: LossWeights
    coef: float | Tensor  # the term's coefficient at this update (0-dim tensor when traced)
    # inside the compiled loss: no host syncs, no data-dependent Python branches or shapes
    traced: bool
    # the update context (riskppo.algo.update.UpdateContext), or a TracedContext when traced
    ctx: Any


class LossTerm:
    """An auxiliary term of the minibatch loss; :mod:`riskppo.algo.terms` registers them.

    A term says whether it is on at an update and with what coefficient (from the update context
    ``ctx``: ``cfg``, ``policy``, ``generator``, ``sa_eps``, ``bc`` of
    :class:`~riskppo.algo.update.UpdateContext`), asked once per minibatch; the coefficient
    reaches the compiled loss as a 0-dim tensor, so a schedule never recompiles it.
    :meth:`compute` returns the term as it enters the loss (times its coefficient) and its
    logged stats (0-dim tensors, logged as ``train/<key>``), or None where the batch lacks its
    inputs. :meth:`rollout_inputs` adds per-step inputs to the batch (``ChunkBatch.aux``)."""

    name: str = ""  # unique among the registered terms
    part: Part = "loss"

    def enabled(self, ctx: Any) -> bool:
        return True

    def coef(self, ctx: Any) -> float:
        return 1.0

    def not_compiled(self, ctx: Any) -> str | None:
        """Why the compiled loss cannot capture this term at ``ctx`` (None: it can)."""
        return None

    def rollout_inputs(
        self,
        cfg: Config,
        rollout: Any,
        scale_return: Callable[[Tensor], Tensor],
        moments: RewardMoments,
    ) -> dict[str, Tensor]:
        """``[T, N, ...]`` tensors of a rollout (:class:`~riskppo.algo.buffer.Rollout`) that
        :meth:`compute` reads in ``mb.aux``, chunked with the batch. ``scale_return``: what the
        constraint does to the return's part of the advantage (the identity without one);
        ``moments``: the rewards' moments remembered across rollouts, this one's included
        (:class:`~riskppo.algo.returns.RewardMoments`)."""
        return {}

    def compute(self, x: TermInput) -> tuple[Tensor, dict[str, Tensor]] | None:
        raise NotImplementedError


def assemble(
    cfg: Config,
    policy: RecurrentActorCritic,
    critic: Critic,
    mb: ChunkBatch,
    weights: LossWeights,
    terms: Sequence[tuple[LossTerm, float | Tensor]],
    *,
    traced: bool,
    ctx: Any,
) -> tuple[Tensor, dict[str, Tensor], Tensor]:
    """The loss of one (micro-)batch, its stats (0-dim tensors: nothing is synchronised with the
    host) and the count of non-finite log-ratios (0-dim). ``terms``: the auxiliary terms with
    their coefficients; the critic part's terms are added to L_V first, then the loss part's
    to the loss, each part in the order given."""
    fwd = ppo_terms(cfg, policy, critic, mb)
    base = LossTerms(fwd.pg_loss, fwd.vf_loss, fwd.entropy)
    extra: dict[str, Tensor] = {}
    aux: list[Tensor] = []
    for part in ("critic", "loss"):
        for term, coef in terms:
            if term.part != part:
                continue
            x = TermInput(cfg, policy, mb, fwd, base, weights, coef, traced, ctx)
            out = term.compute(x)
            if out is None:
                continue
            value, stats = out
            extra.update(stats)
            if part == "critic":
                base = base._replace(critic=base.critic + value)
            else:
                aux.append(value)
    stats = base_stats(fwd, base)
    stats.update(extra)
    return total(base._replace(aux=tuple(aux)), weights), stats, fwd.pg.n_nonfinite


def base_stats(t: PPOTerms, terms: LossTerms) -> dict[str, Tensor]:
    """The minibatch's logged PPO numbers (``value_loss``: with the critic part's terms), as
    tensors: nothing is synchronised with the host here."""
    return {
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


# ---- the pure loss functions -------------------------------------------------------------------


def pathwise_loss(mean: Tensor, slopes: Tensor) -> Tensor:
    """The pathwise (reparameterised) policy-gradient term ``−mean_n(Σ_k g_nk μ_nk(s))`` of the
    policy's action means ``mean`` ``[N, A]`` and the slopes ``g`` ``[N, A]`` (``[N]`` for
    ``A = 1``; ``∂return/∂action`` of each decision, constants): its gradient moves every mean the
    way the realised return rises.

    Where the environment's reward is a known function of the action and its inputs do not
    depend on the actions — a price taker's trades — ``g`` is exact and the term is an unbiased
    estimate of the gradient of the immediate return without the score function's sampling
    noise: direct reinforcement (Moody & Saffell 2001), as in deterministic policy gradients
    (Silver et al. 2014) with the model's derivative instead of a learned critic's."""
    if mean.dim() != 2 or slopes.numel() != mean.numel():
        raise ValueError(
            f"pathwise_loss: means [N, A] and slopes [N, A] (or [N] for A = 1) expected, got "
            f"{tuple(mean.shape)} and {tuple(slopes.shape)}"
        )
    return -(slopes.reshape(mean.shape) * mean).sum(-1).mean()


def sharpe_slopes(rewards: Tensor, slopes: Tensor, slopes_next: Tensor, aversion: float) -> Tensor:
    """The reward slopes ``[T, N]`` (``[T, N, A]``: one per action number) of a rollout turned
    into the slopes of its Sharpe ratio.

    For the rollout's rewards ``R`` ``[T, N]`` (one account's log returns per step, pooled) with
    mean ``A`` and mean square ``B``, the Sharpe ratio ``S = A / sqrt(B − A²)`` has
    ``∂S/∂R_τ = (B − A R_τ) / (TN (B − A²)^{3/2})`` (the differential Sharpe ratio of Moody &
    Saffell 2001), so each decision's slope of ``S`` is, up to the positive factor
    ``B / (TN (B − A²)^{3/2})``, ``w_t · (slopes − slopes_next)_t + w_{t+1} · slopes_next_t``
    with ``w = 1 − (A/B) R``:
    ``slopes`` is ``∂(R_t + R_{t+1})/∂a_t`` and ``slopes_next`` its part ``∂R_{t+1}/∂a_t``.
    Following it is gradient ascent on a concave mean–variance utility with risk aversion
    ``aversion`` = ``max(A, 0)/B``: a forecast moves the position in proportion where its edge is
    small against the return's variance, instead of all-or-nothing as the mean return's slope
    does. ``A`` is floored at 0 (where the account lost money every slope weighs 1: maximising a
    negative Sharpe ratio would seek variance). With this rollout's own ``A`` and ``B`` the
    slopes are its Sharpe ratio's exactly; the training loop passes moments remembered across
    rollouts (:class:`riskppo.algo.returns.RewardMoments`, Moody & Saffell's moving averages),
    as one rollout's ``A/B`` is mostly noise where the edge is small against the volatility
    (docs/learnability.md)."""
    same = slopes.shape == slopes_next.shape and slopes.dim() in (2, 3)
    if not (same and rewards.dim() == 2 and rewards.shape == slopes.shape[:2]):
        raise ValueError(
            f"sharpe_slopes: rewards [T, N], slopes and slopes_next [T, N] or [T, N, A] "
            f"expected, got {tuple(rewards.shape)}, {tuple(slopes.shape)}, "
            f"{tuple(slopes_next.shape)}"
        )
    r = rewards.to(slopes.dtype)
    if slopes.dim() == 3:
        r = r.unsqueeze(-1)
    w = 1 - aversion * r
    w_next = torch.cat([w[1:], torch.ones_like(w[:1])])  # the last step has no next part
    return w * (slopes - slopes_next) + w_next * slopes_next


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
    """``|L_clip| + c_v·|L_critic| + c_e·|H|`` (0-dim): the size of the PPO terms (for the BC
    term's share of the loss)."""
    return t.policy.abs() + w.vf_coef * t.critic.abs() + w.ent_coef * t.entropy.abs()


def bc_loss_ratio(term: Tensor, others: Tensor) -> Tensor:
    """The BC term's share of the loss's size, ``|term| / (others + |term|)`` (0-dim, detached)."""
    return (term.abs() / (others.detach() + term.abs() + 1e-8)).detach()
