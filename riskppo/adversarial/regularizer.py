"""SA-PPO regulariser (Zhang et al., NeurIPS 2020, "Robust Deep RL against Adversarial
Perturbations on State Observations", eq. 6): ``max_{|δ|_∞ ≤ ε} KL(π(·|s) ‖ π(·|s+δ))``.

For a recurrent policy the perturbation covers a whole training chunk ``[L, B, D]``: the actor
LSTM runs over the perturbed sequence from the chunk's stored initial state, so a perturbation
at step t also acts through the state at later steps — what an attacker perturbing every step
of an episode does. The inner max is approximated by PGD (:func:`riskppo.adversarial.attacks.pgd`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from riskppo.adversarial.attacks import pgd
from riskppo.nn.distributions import ActionDistribution
from riskppo.nn.policy import RecurrentActorCritic
from riskppo.nn.recurrent import LSTMState


def sa_eps(eps: float, warmup_updates: int, n_updates: int) -> float:
    """ε schedule: linear from 0 to ``eps`` over the first ``warmup_updates`` updates."""
    if warmup_updates <= 0:
        return eps
    return eps * min(1.0, (n_updates + 1) / warmup_updates)


def sa_regularizer(
    policy: RecurrentActorCritic,
    obs: Tensor,
    episode_starts: Tensor,
    pi_state: LSTMState,
    clean: ActionDistribution,
    *,
    eps: float,
    steps: int,
    step_size: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Mean over the ``L*B`` steps of ``KL(π(·|s) ‖ π(·|s+δ*))``, δ* found by PGD.

    ``obs`` ``[L, B, D]``, ``episode_starts`` ``[L, B]``, ``pi_state`` the chunks' initial actor
    states, ``clean`` the distribution of the clean pass over the ``L*B`` steps (with its graph:
    the regulariser's gradient reaches the policy through both distributions). Returns a scalar.
    """
    if eps <= 0:
        return obs.new_zeros(())
    with torch.no_grad():
        target, _, _ = policy.actor_sequence(obs, episode_starts, pi_state)

    def kl_sum(delta: Tensor) -> Tensor:
        dist, _, _ = policy.actor_sequence(obs + delta, episode_starts, pi_state)
        return dist.kl_from(target).sum()

    step = None if step_size is None else step_size * eps
    delta = pgd(kl_sum, obs.shape, eps, steps, step, generator, obs.device)
    adv, _, _ = policy.actor_sequence(obs + delta, episode_starts, pi_state)
    return adv.kl_from(clean).mean()
