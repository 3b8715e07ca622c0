"""The fused rollout actor step (issue 18) against the module path it replaces.

Reference: ``torch.lstm_cell`` per layer from the masked state, then ``actor_mlp`` and
``action_head`` as modules. The fused step must give the same latent and state (float64: 1e-12),
the same distribution from that latent (bit for bit) and, with the same generator, the same
sampled actions; resets come from a NumPy or a tensor ``episode_start`` alike, and the input
state is never modified.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo.config import PolicyConfig
from riskppo.nn.policy import RecurrentActorCritic
from riskppo.nn.recurrent import LSTMState

SPACES = {
    "discrete": spaces.Discrete(3),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
}


def reference_step(policy: RecurrentActorCritic, obs, state: LSTMState, starts: torch.Tensor):
    lstm = policy.actor_lstm
    keep = (~starts.bool()).to(obs.dtype).view(1, -1, 1)
    h0, c0 = state.h * keep, state.c * keep
    inp, hs, cs = obs, [], []
    for layer in range(lstm.n_layers):
        p = [
            getattr(lstm, f"{n}_l{layer}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]
        inp, c = torch.lstm_cell(inp, (h0[layer], c0[layer]), *p)
        hs.append(inp)
        cs.append(c)
    dist = policy.action_head(policy.actor_mlp(inp))
    return inp, LSTMState(torch.stack(hs), torch.stack(cs)), dist


@pytest.mark.parametrize("space", list(SPACES))
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("numpy_starts", [True, False])
def test_fused_step_equals_the_module_step(space, layers, numpy_starts):
    torch.manual_seed(layers)
    cfg = PolicyConfig(lstm_hidden_size=8, n_lstm_layers=layers, net_arch=[8, 8],
                       state_dependent_std=space == "box")  # fmt: skip
    obs_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    policy = RecurrentActorCritic(obs_space, SPACES[space], cfg, n_critics=2, critic_out=4)
    policy = policy.double()
    B = 5
    state = LSTMState(
        torch.randn(layers, B, 8, dtype=torch.float64),
        torch.randn(layers, B, 8, dtype=torch.float64),
    )
    before = LSTMState(state.h.clone(), state.c.clone())
    actor = policy.rollout_actor()
    for starts_np in (np.array([True, False, False, True, False]), np.zeros(B, bool)):
        obs = torch.randn(B, 3, dtype=torch.float64)
        starts = starts_np if numpy_starts else torch.as_tensor(starts_np)
        with torch.no_grad():
            latent, ref_state, ref_dist = reference_step(
                policy, obs, state, torch.as_tensor(starts_np)
            )
            g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
            step = actor.act(obs, state, starts, generator=g1)
            ref_actions = ref_dist.sample(g2)
        torch.testing.assert_close(step.pi_state.h, ref_state.h, rtol=0, atol=1e-12)
        torch.testing.assert_close(step.pi_state.c, ref_state.c, rtol=0, atol=1e-12)
        torch.testing.assert_close(step.pi_state.h[-1], latent, rtol=0, atol=1e-12)
        torch.testing.assert_close(step.actions, ref_actions, rtol=0, atol=1e-12)
        torch.testing.assert_close(
            step.log_prob, ref_dist.log_prob(step.actions), rtol=0, atol=1e-12
        )
        # state untouched: the collector keeps it as a chunk's initial state
        assert torch.equal(state.h, before.h) and torch.equal(state.c, before.c)
    # the policy's own act() is the same step
    with torch.no_grad():
        a = policy.act(obs, state, starts, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a.log_prob, step.log_prob, rtol=0, atol=0)


def test_fused_step_bitwise_mlp_and_head_from_its_latent():
    """Given the latent, the fused MLP + head (addmm on transposed views) = F.linear, bitwise."""
    torch.manual_seed(0)
    cfg = PolicyConfig(lstm_hidden_size=16, net_arch=[32])
    obs_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    policy = RecurrentActorCritic(obs_space, spaces.Discrete(2), cfg, n_critics=2, critic_out=4)
    actor = policy.rollout_actor()
    x = torch.randn(8, 16)
    with torch.no_grad():
        ref = policy.action_head(policy.actor_mlp(x)).logits
        h = x
        for layer in actor.mlp:
            h = torch.addmm(layer[1], h, layer[0]) if isinstance(layer, tuple) else layer(h)
        got = actor.head.distribution(torch.addmm(actor.net[1], h, actor.net[0]), h).logits
    assert torch.equal(got, ref)
