"""The critic heads run as stacked matmuls: same outputs and gradients as one MLP per head."""

from __future__ import annotations

import pytest
import torch
from gymnasium import spaces

from riskppo.config import PolicyConfig
from riskppo.nn.policy import RecurrentActorCritic


def per_head_reference(pol: RecurrentActorCritic, latents: list[torch.Tensor]) -> torch.Tensor:
    """Each head's own ``out(body(x))``, stacked: the plain definition."""
    if len(latents) == 1:
        latents = latents * len(pol.critic_outs)
    elif pol.has_risk_head:
        latents = [*latents, latents[0]]
    return torch.stack([o(b(x)) for b, o, x in zip(pol.critic_mlps, pol.critic_outs, latents)])


@pytest.mark.parametrize("sharing", ["critics", "none"])
@pytest.mark.parametrize("net_arch", [[], [8], [8, 6]])
@pytest.mark.parametrize("risk_head", [False, True])
def test_stacked_heads_equal_per_head_mlps(sharing: str, net_arch: list[int], risk_head: bool):
    torch.manual_seed(0)
    cfg = PolicyConfig(
        lstm_hidden_size=5, net_arch=net_arch, lstm_sharing=sharing, activation="relu"
    )
    pol = RecurrentActorCritic(
        spaces.Box(-1, 1, (3,)), spaces.Discrete(2), cfg, n_critics=2, critic_out=4,
        risk_head=risk_head,
    ).double()  # fmt: skip
    n_latents = 1 if sharing == "critics" else 2
    latents = [torch.randn(7, 3, 5, dtype=torch.float64, requires_grad=True)
               for _ in range(n_latents)]  # fmt: skip
    out = pol.critic_heads(latents)
    ref = per_head_reference(pol, latents)
    assert out.shape == ref.shape == (2 + int(risk_head), 7, 3, 4)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    w = torch.randn_like(out)
    grads = torch.autograd.grad((out * w).sum(), [*latents, *pol.parameters()], allow_unused=True)
    grads_ref = torch.autograd.grad(
        (ref * w).sum(), [*latents, *pol.parameters()], allow_unused=True
    )
    for g, r in zip(grads, grads_ref, strict=True):
        assert (g is None) == (r is None)
        if g is not None:
            torch.testing.assert_close(g, r, rtol=0, atol=1e-12)
