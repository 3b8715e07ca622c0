"""Where one training iteration's time goes: collect (rollout, env included) → estimate → update →
log, in ms per iteration of 1,024 steps, for the eager and the compiled (``compile: true``)
trainer side by side in one process (1 torch thread, one iteration each in turn, medians over
rounds). design §10 settings: LSTM 64, twin quantile critics, n_envs 8, n_steps 128, batch 256,
4 epochs.

    python benchmarks/update_phases.py
    python benchmarks/update_phases.py --env Pendulum-v1 --rounds 32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from _common import BenchParser, machine, positive_int, run_main, table

import riskppo.algo.loop as loop
from riskppo import DistributionalPPO

PHASES = {"collect_rollout": "collect", "estimate": "estimate", "ppo_update": "update",
          "update_log": "log"}  # fmt: skip


def timed(times: dict[str, list[float]], fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` that appends its seconds to ``times[name]``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        times[name].append(time.perf_counter() - t)
        return out

    return call


def main() -> None:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--rounds", type=positive_int, default=16)
    a = p.parse_args()
    torch.set_num_threads(1)
    print("machine:", machine())
    times: dict[str, dict[str, list[float]]] = {}
    originals = {name: getattr(loop, name) for name in PHASES}
    models = {}
    for variant in ("eager", "compiled"):
        models[variant] = DistributionalPPO(
            a.env, seed=0, compile=variant == "compiled", n_envs=8, n_steps=128, batch_size=256,
            n_epochs=4, lstm_hidden_size=64, net_arch=[64], critic="quantile", twin_critics=True,
            num_threads=1,
        )  # fmt: skip
        models[variant].learn(1024)  # warm-up (and compile)
        times[variant] = {name: [] for name in [*PHASES, "total"]}
    for r in range(a.rounds):
        for variant in ("eager", "compiled") if r % 2 == 0 else ("compiled", "eager"):
            t = times[variant]
            for name, fn in originals.items():
                setattr(loop, name, timed(t, fn, name))
            timed(t, models[variant].learn, "total")(1024, reset_num_timesteps=False)
    for name, fn in originals.items():
        setattr(loop, name, fn)
    rows = []
    for name in [*PHASES, "total"]:
        ms = {v: 1e3 * statistics.median(times[v][name]) for v in times}
        rows.append([PHASES.get(name, "whole iteration (learn)"), f"{ms['eager']:.1f}",
                     f"{ms['compiled']:.1f}", f"{ms['eager'] / ms['compiled']:.2f}×"])  # fmt: skip
    print(f"{a.env}, ms per iteration of 1,024 steps (median over {a.rounds} rounds)")
    print(table(rows, ["phase", "eager", "compiled", "compiled speed-up"]))


if __name__ == "__main__":
    sys.exit(run_main(main))
