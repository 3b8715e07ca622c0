"""Test holes a code review found that need no environment (each fails when its bug returns).

Hole 2: gradient accumulation through the real ``apply_minibatch``; hole 3: AWR clamps the
exponent before ``exp``; hole 5: scalar-critic value clipping; hole 10: ``run_lstms`` parameter
gradients against ``torch.nn.LSTM`` with 2 layers. The mutation each test catches is named in its
docstring.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo.config import Config
from riskppo.core import awr_weights
from riskppo.data.buffer import ChunkBatch
from riskppo.nn.critics import build_critic
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.nn.recurrent import LSTMState, MaskedLSTM, run_lstms
from riskppo.train.bc import BCInputs
from riskppo.train.update import UpdateContext, UpdateMetrics, apply_minibatch

F64 = torch.float64


# ---- hole 2: gradient accumulation through apply_minibatch (R-ALG-13) -------------------------


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


def _random_batch(policy: RecurrentActorCritic, n_chunks: int, L: int = 8) -> ChunkBatch:
    g = torch.Generator().manual_seed(7)
    D, K, C = 3, 8, policy.n_critics

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=F64)

    starts = torch.rand(L, n_chunks, generator=g) < 0.2
    state = policy.initial_state(n_chunks)
    state = RecurrentState(
        LSTMState(randn(*state.pi.h.shape), randn(*state.pi.c.shape)),
        tuple(LSTMState(randn(*s.h.shape), randn(*s.c.shape)) for s in state.vf),
    )
    return ChunkBatch(
        obs=randn(L, n_chunks, D),
        actions=torch.randint(0, 2, (L, n_chunks), generator=g),
        old_log_probs=math.log(0.5) + 0.1 * randn(L, n_chunks),
        advantages=randn(L, n_chunks),
        targets=randn(L, n_chunks),
        old_critic=randn(C, L, n_chunks, K),
        episode_starts=starts,
        state=state,
        raw_advantages=3.0 * randn(L, n_chunks),
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
def test_apply_minibatch_accumulated_gradient_equals_full_batch(n_chunks, accum):
    """R-ALG-13 through the real minibatch code: ``apply_minibatch`` with ``grad_accum_steps`` >
    1 leaves the same gradient, loss, stats and step as with 1 (≤ 1e-6 relative, float64). 5
    chunks in 2 or 3 micro-batches split unevenly (3+2, 2+2+1), so only weighting each
    micro-batch by its share of the samples gives the full-batch gradient.
    Mutations: ``share = 1.0`` (sum of micro losses) and ``share = 1 / grad_accum_steps`` (equal
    weights) in ``apply_minibatch``; both fail here."""
    obs_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    cfg = _accum_cfg(1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        base = RecurrentActorCritic(
            obs_space, spaces.Discrete(2), cfg.policy, n_critics=2, critic_out=8
        ).double()
    mb = _random_batch(base, n_chunks)
    full, g_full, p_full = _apply(base, mb, 1)
    acc, g_acc, p_acc = _apply(base, mb, accum)
    assert float(g_full.norm()) > 0.0
    assert float((g_acc - g_full).norm() / g_full.norm()) <= 1e-6
    torch.testing.assert_close(p_acc, p_full, rtol=0, atol=1e-9)
    for key in ("loss", "policy_loss", "value_loss", "bc_loss", "grad_norm_pre_clip"):
        assert acc[key] == pytest.approx(full[key], rel=1e-6), key


# ---- hole 3: AWR clamps the exponent before exp (R-ALG-12, audit fix #4) ----------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_awr_weight_at_the_cap_is_exp_of_the_clamped_exponent(dtype):
    """w = exp(min(A/β, log max_weight)): above the cap the weight is ``exp`` of the rounded
    ``log(max_weight)`` — e.g. 100.00000000000004 in float64, 99 in bfloat16 — whereas clamping
    the weight after ``exp`` gives exactly ``max_weight`` (and overflows ``exp`` to inf on the
    way, 1e30/5 ≫ 709). The two orders agree in exact arithmetic, so the rounding at the cap is
    the observable difference; both stay finite on ±inf advantages.
    Mutation: ``torch.exp(adv.detach() / beta).clamp(max=max_weight)`` in ``core.awr_weights``."""
    beta, max_weight = 5.0, 100.0
    adv = torch.tensor([1e3, 1e30, math.inf, 5.0, -1e30, -math.inf], dtype=dtype)
    w = awr_weights(adv, beta=beta, max_weight=max_weight)
    assert w.dtype == dtype
    cap = torch.exp(torch.tensor(math.log(max_weight), dtype=dtype))
    assert float(cap) != max_weight  # the case where the two orders give different weights
    for i in range(3):  # every advantage above the cap, +inf included
        assert float(w[i]) == float(cap), (i, float(w[i]))
    assert float(w[3]) == float(torch.exp(torch.tensor(1.0, dtype=dtype)))
    assert float(w[4]) == 0.0 and float(w[5]) == 0.0
    assert bool(torch.isfinite(w).all())


# ---- hole 5: scalar-critic value clipping (R-ALG-5) --------------------------------------------


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
    pred = torch.tensor([[1.0], [0.2], [2.0], [-1.0]], dtype=F64)
    old = torch.zeros(4, 1, dtype=F64)
    target = torch.tensor([3.0, 1.0, 0.0, -2.0], dtype=F64)
    loss, clipped = critic.value_loss(pred, old, target, 0.5, mode)
    assert float(loss) == pytest.approx(13.14 / 4, rel=1e-12)
    assert float(clipped) == pytest.approx(0.75)
    # no clipping configured: plain MSE and nothing touched
    for clip, m in ((None, mode), (0.5, "none")):
        plain, touched = critic.value_loss(pred, old, target, clip, m)
        assert float(plain) == pytest.approx((4 + 0.64 + 4 + 1) / 4, rel=1e-12)
        assert float(touched) == 0.0


# ---- hole 10: run_lstms parameter gradients vs torch.nn.LSTM (2 layers, no resets) -------------


@pytest.mark.parametrize("n_lstms", [1, 2])
def test_run_lstms_parameter_gradients_match_nn_lstm_two_layers(n_lstms):
    """Outputs, final states and the gradients of every parameter, of the input and of the initial
    state equal ``torch.nn.LSTM``'s with the weights copied (2 layers, episode resets off — the
    kernel's folded no-reset backward path), for one LSTM and for a fused group of two.
    Mutations: ``layer_in = hs.detach()`` in ``run_lstms`` (layer-0 weights get no gradient from
    layer 1; outputs unchanged); ``dh = torch.bmm(dz_t[t], w_hh)`` in the no-reset branch of the
    kernel's backward (the output gradient ``d_hs[t-1]`` dropped)."""
    torch.manual_seed(3)
    T, B, D, H, layers = 7, 3, 4, 5, 2
    lstms = [MaskedLSTM(D, H, layers).double() for _ in range(n_lstms)]
    refs = []
    for m in lstms:
        ref = torch.nn.LSTM(D, H, layers).double()
        ref.load_state_dict(m.state_dict())
        refs.append(ref)
    x = torch.randn(T, B, D, dtype=F64)
    h0 = [torch.randn(layers, B, H, dtype=F64) for _ in lstms]
    c0 = [torch.randn(layers, B, H, dtype=F64) for _ in lstms]
    w_out = [torch.randn(T, B, H, dtype=F64) for _ in lstms]
    w_h = [torch.randn(layers, B, H, dtype=F64) for _ in lstms]
    w_c = [torch.randn(layers, B, H, dtype=F64) for _ in lstms]
    starts = torch.zeros(T, B, dtype=torch.bool)

    def leaves():
        return (
            x.clone().requires_grad_(True),
            [h.clone().requires_grad_(True) for h in h0],
            [c.clone().requires_grad_(True) for c in c0],
        )

    xa, ha, ca = leaves()
    results = run_lstms(lstms, xa, [LSTMState(h, c) for h, c in zip(ha, ca)], starts)
    loss = sum(
        (out * w_out[k]).sum() + (fin.h * w_h[k]).sum() + (fin.c * w_c[k]).sum()
        for k, (out, fin, _) in enumerate(results)
    )
    loss.backward()

    xb, hb, cb = leaves()
    ref_loss = 0.0
    ref_outs = []
    for k, ref in enumerate(refs):
        out, (h, c) = ref(xb, (hb[k], cb[k]))
        ref_outs.append((out, h, c))
        ref_loss = ref_loss + (out * w_out[k]).sum() + (h * w_h[k]).sum() + (c * w_c[k]).sum()
    ref_loss.backward()

    exact = dict(rtol=0, atol=1e-12)
    for k, (out, fin, _) in enumerate(results):
        r_out, r_h, r_c = ref_outs[k]
        torch.testing.assert_close(out, r_out, **exact)
        torch.testing.assert_close(fin.h, r_h, **exact)
        torch.testing.assert_close(fin.c, r_c, **exact)
        ref_params = dict(refs[k].named_parameters())
        for name, p in lstms[k].named_parameters():
            assert p.grad is not None, name
            assert float(p.grad.abs().sum()) > 0.0, name
            torch.testing.assert_close(p.grad, ref_params[name].grad, **exact, msg=name)
        torch.testing.assert_close(ha[k].grad, hb[k].grad, **exact)
        torch.testing.assert_close(ca[k].grad, cb[k].grad, **exact)
    torch.testing.assert_close(xa.grad, xb.grad, **exact)
