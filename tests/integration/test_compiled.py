"""The opt-in compiled update (``compile: true``) against the eager reference.

Fast tests check the traceable loss (run eagerly) and the unrolled LSTM against the eager loss
and the hand-written kernel for every feature the update has, and the eager fallbacks (a
feature that is not compiled, a compile that fails) with their logged reason. The tests that
actually compile are small; the CartPole trajectory is ``slow``. Tolerances: the traceable loss
run eagerly equals the eager loss to ``1e-6`` (only the risk head's masked mean is summed in
another order); compiled equals eager to ``rtol=1e-4, atol=1e-5`` (float32; inductor fuses and
reorders float ops).
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys

import pytest
import torch
from torch._dynamo.utils import counters

from riskppo import DistributionalPPO
from riskppo.algo import compiled
from riskppo.algo.bc import BCInputs
from riskppo.algo.buffer import ChunkBatch
from riskppo.algo.collect import collect_rollout
from riskppo.algo.constraints.cvar import RISK_TARGETS
from riskppo.algo.estimate import estimate
from riskppo.algo.loop import apply_rescales, reset_carry, train_iteration
from riskppo.algo.terms import update_terms
from riskppo.algo.update import UpdateContext, minibatch_loss
from riskppo.config import Config
from riskppo.nn.lstm_kernel import _MaskedLSTMRecurrence, unrolled_recurrence
from tests.compilers import needs_c_kernel, needs_cxx_compiler

TINY = dict(n_envs=2, n_steps=8, batch_size=8, bptt_len=4, n_epochs=1, lstm_hidden_size=8)
TINY.update(net_arch=[8], n_quantiles=8)

# (env, keywords): every feature that runs in the update, over three models
FEATURES = {
    "quantile-critics-risk-bc": (
        "CartPole-v1",
        dict(
            critic="quantile", lstm_sharing="critics", cvar_limit=10.0, cvar_alpha=0.25, bc_coef=0.1
        ),
    ),
    "categorical-none-clip": (
        "CartPole-v1",
        dict(critic="categorical", lstm_sharing="none", clip_range_vf=0.2),
    ),
    "scalar-all-box-2layers": (
        "Pendulum-v1",
        dict(critic="scalar", twin_critics=False, lstm_sharing="all", n_lstm_layers=2),
    ),
}


def batch_and_context(env: str, **kw) -> tuple[DistributionalPPO, UpdateContext, ChunkBatch]:
    model = DistributionalPPO(env, seed=0, **{**TINY, **kw})
    model.state = reset_carry(model.learner(), model.state)
    cfg = model.config
    rollout, _, _ = collect_rollout(
        model.policy, model.env, model.state.carry, cfg.ppo.n_steps, cfg.ppo.chunk_len,
        model.state.rng.sample,
    )  # fmt: skip
    est = estimate(cfg, model.policy, model.critic, model.state.scaling, rollout)
    apply_rescales(model.policy, est.rescales)
    data = est.data
    if model.policy.has_risk_head:  # segment targets, some unfinished (NaN)
        g = torch.Generator().manual_seed(1)
        y = torch.randn(data.targets.shape, generator=g)
        y[torch.rand(y.shape, generator=g) < 0.5] = float("nan")
        data.aux[RISK_TARGETS] = y
    bc = BCInputs(cfg.bc.bc_coef, False) if cfg.bc.bc_coef > 0 else None
    ctx = UpdateContext(
        cfg, model.policy, model.critic, model.optimizer, model.state.rng.shuffle, 0.01, bc=bc
    )
    return model, ctx, data


def loss_and_grads(model, fn, ctx, mb):
    model.policy.zero_grad(set_to_none=True)
    loss, stats, n_bad = fn(ctx, mb)
    loss.backward()
    grads = [p.grad.clone() for p in model.policy.parameters()]
    return loss.detach(), {k: v.detach().clone() for k, v in stats.items()}, n_bad, grads


def traced_eager(ctx, mb):
    """The traceable loss without compiling (the eager LSTM kernel runs inside)."""
    terms = tuple((t, torch.tensor(c)) for t, c in update_terms(ctx, ctx.constraint_terms))
    loss, stats, n_bad = compiled.traced_minibatch_loss(
        ctx.cfg, ctx.policy, ctx.critic, mb, torch.tensor(ctx.ent_coef), terms
    )
    return loss, stats, int(n_bad)


def assert_same(ref, got, rtol, atol):
    (l0, s0, n0, g0), (l1, s1, n1, g1) = ref, got
    torch.testing.assert_close(l1, l0, rtol=rtol, atol=atol)
    assert n1 == n0
    assert set(s1) == set(s0)
    for k in s0:
        torch.testing.assert_close(s1[k].to(s0[k].dtype), s0[k], rtol=rtol, atol=atol, msg=k)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", list(FEATURES))
def test_traceable_loss_equals_the_eager_loss(name):
    """The branch-free, sync-free rewrite gives the eager loss, stats and gradients (1e-6)."""
    env, kw = FEATURES[name]
    model, ctx, mb = batch_and_context(env, **kw)
    ref = loss_and_grads(model, minibatch_loss, ctx, mb)
    got = loss_and_grads(model, traced_eager, ctx, mb)
    assert float(ref[0]) != 0.0
    assert_same(ref, got, rtol=1e-6, atol=1e-6)
    if model.policy.has_risk_head:  # the risk term is really in the loss
        assert float(ref[1]["value_loss"]) > 0.0
    model.close()


@pytest.mark.parametrize("K", [1, 3])
def test_unrolled_recurrence_equals_the_kernel(K):
    """The traceable LSTM (what compiling traces) = the hand-written kernel: values and gradients
    (float64, 1e-12), with resets inside the sequence and from nonzero states."""
    torch.manual_seed(K)
    T, B, H = 6, 5, 4
    args = [
        torch.randn(T, K, B, 4 * H, dtype=torch.float64, requires_grad=True),
        torch.randn(K, 4 * H, H, dtype=torch.float64, requires_grad=True),
        torch.randn(K, B, H, dtype=torch.float64, requires_grad=True),
        torch.randn(K, B, H, dtype=torch.float64, requires_grad=True),
    ]
    keep = (torch.rand(T, B) > 0.3).double()
    keep[0, 0] = 0.0
    w_out = torch.randn(T, K, B, H, dtype=torch.float64)
    results = []
    for fn in (_MaskedLSTMRecurrence.apply, unrolled_recurrence):
        hs, cs = fn(*args, keep)
        ((hs * w_out).sum() + cs[-1].sum()).backward()
        results.append([hs.detach(), cs.detach(), *(a.grad.clone() for a in args)])
        for a in args:
            a.grad = None
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-12)


def test_a_feature_that_is_not_compiled_runs_eager_and_logs_why(caplog):
    """SA-PPO: the compiled loss hands the minibatch to the eager loss (same result, exactly) and
    logs the reason once."""
    model, ctx, mb = batch_and_context("CartPole-v1", sa_kappa=0.1, sa_eps=0.05)
    ctx.sa_eps = 0.05
    cl = compiled.CompiledLoss()
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        ctx.generator.manual_seed(0)  # SA-PPO's PGD draws from it: same draws for the reference
        got = loss_and_grads(model, cl, ctx, mb)
        loss_and_grads(model, cl, ctx, mb)  # a second minibatch: the reason is not logged again
    ctx.generator.manual_seed(0)
    ref = loss_and_grads(model, minibatch_loss, ctx, mb)
    assert_same(ref, got, rtol=0, atol=0)
    reasons = [r.getMessage() for r in caplog.records if "runs eager" in r.getMessage()]
    assert len(reasons) == 1 and "SA-PPO" in reasons[0]
    assert "sa_kl" in got[1]
    model.close()


def test_a_failing_compile_falls_back_to_eager_and_logs_the_error(caplog, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler\nmore lines")

    monkeypatch.setattr(compiled, "_compiled", lambda mode: broken)
    model, ctx, mb = batch_and_context("CartPole-v1")
    cl = compiled.CompiledLoss()
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        got = loss_and_grads(model, cl, ctx, mb)
        loss_and_grads(model, cl, ctx, mb)
    ref = loss_and_grads(model, minibatch_loss, ctx, mb)
    assert_same(ref, got, rtol=0, atol=0)
    msgs = [r.getMessage() for r in caplog.records if "runs eager" in r.getMessage()]
    assert msgs == [
        "compile: the update runs eager: torch.compile failed (RuntimeError: no C++ compiler"
    ]
    model.close()


USER_COMPILES = """
import torch
from riskppo.nn.recurrent import MaskedLSTM

