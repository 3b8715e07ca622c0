"""The PPO and value terms of a minibatch loss, shared by the eager update
(:func:`riskppo.train.update.minibatch_loss`) and the compiled one
(:func:`riskppo.train.compiled.traced_minibatch_loss`), so the two cannot drift apart."""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from riskppo import core
from riskppo.config import Config
from riskppo.data.buffer import ChunkBatch
from riskppo.nn.critics import Critic
from riskppo.nn.distributions import ActionDistribution
from riskppo.nn.policy import RecurrentActorCritic

__all__ = ["PPOTerms", "base_stats", "ppo_terms"]


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
        out[:C].reshape(-1, K),
        mb.old_critic[:C].reshape(-1, K),
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
