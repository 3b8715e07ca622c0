"""The C recurrence (riskppo/nn/native) against independent float64 references, and its loader:
build, cache, and the fallback when it cannot be built (what the cache
trusts and how it recovers: tests/integration/test_native_cache.py; builds across processes:
tests/integration/test_native_build.py)."""

from __future__ import annotations

import logging

import pytest
import torch

from riskppo.nn import lstm_kernel, native
from riskppo.nn.lstm_kernel import (
    _MaskedLSTMRecurrence,
    _native_backward,
    _native_forward,
    _Saved,
    masked_lstm_recurrence,
    unrolled_recurrence,
)
from riskppo.nn.recurrent import LSTMState, MaskedLSTM
from tests.compilers import needs_c_compiler

pytestmark = needs_c_compiler()


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A loader that has not run yet, building into an empty cache."""
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("RISKPPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RISKPPO_NATIVE", raising=False)
    monkeypatch.setenv(native._NOTICE, "")  # nothing told yet; restored (unset) after the test
    return tmp_path / "cache" / "native"


def inputs(T, K, B, H, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, B, 4 * H, generator=g, dtype=torch.float64)
    w = torch.randn(K, 4 * H, H, generator=g, dtype=torch.float64) / H**0.5
    h0 = torch.randn(K, B, H, generator=g, dtype=torch.float64)
    c0 = torch.randn(K, B, H, generator=g, dtype=torch.float64)
    keep = (torch.rand(T, B, generator=g) > 0.25).double()
    keep[0, 0] = 0.0  # a reset on the first step too
    return [x, w, h0, c0], keep


def outputs_and_grads(fn, args, keep, dtype, d_hs, d_cs):
    leaves = [a.detach().to(dtype).clone().requires_grad_() for a in args]
    hs, cs = fn(*leaves, keep.to(dtype))
    loss = (hs * d_hs.to(dtype)).sum()
    if d_cs is not None:
        loss = loss + (cs * d_cs.to(dtype)).sum()
    loss.backward()
    return [hs.detach(), cs.detach(), *(a.grad for a in leaves)]


@pytest.mark.parametrize(
    "T,K,B,H",
    [(16, 2, 16, 64), (7, 3, 5, 5), (1, 1, 1, 8), (9, 1, 6, 20), (4, 2, 9, 33)],
)
@pytest.mark.parametrize("with_dcs", [True, False])
@pytest.mark.parametrize("strided", [False, True])
def test_outputs_and_gradients_match_the_float64_autograd_reference(
    T, K, B, H, with_dcs, strided, fresh
):
    """Every shape path of the C matmul (4-row tiles and single rows, 16-column strips and
    leftover columns) and of the masks, against autograd through the plain unrolled LSTM.
    ``strided``: ``W_hh`` and the incoming gradients are non-contiguous views, so the kernel
    reads contiguous copies (which must live until C has read them)."""
    args, keep = inputs(T, K, B, H)
    g = torch.Generator().manual_seed(1)
    d_hs, d_cs = (torch.randn(T, B, K, H, generator=g, dtype=torch.float64) for _ in range(2))
    d_hs, d_cs = d_hs.transpose(1, 2), d_cs.transpose(1, 2) if with_dcs else None
    if strided:
        args[1] = args[1].transpose(1, 2).contiguous().transpose(1, 2)
    else:
        d_hs, d_cs = d_hs.contiguous(), None if d_cs is None else d_cs.contiguous()
    ref = outputs_and_grads(unrolled_recurrence, args, keep, torch.float64, d_hs, d_cs)
    got = outputs_and_grads(_MaskedLSTMRecurrence.apply, args, keep, torch.float32, d_hs, d_cs)
    assert native.kernel() is not None
    for name, r, a in zip(["hs", "cs", "d_xproj", "d_w_hh", "d_h0", "d_c0"], ref, got):
        scale = float(r.abs().max())
        err = float((a.double() - r).abs().max())
        assert err <= 2e-6 * max(scale, 1.0) * max(T, 4), f"{name}: {err:.2e} (scale {scale})"


def test_the_recurrence_dispatches_to_the_c_kernel_for_float32_on_the_cpu(monkeypatch, fresh):
    calls = []
    real = lstm_kernel._native_forward
    monkeypatch.setattr(lstm_kernel, "_native_forward", lambda *a: calls.append(1) or real(*a))
    args, keep = inputs(3, 2, 4, 8)
    masked_lstm_recurrence(*(a.float() for a in args), keep)
    assert len(calls) == 1
    masked_lstm_recurrence(*args, keep)  # float64 stays on the PyTorch kernel
    assert len(calls) == 1


def gate_inputs(values: torch.Tensor, gate: int) -> torch.Tensor:
    """``xproj`` ``[1, 1, N, 4]`` (H = 1) with ``values`` in one gate and 0 in the others."""
    x = torch.zeros(1, 1, values.numel(), 4)
    x[0, 0, :, gate] = values
    return x


def test_gate_nonlinearities_match_torch_over_the_whole_float_range(fresh):
    """σ and tanh (Cephes approximations in C) against float64 torch: within a few ulp
    everywhere, saturating cleanly (no inf, no NaN) far outside the range where they vary."""
    v = torch.cat(
        [
            torch.linspace(-100, 100, 4001),
            torch.tensor([0.0, 1e-30, -1e-30, 1e-7, -1e-7, 1e4, -1e4, 3e38, -3e38]),
        ]
    ).float()
    N = v.numel()
    zeros = torch.zeros(1, N, 1)
    # i, f, o gates: σ(z); the g gate is saved as s = σ(2 z)
    _, _, acts, _ = _native_forward(
        gate_inputs(v, 0), torch.zeros(1, 4, 1), zeros, zeros, torch.ones(1, N)
    )
    ref = torch.sigmoid(v.double())
    err = (acts[0, 0, :, 0].double() - ref).abs()
    varies = v >= -80  # below, σ is under 2e-35 and the approximation clamps its exp
    assert float((err[varies] / ref[varies]).max()) < 5e-7
    assert float(err[~varies].max()) < 1e-34
    assert bool(torch.isfinite(acts).all())
    # tanh of the cell: with i = σ(-100) ≈ 0 and f = σ(100) = 1 the cell keeps c0 = v
    x = torch.zeros(1, 1, N, 4)
    x[..., 0], x[..., 1] = -100.0, 100.0
    _, cs, _, tanh_c = _native_forward(
        x, torch.zeros(1, 4, 1), zeros, v.view(1, N, 1), torch.ones(1, N)
    )
    assert torch.equal(cs.flatten(), v)
    ref = torch.tanh(v.double())
    rel = (tanh_c.flatten().double() - ref).abs() / ref.abs().clamp(min=1e-30)
    assert float(rel.max()) < 5e-7


def test_a_nan_input_comes_out_as_nan_in_its_own_sequence_only(fresh):
    args, keep = inputs(6, 2, 4, 16)
    keep.fill_(1.0)
    x, w, h0, c0 = (a.float() for a in args)
    x[2, 1, 3, 5] = float("nan")
    x.requires_grad_()
    hs, cs = masked_lstm_recurrence(x, w, h0, c0, keep.float())
    assert bool(torch.isnan(hs[2:, 1, 3]).any()) and bool(torch.isnan(cs[2:, 1, 3]).any())
    assert bool(torch.isfinite(hs[:2]).all())
    mask = torch.ones_like(hs, dtype=torch.bool)
    mask[2:, 1, 3] = False
    assert bool(torch.isfinite(hs[mask]).all())
    hs.sum().backward()
    assert bool(torch.isnan(x.grad).any())  # the training guard (R-REL-6) sees it


def test_native_backward_of_unused_cell_outputs_equals_a_zero_gradient(fresh):
    """``d_cs`` None (cs unused) and an explicit zero ``d_cs`` give the same gradients."""
    args, keep = inputs(5, 2, 3, 8)
    x, w, h0, c0 = (a.float() for a in args)
    hs, cs, acts, tanh_c = _native_forward(x, w, h0, c0, keep.float())
    saved = _Saved(hs, cs, acts, tanh_c, h0, c0, w, keep.float())
    d_hs = torch.randn_like(hs)
    a = _native_backward(saved, d_hs, None)
    b = _native_backward(saved, d_hs, torch.zeros_like(cs))
    for p, q in zip(a, b):
        assert torch.equal(p, q)


def test_off_switch_falls_back_to_pytorch_and_says_so_once(monkeypatch, fresh, caplog):
    monkeypatch.setenv("RISKPPO_NATIVE", "0")
    args, keep = inputs(4, 2, 3, 8)
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        out = masked_lstm_recurrence(*(a.float() for a in args), keep)
        masked_lstm_recurrence(*(a.float() for a in args), keep)
    assert native.kernel() is None and native.unavailable_reason() == "RISKPPO_NATIVE=0"
    lines = [r.getMessage() for r in caplog.records if "native LSTM kernel" in r.getMessage()]
    assert len(lines) == 1 and "PyTorch kernel" in lines[0]
    ref = unrolled_recurrence(*args, keep)
    torch.testing.assert_close(out[0].double(), ref[0], rtol=0, atol=1e-5)


def test_a_compiler_that_fails_falls_back_with_its_reason(monkeypatch, fresh, tmp_path):
    bad = tmp_path / "badcc"
    bad.write_text("#!/bin/sh\necho 'badcc: cannot compile this' >&2\nexit 1\n")
    bad.chmod(0o755)
    monkeypatch.setenv("CC", str(bad))
    assert native.kernel() is None
    reason = native.unavailable_reason()
    assert reason is not None and "badcc: cannot compile this" in reason
    (marker,) = fresh.iterdir()  # no half-written library: only the remembered failure
    assert marker.name.endswith(".failed") and "badcc: cannot compile this" in marker.read_text()
    args, keep = inputs(3, 1, 2, 4)
    hs, _ = masked_lstm_recurrence(*(a.float() for a in args), keep)  # still runs
    assert bool(torch.isfinite(hs).all())


def test_the_build_is_cached_and_reused(monkeypatch, fresh):
    assert native.kernel() is not None
    files = sorted(fresh.iterdir())
    stamps = [f.stat().st_mtime_ns for f in files]
    assert [f.suffix for f in files] == [".so", ".sha256"]
    monkeypatch.setattr(native, "_state", {})  # as a new process would
    assert native.kernel() is not None
    assert sorted(fresh.iterdir()) == files and [f.stat().st_mtime_ns for f in files] == stamps


def graph_of_compiled_equal_to_eager(loss, args) -> list[str]:
    """Gradients of ``loss`` (float32 leaves from ``args``) eager and under ``torch.compile``,
    asserted equal bit for bit; returns the targets of the one compiled graph's calls."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    results = []
    for fn in (loss, torch.compile(loss, backend=backend, dynamic=False)):
        leaves = [a.float().requires_grad_() for a in args]
        fn(*leaves).backward()
        results.append([a.grad for a in leaves])
    for a, b in zip(*results):
        assert torch.equal(a, b)
    (gm,) = graphs
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_under_torch_compile_the_c_kernel_is_one_op_with_its_backward(fresh):
    """``torch.compile`` sees the C kernel as a custom op with a registered backward (not the
    unrolled recurrence): the same outputs and gradients as eager, bit for bit, and no step of
    the recurrence in the graph."""
    args, keep = inputs(6, 2, 5, 16)
    keep = keep.float()

    def loss(x, w, h0, c0):
        hs, cs = masked_lstm_recurrence(x, w, h0, c0, keep)
        return (hs * hs).sum() + cs[-1].sum()

    targets = graph_of_compiled_equal_to_eager(loss, args)
    assert targets.count(f"riskppo.lstm_recurrence_{lstm_kernel._OPS_VERSION}.default") == 1, (
        targets
    )
    assert not any("baddbmm" in t or "sigmoid" in t for t in targets), targets


