"""The rollout's actor step in C with a diagonal Gaussian head (a ``Box`` action,
:mod:`riskppo.nn.actor_step`) against the float64 module path and against the PyTorch step.

Given the same standard normals (drawn by torch from the same generator), the C step's actions
``mean + eps * exp(log_std)``, their log-probabilities and the new LSTM state agree with float64
to float32 rounding, for the log-std as a parameter and as a clamped layer of the latent; a
rollout with episode resets takes the same actions as the PyTorch step and leaves the generator
in the same state; where the C step does not apply the PyTorch step runs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo.nn import native
from riskppo.nn.distributions import DiagGaussianDist
from riskppo.nn.recurrent import LSTMState
from tests.compilers import needs_c_kernel
from tests.unit.algo.test_fused_step import reference_step
from tests.unit.nn.test_actor_step import policy_of

pytestmark = needs_c_kernel()

B, H = 9, 12


def gaussian_policy(net_arch=(16, 8), state_dependent_std=False, A=3):
    """A policy on ``Box(-1, 1, (A,))`` whose log-std is not the same in every dimension: a
    random parameter, or a layer with random weights whose bias pushes some entries past the
    upper clamp (2) so the clamp is exercised."""
    policy = policy_of("tanh", net_arch, space=spaces.Box(-1.0, 1.0, (A,), np.float32),
                       state_dependent_std=state_dependent_std)  # fmt: skip
    head = policy.action_head
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        if head.log_std_layer is not None:
            head.log_std_layer.weight.copy_(
                torch.randn(head.log_std_layer.weight.shape, generator=g)
            )
            head.log_std_layer.bias.copy_(torch.linspace(-1.5, 3.0, A))
        else:
            assert head.log_std is not None
            head.log_std.copy_(torch.randn(A, generator=g) * 0.7)
        head.net.weight.mul_(50.0)  # means of order 1, not the init's 0.01 scale
    return policy


def random_state(g):
    return LSTMState(torch.randn(1, B, H, generator=g), torch.randn(1, B, H, generator=g))


@pytest.mark.parametrize("state_dependent_std", [False, True], ids=["param-std", "layer-std"])
@pytest.mark.parametrize("net_arch", [(16, 8), ()])
@pytest.mark.parametrize("deterministic", [False, True])
def test_c_gaussian_step_equals_the_float64_module_step(state_dependent_std, net_arch,
                                                        deterministic):  # fmt: skip
    policy = gaussian_policy(net_arch, state_dependent_std)
    g = torch.Generator().manual_seed(1)
    state = random_state(g)
    starts = np.array([True, False, False, True, False, False, False, True, False])
    clamped = False
    with torch.inference_mode():
        actor = policy.rollout_actor()
        assert actor.c_step is not None and actor.c_step.gaussian
        for t, st in enumerate((starts, np.zeros(B, bool))):
            obs = torch.randn(B, 3, generator=g) * 2
            step = actor.act(obs, state, st, deterministic=deterministic,
                             generator=torch.Generator().manual_seed(t))  # fmt: skip
            _, ref_state, dist = reference_step(
                policy.double(), obs.double(), LSTMState(state.h.double(), state.c.double()),
                torch.as_tensor(st),
            )  # fmt: skip
            policy.float()
            assert isinstance(dist, DiagGaussianDist)
            clamped |= bool((dist.log_std == 2.0).any())
            ref_actions = dist.mean
            if not deterministic:  # the float32 normals the step draws, in float64
                eps = torch.randn((B, 3), generator=torch.Generator().manual_seed(t)).double()
                ref_actions = dist.mean + eps * dist.log_std.exp()
            assert step.actions.dtype == torch.float32 and step.actions.shape == (B, 3)
            torch.testing.assert_close(step.actions.double(), ref_actions, rtol=0, atol=1e-5)
            torch.testing.assert_close(step.log_prob.double(), dist.log_prob(ref_actions),
                                       rtol=0, atol=1e-5)  # fmt: skip
            for got, want in zip(step.pi_state, ref_state):
                torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-6)
            state = step.pi_state
    assert clamped == state_dependent_std  # the layer's clamp at 2 was reached


@pytest.mark.parametrize("state_dependent_std", [False, True], ids=["param-std", "layer-std"])
@pytest.mark.parametrize("lstm_sharing", ["critics", "all"])
def test_c_gaussian_rollout_follows_the_pytorch_step(state_dependent_std, lstm_sharing):
    """Same generator, same draws: over a rollout with episode resets the C step's actions,
    log-probabilities, states and critic inputs are the PyTorch step's to float rounding, and
    the generator's state afterwards is the same (switching paths never shifts the stream)."""
    policy = policy_of(space=spaces.Box(-1.0, 1.0, (2,), np.float32), lstm_sharing=lstm_sharing,
                       state_dependent_std=state_dependent_std, log_std_init=-0.5)  # fmt: skip
    n, g_c, g_t = 6, torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    with torch.inference_mode():
        actor = policy.rollout_actor()
        torch_actor = policy.rollout_actor()
        torch_actor.c_step = None
        s_c = s_t = policy.initial_state(n).pi
        for t in range(30):
            obs = torch.randn(n, 3, generator=torch.Generator().manual_seed(100 + t))
            starts = np.arange(n) == t % n
            a = actor.act(obs, s_c, starts, generator=g_c)
            b = torch_actor.act(obs, s_t, starts, generator=g_t)
            torch.testing.assert_close(a.actions, b.actions, rtol=0, atol=1e-6)
            torch.testing.assert_close(a.log_prob, b.log_prob, rtol=0, atol=1e-5)
            for got, want in zip(a.pi_state, b.pi_state):
                torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
            if lstm_sharing == "all":
                torch.testing.assert_close(a.critic_input, b.critic_input, rtol=0, atol=1e-6)
            s_c, s_t = a.pi_state, b.pi_state
    assert torch.equal(g_c.get_state(), g_t.get_state())


