"""Attacks and the SA-PPO regulariser (R-ADV) on real recurrent policies."""

from __future__ import annotations

import pytest
import torch
from gymnasium import spaces

from riskppo.adversarial import ATTACKS, StepInput, pgd, sa_eps, sa_regularizer
from riskppo.adversarial.attacks import actor_dist, predicted_return
from riskppo.config import CriticConfig, PolicyConfig
from riskppo.nn.critics import QuantileCritic
from riskppo.nn.policy import RecurrentActorCritic

D = 4


def policy_for(action_space: spaces.Space, seed: int = 0) -> RecurrentActorCritic:
    """A policy whose actions depend strongly on its input (trained policies do; a freshly
    initialised one is almost uniform, where every attack is equally weak)."""
    torch.manual_seed(seed)
    obs_space = spaces.Box(-10, 10, (D,))
    pol = RecurrentActorCritic(
        obs_space, action_space, PolicyConfig(lstm_hidden_size=16, net_arch=[16]),
        n_critics=2, critic_out=8,
    )  # fmt: skip
    with torch.no_grad():
        pol.action_head.net.weight.mul_(30.0)
    return pol


def step_input(pol: RecurrentActorCritic, batch: int = 64, seed: int = 1) -> StepInput:
    g = torch.Generator().manual_seed(seed)
    state = pol.initial_state(batch)
    warm = torch.randn(batch, D, generator=g)  # a non-zero state entering the attacked step
    _, pi = pol.actor_lstm.step(warm, state.pi, torch.zeros(batch))
    state = state._replace(pi=pi)
    obs = torch.randn(batch, D, generator=g)
    return StepInput(
        pol, QuantileCritic(CriticConfig(n_quantiles=8)), obs, state, torch.zeros(batch)
    )


@pytest.mark.parametrize("space", [spaces.Discrete(3), spaces.Box(-1, 1, (2,))])
def test_pgd_attack_raises_kl_above_random_noise_of_the_same_norm(space: spaces.Space) -> None:
    pol = policy_for(space)
    inp = step_input(pol)
    eps = 0.1
    with torch.no_grad():
        clean = actor_dist(inp, inp.obs)

    def kl(delta: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return actor_dist(inp, inp.obs + delta).kl_from(clean)

    g = torch.Generator().manual_seed(0)
    d_pgd = ATTACKS["pgd"](inp, eps, 10, g)
    d_rand = ATTACKS["random"](inp, eps, 10, g)
    # the same L∞ norm: both lie on the sphere of radius ε (PGD's sign steps end on corners)
    assert torch.allclose(d_rand.abs().amax(-1), torch.full((64,), eps))
    assert torch.allclose(d_pgd.abs().amax(-1), torch.full((64,), eps))
    kl_pgd = kl(d_pgd)
    # random noise's KL per state, averaged over 32 draws
    kl_rand = torch.stack([kl(ATTACKS["random"](inp, eps, 10, g)) for _ in range(32)]).mean(0)
    assert kl_pgd.mean() > 1.5 * kl_rand.mean()
    # PGD finds a local maximum (the KL is not concave): above random noise in most states
    assert (kl_pgd > kl_rand).float().mean() > 0.8


@pytest.mark.parametrize("name", sorted(ATTACKS))
@pytest.mark.parametrize("eps", [0.01, 0.3])
def test_every_attack_stays_in_the_eps_ball(name: str, eps: float) -> None:
    pol = policy_for(spaces.Discrete(3))
    inp = step_input(pol, batch=32)
    delta = ATTACKS[name](inp, eps, 5, torch.Generator().manual_seed(2))
    assert delta.shape == inp.obs.shape
    assert float(delta.abs().max()) <= eps + 1e-7
    for p in pol.parameters():
        assert p.grad is None  # attacks never leave gradients on the model


def test_pgd_finds_the_known_maximiser_of_a_linear_objective() -> None:
    w = torch.tensor([[1.0, -2.0, 0.5], [-1.0, 3.0, -0.1]])
    delta = pgd(lambda d: (w * d).sum(), w.shape, eps=0.2, steps=5)
    assert torch.equal(delta, 0.2 * w.sign())  # the corner ε·sign(w)


def test_critic_attack_lowers_the_predicted_return() -> None:
    pol = policy_for(spaces.Discrete(3))
    with torch.no_grad():
        for out in pol.critic_out_layers:
            out.weight.mul_(50.0)  # a critic whose prediction depends on the input
    inp = step_input(pol)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        clean = predicted_return(inp, inp.obs)
        attacked = predicted_return(inp, inp.obs + ATTACKS["critic"](inp, 0.1, 10, g))
        noisy = predicted_return(inp, inp.obs + ATTACKS["random"](inp, 0.1, 10, g))
    assert (attacked < clean).all()
    assert attacked.mean() < noisy.mean()


def test_sa_regularizer_gradient_reaches_the_actor_only() -> None:
    pol = policy_for(spaces.Discrete(3))
    L, B = 8, 6
    g = torch.Generator().manual_seed(4)
    obs = torch.randn(L, B, D, generator=g)
    starts = torch.zeros(L, B)
    starts[3, :2] = 1.0  # episode boundaries inside the chunk
    state = pol.initial_state(B)
    clean, _, _ = pol.actor_sequence(obs, starts, state.pi)
    reg = sa_regularizer(pol, obs, starts, state.pi, clean, eps=0.1, steps=3, generator=g)
    assert reg.dim() == 0 and float(reg.detach()) > 0
    reg.backward()
    actor = [*pol.actor_lstm.parameters(), *pol.actor_mlp.parameters()]
    actor += list(pol.action_head.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor)
    critics = [*pol.critic_lstms.parameters(), *pol.critic_outs.parameters()]
    assert all(p.grad is None for p in critics)
    zero = sa_regularizer(pol, obs, starts, state.pi, clean, eps=0.0, steps=3)
    assert float(zero) == 0.0


def test_eps_schedule_ramps_linearly() -> None:
    assert sa_eps(0.1, 0, 0) == 0.1
    assert [round(sa_eps(0.1, 4, n), 6) for n in range(6)] == [0.025, 0.05, 0.075, 0.1, 0.1, 0.1]
