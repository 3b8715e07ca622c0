"""Gradient accumulation (``ppo.grad_accum_steps``) through the real ``apply_minibatch``:
the same gradient and step as the full batch."""

from __future__ import annotations

import copy

import pytest
import torch

from riskppo.algo.bc import BCInputs
from riskppo.algo.buffer import ChunkBatch
from riskppo.algo.update import UpdateContext, UpdateMetrics, apply_minibatch
from riskppo.config import Config
from riskppo.nn.critics import build_critic
from riskppo.nn.policy import RecurrentActorCritic

F64 = torch.float64


def _accum_cfg(accum: int) -> Config:
    # The config's own batching must be valid for ``accum``; the minibatch handed to
    # apply_minibatch below is built separately (and may split unevenly).
    return Config.build(
        {
            "env": {"n_envs": 12},
            "ppo": {
                "n_steps": 8,
                "bptt_len": 8,
                "batch_size": 96,
                "grad_accum_steps": accum,
                "max_grad_norm": 1e9,  # no clipping: the gradients are compared as accumulated
                "ent_coef": 0.01,
                "clip_range_vf": 0.1,
                "vf_clip_mode": "per_quantile",
            },
            "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
            "critic": {"kind": "quantile", "n_quantiles": 8, "twin": True},
            "bc": {"bc_coef": 0.1},
        }
    )


def _apply(base: RecurrentActorCritic, mb: ChunkBatch, accum: int):
    cfg = _accum_cfg(accum)
    policy = copy.deepcopy(base)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    ctx = UpdateContext(
        cfg,
        policy,
        build_critic(cfg.critic),
        opt,
        torch.Generator().manual_seed(0),
        0.01,
        bc=BCInputs(cfg.bc.bc_coef, False),  # the rollout (AWR) BC term, as the loop passes it
    )
    out = apply_minibatch(ctx, mb, UpdateMetrics())
    assert out is not None
    grads = torch.cat([p.grad.flatten() for p in policy.parameters()])
    params = torch.cat([p.detach().flatten() for p in policy.parameters()])
    return out, grads, params


@pytest.mark.parametrize(("n_chunks", "accum"), [(12, 4), (5, 2), (5, 3)])
def test_apply_minibatch_accumulated_gradient_equals_full_batch(
    n_chunks, accum, tiny_policy, random_chunk_batch
):
    """R-ALG-13 through the real minibatch code: ``apply_minibatch`` with ``grad_accum_steps`` >
    1 leaves the same gradient, loss, stats and step as with 1 (≤ 1e-6 relative, float64). 5
    chunks in 2 or 3 micro-batches split unevenly (3+2, 2+2+1), so only weighting each
    micro-batch by its share of the samples gives the full-batch gradient.
    Mutations: ``share = 1.0`` (sum of micro losses) and ``share = 1 / grad_accum_steps`` (equal
    weights) in ``apply_minibatch``; both fail here."""
    policy = _accum_cfg(1).policy
    base = tiny_policy(critic_out=8, seed=0, **policy.model_dump()).double()
    mb = random_chunk_batch(base, n_chunks)
    full, g_full, p_full = _apply(base, mb, 1)
    acc, g_acc, p_acc = _apply(base, mb, accum)
    assert float(g_full.norm()) > 0.0
    assert float((g_acc - g_full).norm() / g_full.norm()) <= 1e-6
    torch.testing.assert_close(p_acc, p_full, rtol=0, atol=1e-9)
    for key in ("loss", "policy_loss", "value_loss", "bc_loss", "grad_norm_pre_clip"):
        assert acc[key] == pytest.approx(full[key], rel=1e-6), key
