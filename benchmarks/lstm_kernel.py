"""The C code (riskppo/nn/native) against the PyTorch code it replaces, side by side in one process
(1 torch thread), alternating calls so a slow moment of the host hits both: the masked LSTM
recurrence, the rollout's actor step (``riskppo.nn.actor_step``) and the compiled update's
minibatch tail (norms, clipping, Adam: ``riskppo.optim.step.adam_step``, C tail or not).

Shapes are those of design §10 training (LSTM 64, actor + shared critic LSTM: K = 2): an update
minibatch (16 chunks of 16 steps, forward + backward) and the estimate pass over a rollout
(128 steps of 8 envs, forward only); a rollout step of 8 CartPole envs; the tail of a minibatch
of the design §10 model. Also: the recurrence in a kernel built without AVX-512 (its matrix
product in 4 x 16 tiles of 256-bit vectors instead of 8 x 32 of 512-bit ones, where the CPU has
AVX-512); the first layer with its input projection inside the C kernel (``lstm_layer``) and as
a PyTorch ``addmm`` before it (``projected_recurrence``); the input projection's backward with
``W_ihᵀ`` as a transposed view and as a contiguous matrix (what ``projected_recurrence`` does).

    python benchmarks/lstm_kernel.py
    python benchmarks/lstm_kernel.py --hidden 128 --repeats 500
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
from _common import BenchParser, machine, positive_int, run_main, table

from riskppo import DistributionalPPO
from riskppo.algo import update
from riskppo.nn import lstm_kernel, lstm_layer, native
from riskppo.optim import step


def median_us(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median microseconds per call of each function, calls interleaved."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(10):  # warm-up
        for fn in fns.values():
            fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: 1e6 * statistics.median(ts) for name, ts in times.items()}


def recurrence_cases(
    lib: object, T: int, K: int, B: int, H: int, grad: bool
) -> dict[str, Callable[[], object]]:
    """The recurrence with the C kernel ``lib`` and with the PyTorch kernel (the loader's state
    switched before each call)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, K, B, 4 * H, generator=g, requires_grad=grad)
    w = (torch.randn(K, 4 * H, H, generator=g) / H**0.5).requires_grad_(grad)
    h0, c0 = (torch.randn(K, B, H, generator=g).requires_grad_(grad) for _ in range(2))
    keep = (torch.rand(T, B, generator=g) > 0.05).float()

    def run(use_native: bool) -> Callable[[], object]:
        def call() -> object:
            native._state.update(lib=lib if use_native else None)
            with torch.set_grad_enabled(grad):
                hs, _ = lstm_kernel.masked_lstm_recurrence(x, w, h0, c0, keep)
                if grad:
                    hs.sum().backward()
            return hs

        return call

    return {"C kernel": run(True), "PyTorch kernel": run(False)}


def spec_model() -> DistributionalPPO:
    return DistributionalPPO(
        "CartPole-v1", seed=0, compile=True, n_envs=8, n_steps=128, batch_size=256,
        lstm_hidden_size=64, net_arch=[64], num_threads=1,
    )  # fmt: skip


def actor_cases(model: DistributionalPPO) -> dict[str, Callable[[], object]]:
    """One rollout step of 8 envs: the C step and the PyTorch step of the same actor."""
    with torch.inference_mode():
        c_actor = model.policy.rollout_actor()
        torch_actor = model.policy.rollout_actor()
    assert c_actor.c_step is not None, "the C actor step does not apply to this model"
    torch_actor.c_step = None
    obs, state = torch.randn(8, 4), model.policy.initial_state(8).pi
    starts, g = np.zeros(8, bool), torch.Generator().manual_seed(0)

    def run(actor: object) -> Callable[[], object]:
        def call() -> object:
            with torch.inference_mode():
                return actor.act(obs, state, starts, generator=g)  # type: ignore[attr-defined]

        return call

    return {"C": run(c_actor), "PyTorch": run(torch_actor)}


def tail_cases(model: DistributionalPPO) -> dict[str, Callable[[], object]]:
    """The minibatch tail after the backward (gradients fixed, tiny so parameters barely move)."""
    ctx = update.UpdateContext(
        model.config, model.policy, model.critic, model.optimizer, torch.Generator(), 0.0
    )
    grads = [torch.randn(q.shape) * 1e-6 for q in ctx.params]
    for _ in range(2):  # the optimizer state and its fused-Adam lists
        for q, gr in zip(ctx.params, grads):
            q.grad = gr.clone()
        ctx.adam = step.optimizer_step(ctx.optimizer, ctx.adam)
    stats = torch.tensor([1.0])
    tail = step.AdamTail(model.config.ppo.max_grad_norm, model.config.ppo.grad_clip == "per_group")

    def run(in_c: bool) -> Callable[[], step.Stepped]:
        return lambda: step.adam_step(ctx, stats, tail._replace(allow_c=in_c))

    assert run(True)().path == "c", "the C tail does not apply to this model"
    return {"C": run(True), "PyTorch": run(False)}