@pytest.mark.parametrize("layers", [1, 2])
def test_the_rollout_step_in_c_replays_exactly_as_the_sequence_kernel(layers, fresh):
    """Step by step (the rollout: resets from NumPy, fused weights) and as one sequence (the
    update's replay), both in C: the same outputs and final state (R-ALG-1). The recurrent part
    is the same C code; only the input projection's matmul (PyTorch's, on another shape) may
    round differently."""
    torch.manual_seed(layers)
    lstm = MaskedLSTM(4, 24, layers)
    T, B = 13, 6
    x = torch.randn(T, B, 4)
    starts = torch.rand(T, B) < 0.2
    state = LSTMState(torch.randn(layers, B, 24), torch.randn(layers, B, 24))
    weights = lstm.step_weights()
    with torch.inference_mode():
        out, final, _ = lstm(x, state, starts)
        s, outs = state, []
        for t in range(T):
            o, s = lstm.step(x[t], s, starts[t].numpy(), weights)
            outs.append(o)
    assert native.kernel() is not None
    torch.testing.assert_close(torch.stack(outs), out, rtol=0, atol=1e-6)
    torch.testing.assert_close(s.h, final.h, rtol=0, atol=1e-6)
    torch.testing.assert_close(s.c, final.c, rtol=0, atol=1e-6)


