"""Training throughput: riskppo vs sb3-contrib RecurrentPPO (and SB3 PPO for context), design §10.

Same settings for every trainer: LSTM 64, n_envs 8, n_steps 128, batch 256, 4 epochs; riskppo
with twin quantile critics (and a single scalar critic, to measure the distributional + twin
overhead), eager (the default) and compiled (``riskppo-compiled``: ``compile=True``, its one-off
compile seconds — the warm-up update's time beyond a steady one — reported apart from its
steady-state steps/s; inductor's disk cache makes a second run's compile short).

Steps/s: per env, all trainers are built in **one** process (1 torch thread) and trained side by
side, one update (n_envs × n_steps steps) each in turn, for ``--steps`` timed steps per trainer
after a warm-up update. A slow minute of a shared host then hits every trainer alike: the ratios
are per-round ratios (median over rounds) and ratios of the totals. Peak RSS: each trainer alone
in a fresh process, running the same number of steps.

    python benchmarks/throughput.py                      # CartPole-v1 and Pendulum-v1
    python benchmarks/throughput.py --algos riskppo riskppo-vec riskppo-compiled \\
        riskppo-compiled-vec PPO RecurrentPPO --no-rss     # with and without vector envs
    python benchmarks/throughput.py --steps 8192 --envs CartPole-v1
    python benchmarks/throughput.py --device cuda --n-envs 256 --batch-size 8192   # GPU run
    python benchmarks/throughput.py --device cuda --n-envs 4096 --n-steps 64 --batch-size 65536 \
        --steps 524288 --envs CartPole-v1 \
        --algos riskppo-compiled-vec PPO --no-rss  # a GPU curve point
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from _common import (
    BenchParser,
    machine,
    non_negative_int,
    peak_rss_mb,
    positive_int,
    run_main,
    run_worker,
    table,
)

SETTINGS = dict(n_envs=8, n_steps=128, batch_size=256, n_epochs=4, lstm=64)
RISKPPO = (
    "riskppo",
    "riskppo-compiled",
    "riskppo-compiled-nographs",
    "riskppo-separate",
    "riskppo-scalar",
)
ALGOS = (*RISKPPO, *(f"{name}-vec" for name in RISKPPO), "RecurrentPPO", "PPO")
ANCHOR = "RecurrentPPO"


def build(a: argparse.Namespace) -> Any:
    """The trainer named by ``a.algo`` with the shared settings."""
    if a.algo.startswith("riskppo"):
        from riskppo import DistributionalPPO

        critic, twin = ("scalar", False) if a.algo == "riskppo-scalar" else ("quantile", True)
        name = a.algo.removesuffix("-vec")
        return DistributionalPPO(
            _gym_vector(a) if a.algo.endswith("-vec") else a.env,
            seed=0,
            compile=name.startswith("riskppo-compiled"),
            cuda_graphs=name != "riskppo-compiled-nographs",
            n_envs=a.n_envs,
            n_steps=a.n_steps,
            batch_size=a.batch_size,
            bptt_len=a.bptt_len,
            n_epochs=a.n_epochs,
            lstm_hidden_size=a.lstm,
            net_arch=[64],
            critic=critic,
            twin_critics=twin,
            lstm_sharing="none" if a.algo == "riskppo-separate" else "critics",
            device=a.device,
            num_threads=a.threads,
        )
    sb3 = dict(n_steps=a.n_steps, batch_size=a.batch_size, n_epochs=a.n_epochs, seed=0)
    if a.algo == "RecurrentPPO":
        from sb3_contrib import RecurrentPPO

        kwargs = dict(lstm_hidden_size=a.lstm, net_arch=[64])
        return RecurrentPPO("MlpLstmPolicy", _vec(a), device=a.device, policy_kwargs=kwargs, **sb3)
    from stable_baselines3 import PPO  # feed-forward, for context

    kwargs = dict(net_arch=[64, 64])
    return PPO("MlpPolicy", _vec(a), device=a.device, policy_kwargs=kwargs, **sb3)


def side_by_side(a: argparse.Namespace) -> dict[str, list[float]]:
    """Seconds of each update of each trainer, trained in turn in this process, and each
    trainer's one-off compile seconds (``ALGO/compile_s``)."""
    import torch

    torch.set_num_threads(a.threads)
    update = a.n_envs * a.n_steps
    models = {algo: build(argparse.Namespace(**{**vars(a), "algo": algo})) for algo in a.algos}
    warmup: dict[str, float] = {}
    for algo, model in models.items():
        t = time.perf_counter()
        model.learn(update)  # warm-up update (and compile), not timed
        warmup[algo] = time.perf_counter() - t
    seconds: dict[str, list[float]] = {algo: [] for algo in a.algos}
    for r in range(max(1, a.steps // update)):
        order = a.algos[r % len(a.algos) :] + a.algos[: r % len(a.algos)]  # rotate who goes first
        for algo in order:
            t = time.perf_counter()
            models[algo].learn(update, reset_num_timesteps=False)
            seconds[algo].append(time.perf_counter() - t)
    # compile seconds: the warm-up update's time beyond a steady-state update
    for algo in a.algos:
        seconds[f"{algo}/compile_s"] = [max(0.0, warmup[algo] - statistics.median(seconds[algo]))]
    return seconds


def worker(a: argparse.Namespace) -> None:
    import torch

    if a.mode == "fps":
        print(json.dumps(side_by_side(a)))
        return
    torch.set_num_threads(a.threads)  # peak RSS of one trainer alone
    model = build(a)
    model.learn(a.n_envs * a.n_steps + a.steps)
    print(json.dumps({"rss_mb": peak_rss_mb()}))


def _gym_vector(a: argparse.Namespace) -> Any:
    """A Gymnasium vector env of ``a.n_envs`` envs: the id's natively vectorised form where it
    has one (CartPole: one array step for all envs), else a ``SyncVectorEnv``."""
    import gymnasium as gym

    native = gym.spec(a.env).vector_entry_point is not None
    mode = "vector_entry_point" if native else "sync"
    return gym.make_vec(a.env, a.n_envs, vectorization_mode=mode)


def _vec(a: argparse.Namespace):
    from stable_baselines3.common.env_util import make_vec_env

    return make_vec_env(a.env, n_envs=a.n_envs, seed=0)


def _args() -> argparse.Namespace:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--algo", default="riskppo")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"])
    p.add_argument("--steps", type=positive_int, default=16384, help="timed steps per trainer")
    p.add_argument("--n-envs", type=positive_int, default=SETTINGS["n_envs"])
    p.add_argument("--n-steps", type=positive_int, default=SETTINGS["n_steps"])
    p.add_argument("--batch-size", type=positive_int, default=SETTINGS["batch_size"])
    p.add_argument("--n-epochs", type=positive_int, default=SETTINGS["n_epochs"])
    p.add_argument("--lstm", type=positive_int, default=SETTINGS["lstm"])
    p.add_argument(
        "--bptt-len", type=non_negative_int, default=0, help="riskppo chunk length (0 = auto: 16)"
    )
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads in every worker")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--algos",
        nargs="+",
        choices=ALGOS,
        metavar="ALGO",
        default=[
            "riskppo",
            "riskppo-compiled",
            "riskppo-separate",
            "riskppo-scalar",
            "RecurrentPPO",
            "PPO",
        ],
        help="riskppo: twin quantile critics, the default (the heads share one critic LSTM); "
        "riskppo-compiled: the same with compile=true (torch.compile of the minibatch loss and "
        "backward; its compile seconds are reported apart from the steady-state steps/s); "
        "riskppo-compiled-nographs: compiled, without CUDA graphs on a CUDA device (with them "
        "is the default there; the same as riskppo-compiled on the CPU); "
        "riskppo-separate: each twin critic has its own LSTM (lstm_sharing=none); "
        "riskppo-scalar: one scalar critic; a -vec suffix (riskppo-vec, riskppo-compiled-vec): "
        "the env passed as a Gymnasium vector env, natively vectorised where the id has a "
        "vector_entry_point (CartPole-v1), else SyncVectorEnv",
    )
    p.add_argument("--mode", choices=["fps", "rss"], default="fps", help=argparse.SUPPRESS)
    p.add_argument("--no-rss", action="store_true", help="skip the peak-RSS processes")
    a = p.parse_args()
    a.bptt_len = a.bptt_len or None
    return a


