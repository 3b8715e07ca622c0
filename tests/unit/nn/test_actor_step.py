"""The rollout's actor step in C (:mod:`riskppo.nn.actor_step`) against the float64
module path: ``torch.lstm_cell`` from the masked state, ``actor_mlp`` and ``action_head`` as
modules, :meth:`CategoricalDist.sample` with the same generator.

Given the same uniforms, the C step picks the same actions (a uniform within float rounding
of a CDF boundary could pick the neighbour; the draws here are far from any), with
log-probabilities and the new state to float32 rounding; where it does not apply (2 LSTM
layers, GELU, a MultiDiscrete action, gradients asked for, float64) the PyTorch step runs. The
Gaussian head's C step: tests/unit/nn/test_actor_step_gauss.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo.config import PolicyConfig
from riskppo.nn.policy import RecurrentActorCritic
from riskppo.nn.recurrent import LSTMState
from tests.compilers import needs_c_kernel
from tests.unit.algo.test_fused_step import reference_step

pytestmark = needs_c_kernel()


def policy_of(activation="tanh", net_arch=(16, 8), n_actions=5, layers=1, seed=0, space=None,
              **policy_kw):  # fmt: skip
    torch.manual_seed(seed)
    cfg = PolicyConfig(lstm_hidden_size=12, n_lstm_layers=layers, net_arch=list(net_arch),
                       activation=activation, **policy_kw)  # fmt: skip
    obs_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    space = space or spaces.Discrete(n_actions)
    return RecurrentActorCritic(obs_space, space, cfg, n_critics=2, critic_out=4)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("net_arch", [(16, 8), (), (20,)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_c_step_equals_the_float64_module_step(activation, net_arch, deterministic):
    policy = policy_of(activation, net_arch)
    B = 9
    g = torch.Generator().manual_seed(1)
    state = LSTMState(torch.randn(1, B, 12, generator=g), torch.randn(1, B, 12, generator=g))
    before = LSTMState(state.h.clone(), state.c.clone())
    starts = np.array([True, False, False, True, False, False, False, True, False])
    with torch.inference_mode():
        actor = policy.rollout_actor()
        assert actor.c_step is not None
        for t, st in enumerate((starts, np.zeros(B, bool))):
            obs = torch.randn(B, 3, generator=g) * 2
            step = actor.act(obs, state, st, deterministic=deterministic,
                             generator=torch.Generator().manual_seed(t))  # fmt: skip
            ref_policy = policy.double()
            _, ref_state, dist = reference_step(
                ref_policy, obs.double(), LSTMState(state.h.double(), state.c.double()),
                torch.as_tensor(st),
            )  # fmt: skip
            if deterministic:
                ref_actions = dist.mode()
            else:  # the inverse CDF in float64 at the float32 uniforms the step draws
                u = torch.rand((B, 1), generator=torch.Generator().manual_seed(t)).double()
                cdf = dist.logits.exp().cumsum(-1)
                ref_actions = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp(max=4).squeeze(-1)
            policy.float()
            assert torch.equal(step.actions, ref_actions)
            assert step.actions.dtype == torch.int64
            torch.testing.assert_close(step.log_prob.double(), dist.log_prob(ref_actions),
                                       rtol=0, atol=2e-6)  # fmt: skip
            for got, want in zip(step.pi_state, ref_state):
                torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-6)
            assert torch.equal(state.h, before.h) and torch.equal(state.c, before.c)


def test_c_step_draws_what_the_pytorch_step_draws():
    """Same generator, same draws: a rollout's actions and the generator's state afterwards are
    those of the PyTorch step (so switching paths never shifts the random stream)."""
    policy = policy_of(n_actions=3)
    B, g_c, g_t = 6, torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    state = policy.initial_state(B).pi
    with torch.inference_mode():
        actor = policy.rollout_actor()
        torch_actor = policy.rollout_actor()
        torch_actor.c_step = None
        s_c = s_t = state
        for t in range(30):
            obs = torch.randn(B, 3, generator=torch.Generator().manual_seed(100 + t))
            starts = np.arange(B) == t % B
            a = actor.act(obs, s_c, starts, generator=g_c)
            b = torch_actor.act(obs, s_t, starts, generator=g_t)
            assert torch.equal(a.actions, b.actions)
            torch.testing.assert_close(a.log_prob, b.log_prob, rtol=0, atol=1e-6)
            s_c, s_t = a.pi_state, b.pi_state
    assert torch.equal(g_c.get_state(), g_t.get_state())


@pytest.mark.parametrize(
    "kw",
    [
        dict(layers=2),
        dict(activation="gelu"),
        dict(space=spaces.MultiDiscrete([2, 3])),
        dict(layers=2, space=spaces.Box(-1.0, 1.0, (2,), np.float32)),
        dict(activation="gelu", space=spaces.Box(-1.0, 1.0, (2,), np.float32)),
    ],
    ids=["2-layers", "gelu", "multidiscrete", "box-2-layers", "box-gelu"],
)
def test_c_step_is_not_built_where_it_does_not_apply(kw):
    with torch.inference_mode():
        assert policy_of(**kw).rollout_actor().c_step is None
        assert policy_of(**kw).double().rollout_actor().c_step is None


def test_with_gradients_asked_for_the_pytorch_step_runs():
    """The C step has no backward: with grad enabled the step is differentiable, as before."""
    policy = policy_of()
    actor = policy.rollout_actor()
    assert actor.c_step is not None
    step = actor.act(torch.randn(4, 3), policy.initial_state(4).pi, np.zeros(4, bool))
    assert step.log_prob.requires_grad
