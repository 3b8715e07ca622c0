"""The fused rollout actor step against the module path it replaces.

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

from riskppo.algo.update import clip_groups
from riskppo.config import PolicyConfig
from riskppo.nn.policy import RecurrentActorCritic
from riskppo.nn.recurrent import LSTMState
from riskppo.optim.step import AdamTail, adam_step
from tests.compilers import needs_c_kernel

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


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_direct_fused_adam_step_is_bit_identical_to_step(name):
    """``optimizer_step`` (torch's fused Adam kernel called directly, its lists reused from the
    previous call) = ``optimizer.step()``: parameters and optimizer state bit for bit over
    several steps, a changed lr and a step where one parameter has no gradient included."""
    from riskppo.optim import build_optimizer
    from riskppo.optim.step import _fused_adam_lists, optimizer_step

    torch.manual_seed(0)
    shapes = [(8, 3), (8,), (4, 8), (4,)]
    start = [torch.randn(s) for s in shapes]
    runs = []
    for direct in (False, True):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = build_optimizer(name, params, lr=1e-2, weight_decay=0.1, eps=1e-5, fused=True)
        g = torch.Generator().manual_seed(1)
        lists = None
        for i in range(6):
            for q in params:
                q.grad = torch.randn(q.shape, generator=g)
            if i == 2:
                opt.param_groups[0]["lr"] = 3e-3
            if i == 4:
                params[1].grad = None  # step() leaves it alone; the reused lists must not
            if direct:
                lists = optimizer_step(opt, lists)
            else:
                opt.step()
        assert _fused_adam_lists(opt) is not None  # the direct call applies after the first step
        runs.append((params, opt.state_dict()["state"]))
    (p0, s0), (p1, s1) = runs
    for a, b in zip(p0, p1):
        assert torch.equal(a, b)
    for k in s0:
        for field in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(s0[k][field], s1[k][field]), (k, field)


def _adam_context(name: str, grad_clip: str = "per_group"):
    from riskppo import DistributionalPPO
    from riskppo.algo.update import UpdateContext
    from riskppo.optim.step import optimizer_step

    model = DistributionalPPO("CartPole-v1", seed=0, compile=True, n_envs=2, n_steps=8,
                              batch_size=16, lstm_hidden_size=8, net_arch=[8], optimizer=name,
                              weight_decay=0.05, grad_clip=grad_clip)  # fmt: skip
    ctx = UpdateContext(model.config, model.policy, model.critic, model.optimizer,
                        torch.Generator(), 0.01)  # fmt: skip
    g = torch.Generator().manual_seed(9)
    for _ in range(2):  # optimizer state and the fused-Adam lists exist
        for q in ctx.params:
            q.grad = torch.randn(q.shape, generator=g) * 0.01
        ctx.adam = optimizer_step(ctx.optimizer, ctx.adam)
    return model, ctx


def _tails(ctx, allow_c: bool) -> AdamTail:
    """The update's tail for ``ctx`` (no VGS, no ``target_kl``), the C tail allowed or not."""
    return AdamTail(ctx.cfg.ppo.max_grad_norm, ctx.cfg.ppo.grad_clip == "per_group", allow_c)