def main() -> None:
    a = _args()
    if a.worker:
        worker(a)
        return
    common = [
        f"--steps={a.steps}", f"--n-envs={a.n_envs}", f"--n-steps={a.n_steps}",
        f"--batch-size={a.batch_size}", f"--n-epochs={a.n_epochs}", f"--lstm={a.lstm}",
        f"--bptt-len={a.bptt_len or 0}", f"--threads={a.threads}", f"--device={a.device}",
    ]  # fmt: skip
    update = a.n_envs * a.n_steps
    print(f"machine: {machine()}")
    print(
        f"settings: n_envs={a.n_envs} n_steps={a.n_steps} batch={a.batch_size} "
        f"epochs={a.n_epochs} lstm={a.lstm} riskppo bptt_len={a.bptt_len or 'auto (16)'} "
        f"threads={a.threads} device={a.device}; {max(1, a.steps // update)} rounds of one "
        f"update ({update} steps) per trainer, side by side in one process per env"
    )
    rows = []
    for env in a.envs:
        seconds = run_worker(__file__, ["--mode=fps", f"--env={env}", "--algos", *a.algos, *common])
        rss = {}
        if not a.no_rss:
            for algo in a.algos:
                out = run_worker(
                    __file__, ["--mode=rss", f"--algo={algo}", f"--env={env}", *common]
                )
                rss[algo] = out["rss_mb"]
        rows += _rows(env, a.algos, seconds, rss, update)
    header = ["env", "trainer", "steps/s", f"vs {ANCHOR} (per-round median)", "vs PPO",
              "compile s", "peak RSS MB", "RSS ratio"]  # fmt: skip
    print(table(rows, header))


