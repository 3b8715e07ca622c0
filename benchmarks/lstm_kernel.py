"""The masked LSTM recurrence: the C kernel (riskppo/nn/native) against the PyTorch kernel, side
by side in one process (1 torch thread), alternating calls so a slow moment of the host hits both.

Shapes are those of SPEC §10 training (LSTM 64, actor + shared critic LSTM: K = 2): an update
minibatch (16 chunks of 16 steps, forward + backward) and the estimate pass over a rollout
(128 steps of 8 envs, forward only). Also the input projection's backward with ``W_ihᵀ`` as a
transposed view (the old form) and as a contiguous matrix (``run_lstms`` now).

    python benchmarks/lstm_kernel.py
    python benchmarks/lstm_kernel.py --hidden 128 --repeats 500
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from _common import machine, table

from riskppo.nn import lstm_kernel, native


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--obs-dim", type=int, default=4, help="input width (CartPole: 4)")
    p.add_argument("--repeats", type=int, default=300)
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
    for label, shape in cases:
        us = median_us(recurrence_cases(lib, *shape), a.repeats)
        ratio = us["PyTorch kernel"] / us["C kernel"]
        rows += [
            [label, name, f"{t:,.0f}", f"{ratio:.2f}×" if name == "C kernel" else "1.00×"]
            for name, t in us.items()
        ]
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
    main()