@needs_c_kernel()
@pytest.mark.parametrize("grad_clip", ["per_group", "global"])
@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_c_clip_and_adam_equals_the_pytorch_tail(name, grad_clip):
    """``compile: true``'s C tail (norms, finite check, clipping per clip group or global,
    Adam/AdamW with weight decay) against the PyTorch tail from the same state: parameters,
    moments, step counts and the logged norms to float rounding, over steps with and without
    clipping (the critic's gradients 100 times the actor's in one of them, so that per-group
    clipping clips one group and not the other); a non-finite loss takes no step and changes
    nothing. (C sums the squares in float64, torch's ``_foreach_norm`` in float32: the clip
    factor, and so the moments, differ in the 6th digit.)"""
    (ma, a), (mb, b) = _adam_context(name, grad_clip), _adam_context(name, grad_clip)
    in_c, in_torch = _tails(a, allow_c=True), _tails(b, allow_c=False)
    g = torch.Generator().manual_seed(4)
    critic = {id(q) for q in clip_groups(a.policy)["critic"]}
    for scale, loss, critic_x in [(0.01, 1.0, 1.0), (30.0, 2.0, 1.0), (0.1, float("nan"), 1.0),
                                  (0.001, 0.7, 1e4), (5.0, 0.5, 1.0)]:  # fmt: skip
        grads = [
            torch.randn(q.shape, generator=g) * scale * (critic_x if id(q) in critic else 1.0)
            for q in a.params
        ]
        for ctx in (a, b):
            for q, gr in zip(ctx.params, grads):
                q.grad = gr.clone()
        stats = torch.tensor([loss, 0.3])
        before = [q.detach().clone() for q in a.params]
        got, want = adam_step(a, stats, in_c), adam_step(b, stats, in_torch)
        if loss != loss:
            assert got == want == ("nonfinite", None)
            assert all(torch.equal(q, p0) for q, p0 in zip(a.params, before))
            continue
        assert (got.path, want.path) == ("c", "fused")
        norms = got.norms
        torch.testing.assert_close(norms, want.norms, rtol=1e-6, atol=0)
        for x, y in zip(a.params, b.params):
            torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-7)
        for x, y in zip(a.params, b.params):
            sa, sb = a.optimizer.state[x], b.optimizer.state[y]
            assert float(sa["step"]) == float(sb["step"])
            torch.testing.assert_close(sa["exp_avg"], sb["exp_avg"], rtol=1e-4, atol=1e-9)
            torch.testing.assert_close(sa["exp_avg_sq"], sb["exp_avg_sq"], rtol=1e-4, atol=1e-12)
    assert float(norms[-2]) > float(norms[-1])  # the last step was clipped
    ma.close()
    mb.close()


@needs_c_kernel()
@pytest.mark.parametrize(
    "loss, bad_grad",
    [(float("inf"), None), (1.0, float("nan")), (1.0, float("inf")), (1.0, -float("inf"))],
)
def test_c_tail_takes_no_step_on_a_non_finite_loss_or_gradient(loss, bad_grad):
    """The C tail's finite check covers the loss and every gradient entry: one non-finite value
    and nothing moves: the parameters, Adam's moments and step counts stay as they were
    (clipping by an infinite norm would otherwise write NaN into every parameter)."""
    model, ctx = _adam_context("adam")
    g = torch.Generator().manual_seed(5)
    for q in ctx.params:
        q.grad = torch.randn(q.shape, generator=g) * 0.1
    if bad_grad is not None:
        ctx.params[-1].grad.view(-1)[0] = bad_grad
    state = ctx.optimizer.state
    keys = ("exp_avg", "exp_avg_sq", "step")
    before = [(q.detach().clone(), *(state[q][k].clone() for k in keys)) for q in ctx.params]
    assert adam_step(ctx, torch.tensor([loss, 0.3]), _tails(ctx, True)) == ("nonfinite", None)
    after = [(q.detach(), *(state[q][k] for k in keys)) for q in ctx.params]
    for b, a in zip(before, after):
        assert all(torch.equal(x, y) for x, y in zip(b, a))
    model.close()


