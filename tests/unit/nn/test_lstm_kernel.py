"""The fused masked LSTM against torch.nn.LSTM run step by step with explicit resets."""

from __future__ import annotations

import pytest
import torch

from riskppo.nn.lstm_kernel import _MaskedLSTMRecurrence
from riskppo.nn.recurrent import LSTMState, MaskedLSTM, run_lstms


def reference(lstm: MaskedLSTM, x, state, starts):
    """nn.LSTM with the same weights, one step at a time, zeroing the state at episode starts."""
    ref = torch.nn.LSTM(lstm.input_size, lstm.hidden_size, lstm.n_layers).to(x.dtype)
    ref.load_state_dict(lstm.state_dict())
    h, c = state
    outs = []
    for t in range(x.shape[0]):
        keep = (1.0 - starts[t].to(x.dtype)).view(1, -1, 1)
        o, (h, c) = ref(x[t : t + 1], (h * keep, c * keep))
        outs.append(o[0])
    return torch.stack(outs), (h, c)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("grad", [True, False])
def test_matches_nn_lstm_with_resets(layers, grad):
    torch.manual_seed(layers)
    lstm = MaskedLSTM(3, 8, layers).double()
    T, B = 9, 4
    x = torch.randn(T, B, 3, dtype=torch.float64)
    state = LSTMState(torch.randn(layers, B, 8).double(), torch.randn(layers, B, 8).double())
    starts = torch.rand(T, B) < 0.3
    starts[0, 0] = True
    with torch.set_grad_enabled(grad):
        out, final, captured = lstm(x, state, starts, capture=[0, 4, T])
    ref_out, (h, c) = reference(lstm, x, state, starts)
    torch.testing.assert_close(out, ref_out.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(final.h, h.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(final.c, c.detach(), rtol=0, atol=1e-12)
    # captured[t] is the (pre-mask) state after step t-1
    _, (h4, c4) = reference(lstm, x[:4], state, starts[:4])
    torch.testing.assert_close(captured[4].c, c4.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(captured[4].h, h4.detach(), rtol=0, atol=1e-12)
    assert captured[0] is state
    # single-step path (rollouts) agrees with the sequence path
    s = state
    for t in range(T):
        o, s = lstm.step(x[t], s, starts[t])
        torch.testing.assert_close(o, out[t], rtol=0, atol=1e-12)


def test_gradcheck_of_handwritten_backward():
    torch.manual_seed(0)
    K, T, B, H = 2, 5, 3, 4
    x = torch.randn(T, K, B, 4 * H, dtype=torch.float64, requires_grad=True)
    w = torch.randn(K, 4 * H, H, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(K, B, H, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(K, B, H, dtype=torch.float64, requires_grad=True)
    keep = (torch.rand(T, B) > 0.3).double()
    assert torch.autograd.gradcheck(
        lambda *a: _MaskedLSTMRecurrence.apply(*a, keep), (x, w, h0, c0)
    )


def test_group_of_lstms_is_independent():
    """Running LSTMs together equals running each alone; gradients stay in their own weights."""
    torch.manual_seed(1)
    a, b = MaskedLSTM(3, 6).double(), MaskedLSTM(3, 6).double()
    x = torch.randn(7, 2, 3, dtype=torch.float64)
    starts = torch.zeros(7, 2, dtype=torch.bool)
    starts[3, 1] = True
    sa, sb = a.initial_state(2), b.initial_state(2)
    sa = LSTMState(sa.h.double(), sa.c.double())
    sb = LSTMState(sb.h.double(), sb.c.double())
    (oa, _, _), (ob, _, _) = run_lstms([a, b], x, [sa, sb], starts)
    torch.testing.assert_close(oa, a(x, sa, starts)[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(ob, b(x, sb, starts)[0], rtol=0, atol=1e-12)
    oa.sum().backward()
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0.0 for p in b.parameters())
    assert all(p.grad is not None for p in a.parameters())


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
    x = torch.randn(T, B, D, dtype=torch.float64)
    h0 = [torch.randn(layers, B, H, dtype=torch.float64) for _ in lstms]
    c0 = [torch.randn(layers, B, H, dtype=torch.float64) for _ in lstms]
    w_out = [torch.randn(T, B, H, dtype=torch.float64) for _ in lstms]
    w_h = [torch.randn(layers, B, H, dtype=torch.float64) for _ in lstms]
    w_c = [torch.randn(layers, B, H, dtype=torch.float64) for _ in lstms]
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
