"""The first LSTM layer with its input projection in C (riskppo/nn/lstm_layer.py) against an
independent float64 reference (the projection as a plain einsum, the recurrence unrolled, both
differentiated by autograd), under torch.compile, and at its C boundary."""

from __future__ import annotations

import re

import pytest
import torch

from riskppo.nn import lstm_layer as layer_module
from riskppo.nn import native
from riskppo.nn.lstm_kernel import unrolled_recurrence
from riskppo.nn.lstm_layer import _input_grads, lstm_layer
from tests.compilers import needs_c_kernel
from tests.unit.nn.test_native_lstm import graph_of_compiled_equal_to_eager

pytestmark = needs_c_kernel()


def inputs(T, K, B, H, D, seed=0):
    """``x, w_ih, bias, w_hh, h0, c0`` (float64) and a ``keep`` mask with resets."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, D, generator=g, dtype=torch.float64)
    w_ih = torch.randn(K, 4 * H, D, generator=g, dtype=torch.float64) / D**0.5
    bias = torch.randn(K, 4 * H, generator=g, dtype=torch.float64) / 4
    w_hh = torch.randn(K, 4 * H, H, generator=g, dtype=torch.float64) / H**0.5
    h0 = torch.randn(K, B, H, generator=g, dtype=torch.float64)
    c0 = torch.randn(K, B, H, generator=g, dtype=torch.float64)
    keep = (torch.rand(T, B, generator=g) > 0.25).double()
    keep[0, 0] = 0.0  # a reset on the first step too
    return [x, w_ih, bias, w_hh, h0, c0], keep


def reference(x, w_ih, bias, w_hh, h0, c0, keep):
    """The layer written plainly: ``x W_ihᵀ + b`` per LSTM, then the unrolled recurrence."""
    xproj = torch.einsum("tbd,kgd->tkbg", x, w_ih) + bias[None, :, None, :]
    return unrolled_recurrence(xproj, w_hh, h0, c0, keep)


def outputs_and_grads(fn, args, keep, dtype, d_hs, d_cs):
    leaves = [a.detach().to(dtype).clone().requires_grad_() for a in args]
    hs, cs = fn(*leaves, keep.to(dtype))
    ((hs * d_hs.to(dtype)).sum() + (cs * d_cs.to(dtype)).sum()).backward()
    return [hs.detach(), cs.detach(), *(a.grad for a in leaves)]


@pytest.mark.parametrize(
    "T,K,B,H,D",
    [(16, 2, 16, 64, 4), (7, 3, 5, 5, 1), (1, 1, 1, 8, 3), (9, 1, 6, 20, 37), (4, 2, 9, 33, 70)],
)
def test_outputs_and_all_gradients_match_the_float64_reference(T, K, B, H, D):
    """Every gradient the layer gives — the input (the adversarial regulariser attacks it), both
    weights, the bias and the entering state — and both outputs, for widths on every path of
    the C product (input widths 1 to 70, gate widths 20 to 256, batches of 1 to 16)."""
    args, keep = inputs(T, K, B, H, D)
    g = torch.Generator().manual_seed(1)
    d_hs, d_cs = (torch.randn(T, K, B, H, generator=g, dtype=torch.float64) for _ in range(2))
    ref = outputs_and_grads(reference, args, keep, torch.float64, d_hs, d_cs)
    got = outputs_and_grads(lstm_layer, args, keep, torch.float32, d_hs, d_cs)
    f64 = outputs_and_grads(lstm_layer, args, keep, torch.float64, d_hs, d_cs)  # PyTorch path
    names = ["hs", "cs", "d_x", "d_w_ih", "d_bias", "d_w_hh", "d_h0", "d_c0"]
    for name, r, a, b in zip(names, ref, got, f64):
        scale = float(r.abs().max())
        err = float((a.double() - r).abs().max())
        assert err <= 2e-6 * max(scale, 1.0) * max(T, 4), f"{name}: {err:.2e} (scale {scale})"
        torch.testing.assert_close(b, r, rtol=0, atol=1e-12 * max(scale, 1.0), msg=name)


def test_float32_on_the_cpu_runs_in_c_and_float64_in_pytorch(monkeypatch):
    calls = []
    real = layer_module._forward
    monkeypatch.setattr(layer_module, "_forward", lambda *a: calls.append(1) or real(*a))
    args, keep = inputs(3, 2, 4, 8, 5)
    f32 = lstm_layer(*(a.float() for a in args), keep.float())
    assert len(calls) == 1
    f64 = lstm_layer(*args, keep)  # float64 stays on the PyTorch projection and kernel
    assert len(calls) == 1
    torch.testing.assert_close(f32[0].double(), f64[0], rtol=0, atol=1e-5)


def test_under_torch_compile_the_layer_is_one_op_with_its_backward():
    """``torch.compile`` sees the layer as one custom op with a registered backward: the same
    outputs and gradients as eager, bit for bit, and neither the projection nor a step of the
    recurrence in the graph."""
    args, keep = inputs(6, 2, 5, 16, 4)
    keep = keep.float()

    def loss(x, w_ih, bias, w_hh, h0, c0):
        hs, cs = lstm_layer(x, w_ih, bias, w_hh, h0, c0, keep)
        return (hs * hs).sum() + cs[-1].sum()

    targets = graph_of_compiled_equal_to_eager(loss, args)
    op = f"riskppo.lstm_layer_{layer_module._OPS_VERSION}.default"
    assert targets.count(op) == 1, targets
    assert not any(re.search(r"\b(addmm|mm|baddbmm|sigmoid)\b", t) for t in targets), targets


@pytest.mark.parametrize(
    "name,shape,message",
    [
        ("w_ih", (2, 32, 6), "the C LSTM layer: w_ih has shape [2, 32, 6], expected [K, 4H, D]"),
        ("bias", (2, 33), "the C LSTM layer: bias has shape [2, 33], expected [K, 4H]"),
    ],
)
def test_the_c_layer_refuses_mismatched_weights(name, shape, message):
    args, keep = inputs(3, 2, 4, 8, 5)
    named = dict(zip(["x", "w_ih", "bias", "w_hh", "h0", "c0"], (a.float() for a in args)))
    named[name] = torch.zeros(shape)
    with pytest.raises(ValueError, match=re.escape(message)):
        lstm_layer(**named, keep=keep.float())


def test_the_input_gradients_refuse_a_gradient_in_another_memory_layout():
    """C reads ``dz`` as the ``T·B`` evenly spaced rows the backward writes: any other layout
    is refused before its pointer reaches C."""
    x = torch.randn(3, 4, 5)
    message = "dz has strides [256, 128, 32, 1], expected [T, B, K, 4H] memory"
    with pytest.raises(ValueError, match=re.escape(message)):
        _input_grads(x, torch.zeros(3, 2, 4, 32))
    dz = torch.zeros(3, 4, 2, 32).transpose(1, 2)  # the right layout, the wrong dtype
    with pytest.raises(ValueError, match=re.escape("dz is torch.float64, expected torch.float32")):
        _input_grads(x, dz.double())
    assert native.kernel() is not None
