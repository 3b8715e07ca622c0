"""The critic heads run as stacked matmuls: same outputs and gradients as one MLP per head."""

from __future__ import annotations

import pytest
import torch
from gymnasium import spaces

from riskppo.config import Config, PolicyConfig
from riskppo.nn.critics import build_critic
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


def _scalar_critic():
    return build_critic(Config.build({"critic": {"kind": "scalar"}}).critic)


@pytest.mark.parametrize("mode", ["mean_only", "mean_and_variance"])
def test_scalar_critic_clipped_value_loss_by_hand(mode):
    """Element-wise max(unclipped, clipped) of squared errors, both against the unclipped target,
    clipped prediction old + clip(v − old, ±ε) (SB3). By hand, ε = 0.5, old = 0:

    ======  ======  ====  ==========  =============================  ================
    v       target  v_c   (v−t)²      (v_c−t)²                       max
    ======  ======  ====  ==========  =============================  ================
    1.0     3.0     0.5   4           6.25                           6.25 (clipped)
    0.2     1.0     0.2   0.64        0.64                           0.64
    2.0     0.0     0.5   4           0.25                           4 (unclipped)
    -1.0    -2.0    -0.5  1           2.25                           2.25 (clipped)
    ======  ======  ====  ==========  =============================  ================

    loss = 13.14 / 4 = 3.285; 3 of 4 samples clipped. The max of the two *means* (2.41 vs
    2.3475 → 2.41), the element-wise min (1.4725), either term alone (2.41, 2.3475) all give
    other numbers.
    Mutations: ``torch.minimum``; ``max(loss.mean(), loss_c.mean())``; returning ``loss_c`` only;
    dropping the clip (plain MSE) in ``ScalarCritic.value_loss``."""
    critic = _scalar_critic()
    pred = torch.tensor([[1.0], [0.2], [2.0], [-1.0]], dtype=torch.float64)
    old = torch.zeros(4, 1, dtype=torch.float64)
    target = torch.tensor([3.0, 1.0, 0.0, -2.0], dtype=torch.float64)
    loss, clipped = critic.value_loss(pred, old, target, 0.5, mode)
    assert float(loss) == pytest.approx(13.14 / 4, rel=1e-12)
    assert float(clipped) == pytest.approx(0.75)
    # no clipping configured: plain MSE and nothing touched
    for clip, m in ((None, mode), (0.5, "none")):
        plain, touched = critic.value_loss(pred, old, target, clip, m)
        assert float(plain) == pytest.approx((4 + 0.64 + 4 + 1) / 4, rel=1e-12)
        assert float(touched) == 0.0
