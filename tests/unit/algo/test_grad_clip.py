"""Gradient clipping per clip group (``ppo.grad_clip: per_group``, the default) and global.

The default trading run's critic and risk-head gradient norms are about 100 times the actor's; one
global clip to ``max_grad_norm`` then shrinks the actor's gradient below Adam's ``eps``. Per group,
each of actor, critic and risk head is clipped on its own: a large critic gradient leaves the
actor's as it is."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo.algo.update import clip_groups
from riskppo.optim.step import AdamTail, adam_step


@pytest.mark.parametrize("sharing", ["none", "critics", "all"])
@pytest.mark.parametrize("risk_head", [False, True])
def test_clip_groups_partition_the_parameters(sharing: str, risk_head: bool, tiny_policy) -> None:
    """Every parameter in exactly one group; the critic group holds the critics' LSTMs and heads,
    the risk head its own head, the actor the rest (the shared LSTM under sharing "all")."""
    act = spaces.Box(-1.0, 1.0, (1,), np.float32)
    policy = tiny_policy(act, critic_out=5, risk_head=risk_head, seed=None, lstm_hidden_size=4,
                         net_arch=[4], lstm_sharing=sharing)  # fmt: skip
    groups = clip_groups(policy)
    ids = [id(q) for ps in groups.values() for q in ps]
    assert sorted(ids) == sorted(id(q) for q in policy.parameters())  # each exactly once
    assert set(groups) == {"actor", "critic", *(["risk_head"] if risk_head else [])}
    actor = {id(q) for q in groups["actor"]}
    assert {id(q) for q in policy.actor_lstm.parameters()} <= actor
    assert {id(q) for q in policy.action_head.parameters()} <= actor
    critic = {id(q) for q in groups["critic"]}
    assert {id(q) for m in policy.critic_lstms for q in m.parameters()} <= critic
    assert {id(q) for q in policy.critic_outs[1].parameters()} <= critic
    if risk_head:
        assert {id(q) for q in groups["risk_head"]} == {
            id(q) for m in (policy.critic_mlps[2], policy.critic_outs[2]) for q in m.parameters()
        }


def _context(grad_clip: str):
    from riskppo import DistributionalPPO
    from riskppo.algo.update import UpdateContext

    model = DistributionalPPO("CartPole-v1", seed=0, n_envs=2, n_steps=8, batch_size=16,
                              lstm_hidden_size=8, net_arch=[8], grad_clip=grad_clip)  # fmt: skip
    ctx = UpdateContext(model.config, model.policy, model.critic, model.optimizer,
                        torch.Generator(), 0.01)  # fmt: skip
    return model, ctx


@pytest.mark.parametrize("grad_clip", ["per_group", "global"])
def test_a_large_critic_gradient_shrinks_the_actor_only_under_global_clipping(grad_clip):
    """Critic gradient norm 50, actor 0.2, max_grad_norm 0.5: per group the actor's gradient
    reaches the optimizer unchanged and the critic's is clipped to 0.5; globally both are scaled
    by 0.5 / 50.0004 (the actor's to 0.002). The logged clip-group norms are the pre-clip ones."""
    model, ctx = _context(grad_clip)
    groups = clip_groups(ctx.policy)
    g = torch.Generator().manual_seed(0)
    for name, norm in (("actor", 0.2), ("critic", 50.0)):
        raw = [torch.randn(q.shape, generator=g) for q in groups[name]]
        total = torch.linalg.vector_norm(torch.stack([r.norm() for r in raw]))
        for q, r in zip(groups[name], raw):
            q.grad = r * (norm / total)
    names = ["loss", *(f"{k}_grad_norm" for k in ctx.groups),
             *(f"{k}_pre_clip_norm" for k in ctx.clip_names), "pre", "post"]  # fmt: skip
    out = adam_step(
        ctx, torch.tensor([1.0]), AdamTail(ctx.cfg.ppo.max_grad_norm, grad_clip == "per_group")
    )
    assert out.norms is not None
    values = torch.cat([torch.tensor([1.0], dtype=torch.float64), out.norms])
    logged = dict(zip(names, values.tolist()))
    assert logged["actor_pre_clip_norm"] == pytest.approx(0.2, rel=1e-5)
    assert logged["critic_pre_clip_norm"] == pytest.approx(50.0, rel=1e-5)

    def after(name: str) -> float:
        return float(torch.linalg.vector_norm(torch.stack([q.grad.norm() for q in groups[name]])))

    if grad_clip == "per_group":
        assert after("actor") == pytest.approx(0.2, rel=1e-5)
        assert after("critic") == pytest.approx(0.5, rel=1e-5)
        assert logged["post"] == pytest.approx((0.2**2 + 0.5**2) ** 0.5, rel=1e-5)
    else:
        scale = 0.5 / (0.2**2 + 50.0**2) ** 0.5
        assert after("actor") == pytest.approx(0.2 * scale, rel=1e-5)
        assert after("critic") == pytest.approx(50.0 * scale, rel=1e-5)
        assert logged["post"] == pytest.approx(0.5, rel=1e-5)
    model.close()