def _ratio(num: list[float], den: list[float]) -> tuple[float, float]:
    """``sum(num)/sum(den)`` of per-round seconds and the median of the per-round ratios."""
    return sum(num) / sum(den), statistics.median(n / d for n, d in zip(num, den))


def _rows(
    env: str,
    algos: list[str],
    seconds: dict[str, list[float]],
    rss: dict[str, float],
    update: int,
) -> list[list[str]]:
    rows = []
    for algo in algos:
        fps = update * len(seconds[algo]) / sum(seconds[algo])
        vs = vs_ppo = "-"
        if ANCHOR in seconds:  # steps/s ratio = inverse time ratio
            total, per_round = _ratio(seconds[ANCHOR], seconds[algo])
            vs = f"{total:.2f}× ({per_round:.2f}×)"
        if "PPO" in seconds:
            total, per_round = _ratio(seconds["PPO"], seconds[algo])
            vs_ppo = f"{total:.2f}× ({per_round:.2f}×)"
        compile_s = seconds.get(f"{algo}/compile_s", [0.0])[0]
        comp = f"{compile_s:.1f}" if algo.startswith("riskppo-compiled") else "-"
        mem = f"{rss[algo]:.0f}" if algo in rss else "-"
        mem_ratio = f"{rss[algo] / rss[ANCHOR]:.2f}" if algo in rss and ANCHOR in rss else "-"
        rows.append([env, algo, f"{fps:,.0f}", vs, vs_ppo, comp, mem, mem_ratio])
    for twin in ("riskppo", "riskppo-separate"):
        if twin in seconds and "riskppo-scalar" in seconds:
            total, per_round = _ratio(seconds[twin], seconds["riskppo-scalar"])
            label = f"overhead {twin} vs scalar"
            rows.append([env, label, f"{total - 1:+.1%} ({per_round - 1:+.1%})", *[""] * 5])
    return rows


if __name__ == "__main__":
    sys.exit(run_main(main))