def test_c_gaussian_step_clamps_the_log_std_layer_at_both_ends():
    """A state-dependent log-std beyond [-20, 2] is clamped as ``ActionHead`` clamps it: the
    log-probabilities are the PyTorch step's (without the clamp they differ by 10 nats)."""
    policy = gaussian_policy(state_dependent_std=True, A=2)
    layer = policy.action_head.log_std_layer
    assert layer is not None
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.copy_(torch.tensor([-30.0, 5.0]))
    obs, state, starts = torch.randn(B, 3), random_state(torch.Generator()), np.zeros(B, bool)
    with torch.inference_mode():
        actor = policy.rollout_actor()
        torch_actor = policy.rollout_actor()
        torch_actor.c_step = None
        a, b = (
            x.act(obs, state, starts, generator=torch.Generator().manual_seed(3))
            for x in (actor, torch_actor)
        )
    torch.testing.assert_close(a.actions, b.actions, rtol=0, atol=1e-6)
    torch.testing.assert_close(a.log_prob, b.log_prob, rtol=0, atol=1e-4)


def test_c_gaussian_step_returns_the_raw_sample_and_its_log_prob():
    """Actions outside the Box are kept as sampled (the rollout clips only what the env
    receives), with the log-probability of the unclipped sample."""
    policy = gaussian_policy(A=1)
    with torch.no_grad():
        assert policy.action_head.log_std is not None
        policy.action_head.log_std.fill_(1.0)  # std e: most samples leave [-1, 1]
    with torch.inference_mode():
        actor = policy.rollout_actor()
        obs, state = torch.randn(B, 3), policy.initial_state(B).pi
        step = actor.act(obs, state, np.ones(B, bool), generator=torch.Generator())
        dist = policy.action_head(policy.actor_mlp(step.pi_state.h[0]))
    assert bool((step.actions.abs() > 1).any())
    torch.testing.assert_close(step.log_prob, dist.log_prob(step.actions), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(layers=2), dict(activation="gelu")], ids=["2-layers", "gelu"])
def test_where_the_c_gaussian_step_does_not_apply_the_pytorch_step_runs(kw):
    policy = policy_of(space=spaces.Box(-1.0, 1.0, (2,), np.float32), **kw)
    with torch.inference_mode():
        actor = policy.rollout_actor()
        assert actor.c_step is None
        step = actor.act(torch.randn(4, 3), policy.initial_state(4).pi, np.zeros(4, bool),
                         generator=torch.Generator())  # fmt: skip
    assert step.actions.shape == (4, 2) and bool(torch.isfinite(step.log_prob).all())


def test_without_the_c_kernel_the_gaussian_actor_takes_the_pytorch_step(monkeypatch):
    """No compiler (or ``RISKPPO_NATIVE=0``): no C step is built and the rollout still runs,
    drawing what the C step would have drawn."""
    policy = gaussian_policy()
    obs, state, starts = torch.randn(B, 3), random_state(torch.Generator()), np.zeros(B, bool)
    with torch.inference_mode():
        c_step = policy.rollout_actor().act(obs, state, starts, generator=torch.Generator())
        monkeypatch.setattr(native, "_state", {"lib": None, "reason": "RISKPPO_NATIVE=0"})
        actor = policy.rollout_actor()
        assert actor.c_step is None
        torch_step = actor.act(obs, state, starts, generator=torch.Generator())
    torch.testing.assert_close(c_step.actions, torch_step.actions, rtol=0, atol=1e-6)


def test_with_gradients_asked_for_the_gaussian_actor_is_differentiable():
    policy = gaussian_policy()
    actor = policy.rollout_actor()
    assert actor.c_step is not None
    step = actor.act(torch.randn(4, 3), policy.initial_state(4).pi, np.zeros(4, bool))
    assert step.log_prob.requires_grad and step.actions.requires_grad