def _grads(ctx, g: torch.Generator, scale: float) -> None:
    for q in ctx.params:
        q.grad = torch.randn(q.shape, generator=g) * scale


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_step_equals_clip_grad_norm_and_torch_optim(name):
    """``adam_step`` without the C tail: the first step (no optimizer state yet) on the
    ``torch`` path, the later ones on the ``fused`` path, equal torch's ``clip_grad_norm_`` and
    a ``torch.optim.Adam``/``AdamW`` step bit for bit, clipped steps and unclipped ones."""
    from riskppo import DistributionalPPO
    from riskppo.algo.update import UpdateContext

    model = DistributionalPPO("CartPole-v1", seed=0, n_envs=2, n_steps=8, batch_size=16,
                              lstm_hidden_size=8, net_arch=[8], optimizer=name,
                              weight_decay=0.05, grad_clip="global")  # fmt: skip
    ctx = UpdateContext(model.config, model.policy, model.critic, model.optimizer,
                        torch.Generator(), 0.01)  # fmt: skip
    group = ctx.optimizer.param_groups[0]
    ref_params = [torch.nn.Parameter(q.detach().clone()) for q in ctx.params]
    ref = (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(
        ref_params, lr=group["lr"], betas=group["betas"], eps=group["eps"],
        weight_decay=group["weight_decay"], fused=True,
    )  # fmt: skip
    max_norm = ctx.cfg.ppo.max_grad_norm
    g = torch.Generator().manual_seed(2)
    paths = []
    for scale in (0.01, 10.0, 0.001, 5.0):
        _grads(ctx, g, scale)
        for r, q in zip(ref_params, ctx.params):
            r.grad = q.grad.clone()
        paths.append(adam_step(ctx, torch.tensor([1.0]), _tails(ctx, False)).path)
        torch.nn.utils.clip_grad_norm_(ref_params, max_norm)
        ref.step()
        assert all(torch.equal(q, r) for q, r in zip(ctx.params, ref_params))
    assert paths == ["torch", "fused", "fused", "fused"]
    model.close()


@needs_c_kernel()
def test_adam_step_takes_the_c_tail_only_where_its_table_says():
    """``compile: true`` with no hook: ``c``; not allowed, or a ``target_kl`` check or a
    VGS between the guard and the clip: ``fused`` (a check that declines: ``stopped``, nothing
    moves); an optimizer hook: ``torch``."""
    model, ctx = _adam_context("adam")
    g = torch.Generator().manual_seed(6)
    tail = _tails(ctx, True)
    scaled = []
    cases = [
        (tail, "c"),
        (tail._replace(allow_c=False), "fused"),
        (tail._replace(stop=lambda: False), "fused"),
        (tail._replace(scale=lambda: scaled.append(1)), "fused"),
    ]
    for case, path in cases:
        _grads(ctx, g, 0.01)
        assert adam_step(ctx, torch.tensor([1.0]), case).path == path
    assert scaled == [1]
    _grads(ctx, g, 0.01)
    before = [q.detach().clone() for q in ctx.params]
    assert adam_step(ctx, torch.tensor([1.0]), tail._replace(stop=lambda: True)) == (
        "stopped", None
    )  # fmt: skip
    assert all(torch.equal(q, p0) for q, p0 in zip(ctx.params, before))
    hook = ctx.optimizer.register_step_post_hook(lambda *_: None)
    ctx.adam = ctx.c_adam = None  # the cached lists are dropped when the optimizer changes
    assert adam_step(ctx, torch.tensor([1.0]), tail._replace(allow_c=False)).path == "torch"
    hook.remove()
    model.close()


def test_the_update_allows_the_c_tail_only_under_compile_and_without_hooks():
    """The update's :class:`AdamTail`: the C tail allowed under ``compile: true`` only; a
    ``target_kl`` check that stops (and records) a minibatch whose k3 KL exceeds it; the VGS's
    scaling as the ``scale`` hook."""
    from riskppo.algo.update import UpdateMetrics, _tail
    from riskppo.config import apply_overrides
    from riskppo.optim import VarianceGradientScaler

    model, ctx = _adam_context("adam")
    stats, names = torch.tensor([1.0, 0.02]), ["loss", "approx_kl_k3"]
    for sets, allow_c in (([], True), (["compile=false"], False)):
        ctx.cfg = apply_overrides(model.config, sets)
        tail = _tail(ctx, UpdateMetrics(), stats, names)
        assert (tail.allow_c, tail.stop, tail.scale) == (allow_c, None, None)
    for target_kl, stops in ((0.03, False), (0.01, True)):
        ctx.cfg = apply_overrides(model.config, [f"ppo.target_kl={target_kl}"])
        m = UpdateMetrics()
        tail = _tail(ctx, m, stats, names)
        assert tail.stop is not None and tail.stop() is stops
        assert m.early_stop_kl == (pytest.approx(0.02) if stops else None)
    ctx.vgs = VarianceGradientScaler(ctx.params, beta=0.9, eps=1e-8, alpha=1.0, warmup_steps=0,
                                     min_scale=0.1)  # fmt: skip
    assert _tail(ctx, UpdateMetrics(), stats, names).scale == ctx.vgs.scale_
    model.close()