def test_the_rollout_step_reads_non_contiguous_inputs_as_their_values(fresh):
    """``native_step`` on strided views (the state and ``W_hhᵀ`` as transposed storage) gives
    bit for bit what it gives on contiguous copies: the copies it makes for C live until the
    call returns."""
    g = torch.Generator().manual_seed(3)
    B, H = 5, 12
    zx = torch.randn(B, 4 * H, generator=g)
    w_t = torch.randn(4 * H, H, generator=g).t()
    h0, c0 = (torch.randn(H, B, generator=g).t() for _ in range(2))
    assert not any(x.is_contiguous() for x in (w_t, h0, c0))
    got = lstm_kernel.native_step(zx, w_t, h0, c0)
    want = lstm_kernel.native_step(zx, w_t.contiguous(), h0.contiguous(), c0.contiguous())
    assert torch.equal(got, want)


@pytest.mark.parametrize("B,H", [(2**16 + 1, 2**13), (2**31 - 1, 2**29 - 1), (3, 5)])
def test_offsets_past_2_31_do_not_wrap(B, H, fresh):
    """Each size is below 2**31 (riskppo/nn/c_args.py) but B * 4H need not be: 65,537 sequences
    of 8,192 units put the last gate value at offset 2**31 + 32,767, which the kernels' former
    ``int`` arithmetic wrapped to a negative offset (memory before the array; the sanitizer build,
    tests/native/run_sanitizers.sh, stops at the overflow). Checked on the index arithmetic
    itself, since the arrays at this size take gigabytes."""
    lib = native.kernel()
    assert lib is not None
    G = 4 * H
    assert lib.riskppo_lstm_last_gate_offset(B, H) == (B - 1) * G + G - 1
