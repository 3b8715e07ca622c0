"""Observation attacks within an L∞ ε-ball, for recurrent policies (R-ADV).

All attacks work on the observation *as the policy sees it* (after observation normalisation)
and on one step of a recurrent policy: given the states entering the step, they return a
perturbation ``δ`` ``[B, D]`` with ``|δ|_∞ ≤ ε``; the agent then acts on ``obs + δ`` and its
state advances with what it saw (the attacker perturbs every step while the state is carried).

* ``random`` — a random corner of the ball, ``ε · sign(u)``: noise of the same L∞ norm as the
  optimised attacks (which end on corners too), the baseline every attack must beat.
* ``pgd`` — maximal action difference (MAD, Zhang et al. 2020, SA-MDP): projected signed-gradient
  ascent on ``KL(π(·|s) ‖ π(·|s+δ))`` from a random start (the KL's gradient is 0 at δ = 0).
* ``critic`` — critic-guided (after Pattanaik et al. 2018): descent on the predicted mean return
  of the pessimistic critic at ``s+δ``, i.e. make the state look as bad as possible to the agent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from riskppo.nn.critics import Critic
from riskppo.nn.distributions import ActionDistribution
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState


class StepInput(NamedTuple):
    """What an attacker sees at one step of ``B`` envs."""

    policy: RecurrentActorCritic
    critic: Critic
    obs: Tensor  # [B, D] clean (normalised) observation
    state: RecurrentState  # states entering the step
    episode_start: Tensor  # [B] float, 1 where an episode starts


def pgd(
    objective: Callable[[Tensor], Tensor],
    shape: torch.Size | tuple[int, ...],
    eps: float,
    steps: int,
    step_size: float | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Maximise ``objective(δ)`` (a scalar, a sum over independent samples) over ``|δ|_∞ ≤ ε``.

    Random start uniform in the ball, then ``steps`` signed-gradient steps of ``step_size``
    (default ``2.5 ε / steps``, Madry et al. 2018), each followed by the projection (clipping).
    Only ``δ`` gets gradients (model parameters' ``.grad`` are untouched). Returns ``δ`` detached.
    """
    if eps <= 0:
        return torch.zeros(shape, device=device)
    alpha = step_size if step_size is not None else 2.5 * eps / steps
    delta = ((torch.rand(shape, generator=generator) * 2 - 1) * eps).to(device)
    for _ in range(steps):
        delta.requires_grad_(True)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(objective(delta), delta)
        delta = (delta.detach() + alpha * grad.sign()).clamp_(-eps, eps)
    return delta.detach()


def actor_dist(inp: StepInput, obs: Tensor) -> ActionDistribution:
    """The policy's action distribution for ``obs`` ``[B, D]`` from the step's actor state."""
    start = inp.policy.starts(inp.episode_start)
    latent, _ = inp.policy.actor_lstm.step(obs, inp.state.pi, start)
    return inp.policy.action_head(inp.policy.actor_mlp(latent))


def predicted_return(inp: StepInput, obs: Tensor) -> Tensor:
    """Mean predicted return ``[B]`` (normalised units) of the pessimistic critic at ``obs``."""
    out, _ = inp.policy.critic_step(obs, inp.state, inp.episode_start)
    return inp.critic.mean(inp.policy.value_outputs(out)).min(dim=0).values


def random_attack(
    inp: StepInput, eps: float, steps: int, generator: torch.Generator | None = None
) -> Tensor:
    sign = (torch.rand(inp.obs.shape, generator=generator) < 0.5).to(inp.obs.device)
    return torch.where(sign, eps, -eps).to(inp.obs.dtype)


def pgd_kl_attack(
    inp: StepInput, eps: float, steps: int, generator: torch.Generator | None = None
) -> Tensor:
    with torch.no_grad():
        clean = actor_dist(inp, inp.obs)

    def kl(delta: Tensor) -> Tensor:
        return actor_dist(inp, inp.obs + delta).kl_from(clean).sum()

    return pgd(kl, inp.obs.shape, eps, steps, generator=generator, device=inp.obs.device)


def critic_attack(
    inp: StepInput, eps: float, steps: int, generator: torch.Generator | None = None
) -> Tensor:
    def neg_value(delta: Tensor) -> Tensor:
        return -predicted_return(inp, inp.obs + delta).sum()

    return pgd(neg_value, inp.obs.shape, eps, steps, generator=generator, device=inp.obs.device)


Attack = Callable[[StepInput, float, int, "torch.Generator | None"], Tensor]
ATTACKS: dict[str, Attack] = {
    "random": random_attack,
    "pgd": pgd_kl_attack,
    "critic": critic_attack,
}


def get_attack(name: str) -> Attack:
    try:
        return ATTACKS[name]
    except KeyError:
        raise ValueError(f"unknown attack {name!r}; choose from {sorted(ATTACKS)}") from None
