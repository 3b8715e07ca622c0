"""What reaches the C kernels (riskppo/nn/native/*.c) is checked first: a tensor of another
shape, dtype, device or layout than the sizes C is told raises one ``ValueError`` naming the
argument, at each C entry point (:mod:`riskppo.nn.c_args`) and through the public API
(``predict`` / ``value_distribution``), on the C and the PyTorch path alike.

The mismatched tensors fed in process are larger than what C would read, so that code without
the checks reads and writes in bounds (wrong numbers, no crash) and these tests fail cleanly
there; the cases that would crash such code (a state of 1 env for 400,000 observations, a meta
tensor's null pointer) run in a child process, whose crash fails the test
(tests/integration/test_c_boundary_subprocess.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box

from riskppo.nn import native
from riskppo.nn.actor_step import CActorStep, GaussianHead
from riskppo.nn.lstm_kernel import (
    _native_backward,
    _native_forward,
    _Saved,
    masked_lstm_recurrence,
    native_step,
    unrolled_recurrence,
)
from riskppo.nn.recurrent import LSTMState
from tests.compilers import needs_c_kernel
from tests.unit.nn.test_actor_step import policy_of

pytestmark = needs_c_kernel()

T, K, B, H = 5, 2, 6, 8


def raises(message: str):
    """``pytest.raises`` of a ``ValueError`` whose message starts with ``message``, verbatim."""
    return pytest.raises(ValueError, match="^" + re.escape(message))


def recurrence_args(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, K, B, 4 * H, generator=g, dtype=dtype)
    w = torch.randn(K, 4 * H, H, generator=g, dtype=dtype) / H**0.5
    h0, c0 = (torch.randn(K, B, H, generator=g, dtype=dtype) for _ in range(2))
    keep = (torch.rand(T, B, generator=g) > 0.2).to(dtype)
    return {"xproj": x, "w_hh": w, "h0": h0, "c0": c0, "keep": keep}


# argument → (its replacement, the expected message): larger than what C reads (module doc)
SHAPE_MISMATCHES = {
    "wrong T": ("keep", torch.ones(T + 2, B), "keep has shape [7, 6], expected [T, B] = [5, 6]"),
    "wrong K": ("c0", torch.zeros(K + 1, B, H),
                "c0 has shape [3, 6, 8], expected [K, B, H] = [2, 6, 8]"),
    "wrong B": ("h0", torch.zeros(K, B + 3, H),
                "h0 has shape [2, 9, 8], expected [K, B, H] = [2, 6, 8]"),
    "wrong H": ("w_hh", torch.zeros(K, 4 * H, H + 1),
                "w_hh has shape [2, 32, 9], expected [K, 4H, H] = [2, 32, 8]"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SHAPE_MISMATCHES))
@pytest.mark.parametrize("path", ["C", "C with autograd", "PyTorch", "C entry point"])
def test_the_recurrence_refuses_arguments_of_other_shapes(case, path):
    """C (float32) and PyTorch (float64) raise the same one-line error, with and without
    autograd; the PyTorch kernel alone would raise torch's own error and C would read whatever
    lies there. ``C entry point``: ``_native_forward`` itself (the custom op's body)."""
    name, bad, message = SHAPE_MISMATCHES[case]
    dtype = torch.float64 if path == "PyTorch" else torch.float32
    args = recurrence_args(dtype)
    args[name] = bad.to(dtype)
    if path == "C with autograd":
        args["xproj"].requires_grad_()
    fn, where = masked_lstm_recurrence, "masked_lstm_recurrence"
    if path == "C entry point":
        fn, where = _native_forward, "the C LSTM forward"
    with raises(f"{where}: {message}"):
        fn(**args)


@pytest.mark.parametrize(
    "path,name",
    [("C", "c0"), ("PyTorch", "c0"), ("C entry point", "c0"), ("C entry point", "xproj")],
)
def test_the_recurrence_refuses_an_argument_of_another_dtype(path, name):
    """A float64 state with float32 inputs (C would read its bytes as float32: wrong numbers),
    a float32 state with float64 inputs (the PyTorch kernel), float64 ``xproj`` given to C."""
    args = recurrence_args(torch.float64 if path == "PyTorch" else torch.float32)
    other = torch.float32 if path == "PyTorch" else torch.float64
    args[name] = args[name].to(other)
    fn, where, want = masked_lstm_recurrence, "masked_lstm_recurrence", args["xproj"].dtype
    if path == "C entry point":
        fn, where, want = _native_forward, "the C LSTM forward", torch.float32
    with raises(f"{where}: {name} is {other}, expected {want}"):
        fn(**args)


def test_the_check_names_layouts_and_sizes_c_cannot_take():
    """:func:`riskppo.nn.c_args.check` itself: strides where C reads dense memory, a last
    stride other than 1 where C is told the others, a size beyond C's ``int``."""
    from riskppo.nn.c_args import check

    strided = torch.zeros(3, 4).t()
    with raises("f: x has strides [1, 4], expected contiguous memory"):
        check("f", "x", strided, "[4, 3]", (4, 3))
    check("f", "x", strided.t(), "[3, 4]", (3, 4), layout="rows")
    with raises("f: x has strides [1, 4], expected a last stride of 1"):
        check("f", "x", strided, "[4, 3]", (4, 3), layout="rows")
    check("f", "x", strided, "[4, 3]", (4, 3), layout="any")
    huge = torch.empty(2**31, device="meta")  # no memory behind it
    with raises("f: x has shape [2147483648]: the C kernel takes sizes below 2**31"):
        check("f", "x", huge, "[N]", (2**31,), device=huge.device)
    with raises("f: x is on meta, expected the CPU"):
        check("f", "x", huge, "[N]", (2**31,))
    empty = torch.empty(2**31, 0)  # on the CPU, and no memory either
    with raises("f: x has shape [2147483648, 0]: the C kernel takes sizes below 2**31"):
        check("f", "x", empty, "[N, 0]", (2**31, 0))


def test_a_permuted_state_gives_the_float64_reference_values_and_gradients():
    """``h0``, ``c0`` as permuted views (``[B, K, H]`` memory): C reads dense copies and writes
    ``dh0``, ``dc0`` into fresh dense tensors (``empty_like(c0)`` would keep the permuted
    strides while C writes dense memory: the gradients scrambled)."""
    ref = recurrence_args(torch.float64)
    for name in ("h0", "c0"):
        ref[name] = ref[name].transpose(0, 1).contiguous().transpose(0, 1)
    results = []
    for fn, dtype in (
        (unrolled_recurrence, torch.float64),
        (masked_lstm_recurrence, torch.float32),
    ):
        args = {k: v.detach().to(dtype).requires_grad_(k != "keep") for k, v in ref.items()}
        assert args["h0"].stride() == (H, K * H, 1)  # the permuted layout survives the cast
        hs, cs = fn(**args)
        (hs.square().sum() + cs.sum()).backward()
        results.append([hs, cs, *(args[k].grad for k in ("xproj", "w_hh", "h0", "c0"))])
    for want, got in zip(*results):
        torch.testing.assert_close(got.double(), want.detach(), rtol=1e-4, atol=1e-4)


def step_args():
    g = torch.Generator().manual_seed(2)
    zx = torch.randn(B, 4 * H, generator=g)
    w_t = torch.randn(H, 4 * H, generator=g) / H**0.5
    h0, c0 = (torch.randn(B, H, generator=g) for _ in range(2))
    return {"zx": zx, "w_t": w_t, "h0": h0, "c0": c0}


STEP_MISMATCHES = {
    "wrong H": ("w_t", torch.zeros(H + 1, 4 * H),
                "w_t has shape [9, 32], expected [H, 4H] = [8, 32]"),
    "wrong gate width": ("zx", torch.zeros(B, 4 * H + 2),
                         "zx has shape [6, 34], expected [B, 4H] = [6, 32]"),
    "wrong B": ("c0", torch.zeros(B + 2, H), "c0 has shape [8, 8], expected [B, H] = [6, 8]"),
    "wrong dtype": ("h0", torch.zeros(B, H, dtype=torch.float64),
                    "h0 is torch.float64, expected torch.float32"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(STEP_MISMATCHES))
def test_the_rollout_step_refuses_mismatched_arguments(case):
    name, bad, message = STEP_MISMATCHES[case]
    args = {**step_args(), name: bad}
    with raises(f"native_step: {message}"):
        native_step(**args)


def saved_and_grads():
    """A forward's saved tensors (float32, C) and output gradients for the backward."""
    args = recurrence_args()
    hs, cs, acts, tanh_c = _native_forward(**args)
    saved = _Saved(hs, cs, acts, tanh_c, args["h0"], args["c0"], args["w_hh"], args["keep"])
    return saved, torch.ones_like(hs), torch.ones_like(cs)


@pytest.mark.parametrize(
    "field,bad,message",
    [
        ("c0", torch.zeros(K, B + 1, H), "c0 has shape [2, 7, 8], expected [K, B, H]"),
        ("keep", torch.ones(T + 1, B), "keep has shape [6, 6], expected [T, B]"),
        ("w_hh", torch.zeros(K, 4 * H, H + 1), "w_hh has shape [2, 32, 9], expected [K, 4H, H]"),
        ("tanh_c", torch.zeros(T, K, B, H, dtype=torch.float64), "tanh_c is torch.float64"),
        ("d_hs", torch.zeros(T + 1, K, B, H), "d_hs has shape [6, 2, 6, 8], expected [T, K, B, H]"),
    ],
)  # fmt: skip
def test_the_backward_refuses_mismatched_saved_tensors_and_gradients(field, bad, message):
    saved, d_hs, d_cs = saved_and_grads()
    if field == "d_hs":
        d_hs = bad
    else:
        saved = saved._replace(**{field: bad})
    with raises(f"the C LSTM backward: {message}"):
        _native_backward(saved, d_hs, d_cs)


def test_the_c_backward_writes_its_state_gradients_into_dense_tensors():
    """``dh0``, ``dc0`` are dense ``[K, B, H]`` whatever the layout of the saved ``c0``."""
    saved, d_hs, d_cs = saved_and_grads()
    permuted = saved._replace(c0=saved.c0.transpose(0, 1).contiguous().transpose(0, 1))
    want = _native_backward(saved, d_hs, d_cs)
    got = _native_backward(permuted, d_hs, d_cs)
    for x, y in zip(got, want):
        assert torch.equal(x, y)
    assert all(x.is_contiguous() for x in got[1:])


def test_the_c_backward_refuses_unevenly_spaced_gradient_rows():
    """The weight gradient reads ``dz``'s rows as one evenly spaced ``[T·B, 4H]`` matrix: C
    refuses other strides (-2) before it writes anything."""
    saved, d_hs, d_cs = saved_and_grads()
    inputs = [saved.w_hh, saved.h0, saved.c0, saved.keep, saved.hs, saved.cs, saved.acts,
              saved.tanh_c, d_hs, d_cs]  # fmt: skip
    dz = torch.full((T, K, B, 4 * H), 7.0)  # [T, K, B] order: dz_t = K·B·4H, dz_b = 4H
    dh0, dc0, dw = torch.zeros(K, B, H), torch.zeros(K, B, H), torch.zeros(K, 4 * H, H)
    lib = native.kernel()
    status = lib.riskppo_lstm_backward(
        T, K, B, H, *(x.data_ptr() for x in inputs), dz.data_ptr(), *dz.stride()[:3],
        dh0.data_ptr(), dc0.data_ptr(), dw.data_ptr(),
    )  # fmt: skip
    assert status == -2
    assert bool((dz == 7.0).all()) and not dh0.any() and not dw.any()


def actor_linears(policy):
    """The actor's linear layers as ``CActorStep`` takes them: ``(weight [in, out], bias)``."""
    layers = [*policy.actor_mlp[0::2], policy.action_head.net]
    return [(m.weight.detach().t(), m.bias.detach()) for m in layers]


def c_actor():
    policy = policy_of()  # obs width 3, LSTM hidden 12, net_arch (16, 8), 5 actions
    with torch.inference_mode():
        actor = policy.rollout_actor()
    assert actor.c_step is not None
    return policy, actor


ACTOR_MISMATCHES = {
    "observation width": ("obs", torch.zeros(4, 5),
                          "obs has shape [4, 5], expected [B, D] = [4, 3]"),
    "state batch": ("h", torch.zeros(1, 7, 12),
                    "state.h has shape [1, 7, 12], expected [1, B, H] = [1, 4, 12]"),
    "state dtype": ("c", torch.zeros(1, 4, 12, dtype=torch.float64),
                    "state.c is torch.float64, expected torch.float32"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ACTOR_MISMATCHES))
@pytest.mark.parametrize("deterministic", [False, True])
def test_the_c_actor_step_refuses_mismatched_inputs(case, deterministic):
    name, bad, message = ACTOR_MISMATCHES[case]
    _, actor = c_actor()
    inputs = {"obs": torch.zeros(4, 3), "h": torch.zeros(1, 4, 12), "c": torch.zeros(1, 4, 12)}
    inputs[name] = bad
    state = LSTMState(inputs["h"], inputs["c"])
    with torch.inference_mode(), raises(f"the C actor step: {message}"):
        actor.c_step(inputs["obs"], state, np.zeros(4, bool), torch.Generator(), deterministic)


@pytest.mark.parametrize(
    "layer,part,bad,message",
    [
        (1, 0, torch.zeros(17, 8), "layer 1 weight has shape [17, 8], expected [16, 8]"),
        (2, 1, torch.zeros(6), "layer 2 bias has shape [6], expected [5]"),
        (0, 0, torch.zeros(12, 16, dtype=torch.float64), "layer 0 weight is torch.float64"),
        (None, 1, torch.zeros(52), "LSTM step bias has shape [52], expected [4H] = [48]"),
    ],
)  # fmt: skip
def test_the_c_actor_step_refuses_weights_that_do_not_chain(layer, part, bad, message):
    """Each linear layer's weight ``[in, out]`` must take the previous layer's output, its bias
    be ``[out]``, all float32."""
    policy, actor = c_actor()
    linears = actor_linears(policy)
    lstm = list(actor.lstm[0])
    target = lstm if layer is None else linears[layer]
    if layer is None:
        lstm[part] = bad
    else:
        linears[layer] = (bad, target[1]) if part == 0 else (target[0], bad)
    with raises(f"the C actor step: {message}"):
        CActorStep((lstm[0], lstm[1]), linears, actor.c_step.act)


def test_the_c_actor_step_reads_strided_weights_as_their_values():
    """Weights given as strided views (transposed storage) step as their dense copies: the
    constructor keeps dense copies alive for C."""
    policy, actor = c_actor()
    (w, b), linears = actor.lstm[0], actor_linears(policy)
    assert not linears[0][0].is_contiguous()
    strided = w.t().contiguous().t()
    steps = [CActorStep((w, b), [(x.contiguous(), y) for x, y in linears], actor.c_step.act),
             CActorStep((strided, b), linears, actor.c_step.act)]  # fmt: skip
    g = torch.Generator().manual_seed(5)
    obs, h, c = torch.randn(4, 3, generator=g), *torch.randn(2, 1, 4, 12, generator=g)
    with torch.inference_mode():
        (a0, lp0, s0), (a1, lp1, s1) = (
            step(obs, LSTMState(h, c), np.zeros(4, bool), None, True) for step in steps
        )
    assert torch.equal(a0, a1) and torch.equal(lp0, lp1) and torch.equal(s0.h, s1.h)


def gaussian_actor(state_dependent_std):
    """A Box(2) actor on the C step: its LSTM weights, linear layers and Gaussian head."""
    policy = policy_of(space=Box(-1.0, 1.0, (2,), np.float32),
                       state_dependent_std=state_dependent_std)  # fmt: skip
    with torch.inference_mode():
        actor = policy.rollout_actor()
    assert actor.c_step is not None and actor.c_step.gaussian
    return actor.lstm[0], actor_linears(policy), GaussianHead.of(policy.action_head)


@pytest.mark.parametrize(
    "std_layer,part,bad,message",
    [
        (False, 0, torch.zeros(3), "log_std has shape [3], expected [A] = [2]"),
        (False, 0, torch.zeros(2, dtype=torch.float64), "log_std is torch.float64"),
        (True, 0, torch.zeros(16, 2), "log-std layer weight has shape [16, 2], expected [F, A]"),
        (True, 1, torch.zeros(3), "log-std layer bias has shape [3], expected [A] = [2]"),
    ],
)  # fmt: skip
def test_the_c_gaussian_step_refuses_a_log_std_that_does_not_fit(std_layer, part, bad, message):
    """The log-std parameter is ``[A]``; the state-dependent layer maps the head's input
    ``[F]`` (the last hidden width) to ``[A]``, float32."""
    lstm, linears, gauss = gaussian_actor(std_layer)
    if std_layer:
        layer = list(gauss.std_layer)
        layer[part] = bad
        gauss = gauss._replace(std_layer=tuple(layer))
    else:
        gauss = gauss._replace(log_std=bad)
    with raises(f"the C actor step: {message}"):
        CActorStep(lstm, linears, 1, gauss)


def test_the_c_gaussian_step_takes_one_log_std():
    lstm, linears, gauss = gaussian_actor(False)
    for both_or_none in (GaussianHead(None, None), GaussianHead(gauss.log_std, (lstm[0], lstm[1]))):
        with raises("the C actor step: a Gaussian head takes exactly one of log_std and std_layer"):
            CActorStep(lstm, linears, 1, both_or_none)


def test_the_c_gaussian_step_reads_a_strided_log_std_layer_as_its_values():
    """The state-dependent layer's weight arrives transposed (a strided view): the step keeps
    a dense copy alive for C and steps as with a dense weight."""
    lstm, linears, gauss = gaussian_actor(True)
    w, b = gauss.std_layer
    assert not w.is_contiguous()
    with torch.no_grad():
        w = w + torch.randn(w.shape)  # the init's zero weights would hide a misread
    dense = gauss._replace(std_layer=(w.contiguous(), b))
    strided = gauss._replace(std_layer=(w.t().contiguous().t(), b))
    g = torch.Generator().manual_seed(5)
    obs, h, c = torch.randn(4, 3, generator=g), *torch.randn(2, 1, 4, 12, generator=g)
    with torch.inference_mode():
        (a0, lp0, _), (a1, lp1, _) = (
            CActorStep(lstm, linears, 1, head)(
                obs, LSTMState(h, c), np.zeros(4, bool), torch.Generator(), False
            )
            for head in (dense, strided)
        )
    assert torch.equal(a0, a1) and torch.equal(lp0, lp1)


def test_the_c_adam_tail_refuses_moments_and_gradients_of_other_sizes():
    """``riskppo_clip_adam`` reads each moment and gradient as an array of its parameter's size
    (a state loaded from another model's optimizer may not be): ``ValueError``, nothing written."""
    from riskppo.optim.step import AdamTail, adam_step
    from tests.unit.algo.test_fused_step import _adam_context

    model, ctx = _adam_context("adam")
    stats, tail = torch.tensor([1.0, 0.3]), AdamTail(0.5, per_group=True, allow_c=True)
    lists = ctx.adam
    before = [q.detach().clone() for q in lists.params]
    bigger = torch.zeros(lists.params[1].numel() + 3)
    ctx.adam, ctx.c_adam = lists._replace(exp_avg_sqs=[*lists.exp_avg_sqs[:1], bigger,
                                                        *lists.exp_avg_sqs[2:]]), None  # fmt: skip
    n, shape = bigger.numel(), list(lists.params[1].shape)
    with raises(f"the C Adam step: exp_avg_sq of parameter 1 has shape [{n}], expected the "
                f"parameter's shape = {shape}"):  # fmt: skip
        adam_step(ctx, stats, tail)
    ctx.adam, ctx.c_adam = lists._replace(steps=[torch.zeros(2), *lists.steps[1:]]), None
    with raises("the C Adam step: step of parameter 0 has shape [2], expected one element"):
        adam_step(ctx, stats, tail)
    ctx.adam, ctx.c_adam = lists, None
    grad = lists.params[2].grad
    grad.resize_(grad.numel() + 4)  # resized in place: autograd's shape check is bypassed
    with raises("the C Adam step: the gradient of parameter 2 has shape"):
        adam_step(ctx, stats, tail)
    assert all(torch.equal(q, p0) for q, p0 in zip(lists.params, before))
    model.close()


@pytest.fixture(scope="module")
def model():
    from riskppo import DistributionalPPO

    m = DistributionalPPO("CartPole-v1", seed=0, n_envs=1, n_steps=8, batch_size=8,
                          lstm_hidden_size=8, net_arch=[8])  # fmt: skip
    yield m
    m.close()


@pytest.fixture(params=["C", "PyTorch"])
def path(request, monkeypatch):
    """The C kernels where they apply, or none (the loader says the library is unavailable)."""
    if request.param == "PyTorch":
        monkeypatch.setattr(native, "_state", {"lib": None, "reason": "off for this test"})
    return request.param


HINT = "; pass state=None to start fresh or the state returned for these observations"


def test_predict_refuses_a_state_for_other_envs_or_of_another_dtype(model, path):
    """A state of 5 envs for 3 observations, a float64 state, a bare tuple: one line each."""
    obs = np.zeros((3, 4), np.float32)
    _, five = model.predict(np.zeros((5, 4), np.float32))
    with raises("predict: state holds 5 env(s) but observation has 3 row(s)" + HINT):
        model.predict(obs, state=five)
    _, state = model.predict(obs)
    pi64 = LSTMState(state.pi.h.double(), state.pi.c.double())
    with raises("predict: state.pi.h is torch.float64, expected torch.float32" + HINT):
        model.predict(obs, state=state._replace(pi=pi64))
    with raises("predict: state is not a state this model returned" + HINT):
        model.predict(obs, state=tuple(state.pi))
    with raises("predict: episode_start has shape [2], expected [3] (one flag per env"):
        model.predict(obs, state=state, episode_start=np.zeros(2))
    with raises("observation of shape [3, 5] does not fit the observation space [4]"):
        model.predict(np.zeros((3, 5), np.float32), state=state)
    actions, _ = model.predict(obs, state=state, episode_start=np.zeros(3))
    assert actions.shape == (3,)


def test_value_distribution_refuses_a_state_for_other_envs(model, path):
    _, five = model.predict(np.zeros((5, 4), np.float32))
    for obs in (np.zeros((3, 4), np.float32), np.zeros((2, 3, 4), np.float32)):
        with raises(
            f"value_distribution: state holds 5 env(s) but obs holds 3 env(s) per step{HINT}"
        ):
            model.value_distribution(obs, state=five)
    _, three = model.predict(np.zeros((3, 4), np.float32))
    vf64 = tuple(LSTMState(s.h.double(), s.c.double()) for s in three.vf)
    with raises("value_distribution: state.vf[0].h is torch.float64, expected torch.float32"):
        model.value_distribution(np.zeros((3, 4), np.float32), state=three._replace(vf=vf64))
    with raises("value_distribution: episode_start has shape [3], expected [2, 3]"):
        model.value_distribution(np.zeros((2, 3, 4), np.float32), three, np.zeros(3))
    _, values = model.value_distribution(np.zeros((2, 3, 4), np.float32), state=three)
    assert values.shape[:2] == (2, 3) and np.isfinite(values).all()


def test_the_attacked_agent_refuses_a_state_for_other_envs(model, path):
    """:class:`~riskppo.evaluation.robustness.AttackedAgent` steps the same C actor."""
    from riskppo.evaluation.robustness import AttackedAgent

    agent = AttackedAgent(model, "random", 0.05)
    _, five = model.predict(np.zeros((5, 4), np.float32))
    obs = np.zeros((3, 4), np.float32)
    with raises("AttackedAgent.predict: state holds 5 env(s) but observation has 3 row(s)"):
        agent.predict(obs, state=five)
    with raises("AttackedAgent.predict: episode_start has shape [1], expected [3]"):
        agent.predict(obs, episode_start=np.zeros(1))
    actions, _ = agent.predict(obs, episode_start=np.ones(3))
    assert actions.shape == (3,)