torch.manual_seed(0)
lstm = MaskedLSTM(5, 8)
x, starts = torch.randn(6, 3, 5), torch.zeros(6, 3)
starts[2, 1] = 1.0
eager, _, _ = lstm(x, lstm.initial_state(3), starts)
out, _, _ = torch.compile(lstm, fullgraph=True)(x, lstm.initial_state(3), starts)
out.sum().backward()
assert torch.allclose(out, eager, rtol=1e-4, atol=1e-5), (out - eager).abs().max()
assert lstm.weight_hh_l0.grad.abs().sum() > 0
print("ok")
"""


@needs_cxx_compiler()
def test_a_user_can_compile_the_lstm_without_the_trainer_having_compiled():
    """``torch.compile(fullgraph=True)`` of the LSTM module in a fresh process where the trainer
    never compiled (so the C kernel's availability check was never marked a graph constant):
    one graph, eager's output, gradients. About 16 s with a cold inductor cache on 2 cores."""
    proc = subprocess.run(
        [sys.executable, "-c", USER_COMPILES], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.slow  # about 50 s with a cold inductor cache (7 s warm) on 2 cores
@needs_cxx_compiler()
def test_compiled_loss_and_gradients_equal_eager():
    """Compiled (inductor) = eager: loss, stats and gradients (rtol 1e-4, atol 1e-5), with the
    risk head, BC and twin quantile critics in one small model; the compile time is recorded."""
    torch.set_num_threads(1)
    env, kw = FEATURES["quantile-critics-risk-bc"]
    model, ctx, mb = batch_and_context(env, **kw)
    ref = loss_and_grads(model, minibatch_loss, ctx, mb)
    cl = compiled.CompiledLoss()
    got = loss_and_grads(model, cl, ctx, mb)
    assert cl.failed is None and cl.compile_seconds > 0.0
    assert_same(ref, got, rtol=1e-4, atol=1e-5)
    again = loss_and_grads(model, cl, ctx, mb)  # no recompile for the same shapes
    assert_same(got, again, rtol=0, atol=0)
    model.close()


@pytest.mark.slow
@needs_cxx_compiler()
def test_compiled_training_follows_the_eager_cartpole_trajectory():
    """Three updates of CartPole (12 Adam steps), compiled vs eager from the same seed: the same
    episodes (the sampled actions agree), and weights equal to float rounding as Adam amplifies
    it (its step is ~lr wherever a gradient is ~0): within 1e-3 of each other and 5% of the
    distance the weights travelled."""
    torch.set_num_threads(1)
    small = dict(n_envs=4, n_steps=32, batch_size=64, bptt_len=16, n_epochs=2)
    models = [
        DistributionalPPO("CartPole-v1", seed=0, compile=c, lstm_hidden_size=16, **small)
        for c in (False, True)
    ]
    start = torch.cat([p.detach().flatten() for p in models[0].policy.parameters()])
    for m in models:
        m.learn(3 * 128)
    eager, comp = models
    # the compiled model's updates ran its compiled loss; the eager model's never called it
    assert comp.compiled_loss.compile_seconds > 0 and comp.compiled_loss.failed is None
    assert eager.compiled_loss.compile_seconds == 0
    assert len(eager.state.episodes.returns) > 5
    assert list(comp.state.episodes.returns) == list(eager.state.episodes.returns)
    assert list(comp.state.episodes.lengths) == list(eager.state.episodes.lengths)
    w_e, w_c = (torch.cat([p.detach().flatten() for p in m.policy.parameters()]) for m in models)
    torch.testing.assert_close(w_c, w_e, rtol=0, atol=1e-3)
    assert float((w_c - w_e).norm() / (w_e - start).norm()) < 0.05
    for m in models:
        m.close()


def test_cuda_graphs_only_on_cuda_with_one_micro_batch_and_not_turned_off():
    """``reduce-overhead`` (CUDA graphs) exactly where a replay's reused output memory is safe."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert compiled.compile_mode(Config(compile=True), cuda) == "reduce-overhead"
    assert compiled.compile_mode(Config(compile=True), cpu) == "default"
    assert compiled.compile_mode(Config(compile=True, cuda_graphs=False), cuda) == "default"
    accum = Config(compile=True, ppo={"grad_accum_steps": 2, "batch_size": 64})
    assert compiled.compile_mode(accum, cuda) == "default"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("graphs", [True, False])
def test_compiled_training_on_cuda_follows_the_eager_trajectory(graphs):
    """On the GPU (unrolled LSTM, CUDA graphs or not): the compiled loss runs without falling
    back, inductor does not skip the CUDA graphs it was asked for, and the trajectory is the
    eager one (as on the CPU). Skipped without CUDA."""
    small = dict(n_envs=4, n_steps=32, batch_size=64, bptt_len=16, n_epochs=2, device="cuda")
    skips = counters["inductor"]["cudagraph_skips"]
    models = [
        DistributionalPPO(
            "CartPole-v1", seed=0, compile=c, cuda_graphs=graphs, lstm_hidden_size=16, **small
        )
        for c in (False, True)
    ]
    for m in models:
        m.learn(3 * 128)
    eager, comp = models
    assert comp.compiled_loss.compile_seconds > 0 and comp.compiled_loss.failed is None
    assert counters["inductor"]["cudagraph_skips"] == skips
    assert list(comp.state.episodes.returns) == list(eager.state.episodes.returns)
    w_e, w_c = (torch.cat([p.detach().flatten() for p in m.policy.parameters()]) for m in models)
    torch.testing.assert_close(w_c, w_e, rtol=0, atol=1e-3)
    for m in models:
        m.close()


def _trained_with_eager_loss(compile_: bool, **kw) -> DistributionalPPO:
    """Two iterations of a small CartPole model whose update runs ``compile``'s step (the C tail
    where it applies) after the eager loss: the two tails compared without inductor. (The C tail
    needs Adam's state: from the second minibatch of the second iteration on it could run.)"""
    small = dict(TINY, n_epochs=4, optimizer="adam", learning_rate=1e-2, cvar_alpha=0.125)
    model = DistributionalPPO("CartPole-v1", seed=0, compile=compile_, **small, **kw)
    learner = dataclasses.replace(model.learner(), loss_fn=None)
    model.state = reset_carry(learner, model.state)
    for _ in range(2):
        model.state, _ = train_iteration(learner, model.state)
    return model


def _adam_steps(model: DistributionalPPO) -> int:
    return max(int(s["step"]) for s in model.optimizer.state.values())


@needs_c_kernel()
@pytest.mark.parametrize(
    "kw",
    [{"target_kl": 1e-6}, {"config": {"optim": {"vgs": {"enabled": True, "warmup_steps": 0}}}}],
    ids=["target_kl", "vgs"],
)
def test_compile_keeps_target_kl_and_vgs(kw):
    """``compile: true`` takes the PyTorch step where the C tail does not apply: the KL early stop
    (``target_kl``) and the variance gradient scaler act as without ``compile`` — the same number
    of Adam steps, the same scaler statistics, the same weights to float rounding."""
    eager, comp = _trained_with_eager_loss(False, **kw), _trained_with_eager_loss(True, **kw)
    full = 2 * 4 * TINY["n_envs"] * TINY["n_steps"] // TINY["batch_size"]  # 2 × 4 epochs
    if "target_kl" in kw:
        assert _adam_steps(eager) < full  # the early stop happened
    else:
        assert eager.vgs is not None and comp.vgs is not None
        want, got = eager.vgs.state_dict()["state"], comp.vgs.state_dict()["state"]
        assert want and want.keys() == got.keys()
        for name in want:
            assert got[name]["count"] == want[name]["count"] > 0, name
    assert _adam_steps(comp) == _adam_steps(eager)
    for a, b in zip(comp.policy.parameters(), eager.policy.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    eager.close()
    comp.close()