def projection_cases(T: int, K: int, B: int, H: int, D: int) -> dict[str, Callable[[], object]]:
    ws = [torch.randn(4 * H, D, requires_grad=True) for _ in range(K)]
    bias = torch.zeros(K * 4 * H, requires_grad=True)
    x = torch.randn(T * B, D)
    dz = torch.randn(T, B, K, 4 * H)

    def run(weight: Callable[[], torch.Tensor]) -> Callable[[], object]:
        def call() -> object:
            torch.addmm(bias, x, weight()).backward(dz.view(T * B, -1))
            return None

        return call

    return {
        "W_ih^T contiguous": run(lambda: torch.cat([w.T for w in ws], dim=1)),
        "W_ih^T a view": run(lambda: torch.cat(ws).T),
    }


def layer_cases(T: int, K: int, B: int, H: int, D: int) -> dict[str, Callable[[], object]]:
    """The first layer (input projection and recurrence) forward + backward: the projection
    inside the C kernel (``lstm_layer``, now) and as a PyTorch ``addmm`` before the C recurrence
    (``projected_recurrence``, before)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, B, D, generator=g)
    w_ih = torch.randn(K, 4 * H, D, generator=g).requires_grad_()
    bias = torch.zeros(K, 4 * H).requires_grad_()
    w_hh = (torch.randn(K, 4 * H, H, generator=g) / H**0.5).requires_grad_()
    h0, c0 = (torch.zeros(K, B, H) for _ in range(2))
    keep = (torch.rand(T, B, generator=g) > 0.05).float()

    def run(layer: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> Callable[[], object]:
        def call() -> object:
            hs, _ = layer(x, w_ih, bias, w_hh, h0, c0, keep)
            hs.sum().backward()
            return hs

        return call

    return {
        "projection in C": run(lstm_layer.lstm_layer),
        "projection in PyTorch": run(lstm_layer.projected_recurrence),
    }


def narrow_tiles_kernel() -> object:
    """The C kernel built without AVX-512 (``-mno-avx512f``: the 4 x 16 tiles of 256-bit vectors
    instead of 8 x 32 of 512-bit ones) into a cache of its own; None where the CPU has no
    AVX-512 (both builds would be the same) or the build fails."""
    if "avx512f" not in native._cpu_features().split():
        return None
    saved = {k: os.environ.get(k) for k in ("RISKPPO_CACHE", "RISKPPO_NATIVE_CFLAGS")}
    state = dict(native._state)
    try:
        cache = tempfile.mkdtemp(prefix="riskppo-narrow-")
        atexit.register(shutil.rmtree, cache, True)  # the loaded library outlives its file
        os.environ["RISKPPO_CACHE"] = cache
        os.environ["RISKPPO_NATIVE_CFLAGS"] = "-mno-avx512f"
        native._state.clear()
        return native.kernel()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        native._state.clear()
        native._state.update(state)


def main() -> None:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hidden", type=positive_int, default=64)
    p.add_argument("--obs-dim", type=positive_int, default=4, help="input width (CartPole: 4)")
    p.add_argument("--repeats", type=positive_int, default=300)
    a = p.parse_args()
    torch.set_num_threads(1)
    lib = native.kernel()
    if lib is None:
        raise SystemExit(f"the C kernel is unavailable here: {native.unavailable_reason()}")
    print("machine:", machine())
    H, rows = a.hidden, []
    cases = [
        ("update minibatch, forward + backward", (16, 2, 16, H, True)),
        ("estimate pass, forward", (128, 2, 8, H, False)),
    ]
    narrow = narrow_tiles_kernel()
    for label, shape in cases:
        fns = recurrence_cases(lib, *shape)
        if narrow is not None:
            fns["C kernel, 256-bit tiles"] = recurrence_cases(narrow, *shape)["C kernel"]
        us = median_us(fns, a.repeats)
        rows += [
            [label, name, f"{t:,.0f}", f"{us['PyTorch kernel'] / t:.2f}×"] for name, t in us.items()
        ]
    native._state.update(lib=lib)  # the recurrence cases left it switched
    us = median_us(layer_cases(16, 2, 16, H, a.obs_dim), a.repeats)
    rows += [
        ["first layer, update minibatch, forward + backward", name, f"{t:,.0f}",
         f"{us['projection in PyTorch'] / t:.2f}×"]
        for name, t in us.items()
    ]  # fmt: skip
    model = spec_model()
    for label, fns in [
        ("rollout actor step, 8 envs", actor_cases(model)),
        ("compiled update's minibatch tail", tail_cases(model)),
    ]:
        us = median_us(fns, a.repeats)
        ratio = us["PyTorch"] / us["C"]
        rows += [
            [label, name, f"{t:,.0f}", f"{ratio:.2f}×" if name == "C" else "1.00×"]
            for name, t in us.items()
        ]
    model.close()
    us = median_us(projection_cases(16, 2, 16, H, a.obs_dim), a.repeats)
    ratio = us["W_ih^T a view"] / us["W_ih^T contiguous"]
    rows += [
        [
            "input projection, forward + backward",
            name,
            f"{t:,.0f}",
            f"{ratio:.2f}×" if name.endswith("contiguous") else "1.00×",
        ]
        for name, t in us.items()
    ]
    print(table(rows, ["case", "variant", "µs per call (median)", "speed-up"]))


if __name__ == "__main__":
    sys.exit(run_main(main))
