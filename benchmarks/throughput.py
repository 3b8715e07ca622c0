"""Training throughput: riskppo vs sb3-contrib RecurrentPPO (and SB3 PPO for context), SPEC §10.

Every trainer runs in its own fresh process (so peak RSS is its own), one after another, with
the same settings: LSTM 64, n_envs 8, n_steps 128, batch 256, 4 epochs; riskppo with twin
quantile critics (and a single scalar critic, to measure the distributional + twin overhead).
Steps/s are measured after a warm-up update. Prints ratios against RecurrentPPO.

    python benchmarks/throughput.py                      # CartPole-v1 and Pendulum-v1
    python benchmarks/throughput.py --steps 8192 --envs CartPole-v1
    python benchmarks/throughput.py --device cuda --n-envs 256 --batch-size 8192   # GPU run
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from _common import machine, peak_rss_mb, run_worker, table

SETTINGS = dict(n_envs=8, n_steps=128, batch_size=256, n_epochs=4, lstm=64)


def build(a: argparse.Namespace) -> Any:
    """The trainer named by ``a.algo`` with the shared settings."""
    if a.algo.startswith("riskppo"):
        from riskppo import DistributionalPPO

        critic, twin = ("scalar", False) if a.algo == "riskppo-scalar" else ("quantile", True)
        return DistributionalPPO(
            a.env,
            seed=0,
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


def worker(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(a.threads)
    model = build(a)
    model.learn(a.n_envs * a.n_steps)  # warm-up update, not timed
    t = time.perf_counter()
    model.learn(a.steps, reset_num_timesteps=False)
    fps = a.steps / (time.perf_counter() - t)
    print(json.dumps({"fps": fps, "rss_mb": peak_rss_mb()}))


def _vec(a: argparse.Namespace):
    from stable_baselines3.common.env_util import make_vec_env

    return make_vec_env(a.env, n_envs=a.n_envs, seed=0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--algo", default="riskppo")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"])
    p.add_argument("--steps", type=int, default=16384, help="timed steps per trainer")
    p.add_argument("--n-envs", type=int, default=SETTINGS["n_envs"])
    p.add_argument("--n-steps", type=int, default=SETTINGS["n_steps"])
    p.add_argument("--batch-size", type=int, default=SETTINGS["batch_size"])
    p.add_argument("--n-epochs", type=int, default=SETTINGS["n_epochs"])
    p.add_argument("--lstm", type=int, default=SETTINGS["lstm"])
    p.add_argument("--bptt-len", type=int, default=0, help="riskppo chunk length (0 = auto: 16)")
    p.add_argument("--threads", type=int, default=1, help="torch threads in every worker")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--algos",
        nargs="+",
        default=["riskppo", "riskppo-separate", "riskppo-scalar", "RecurrentPPO", "PPO"],
        help="riskppo: twin quantile critics, the default (the heads share one critic LSTM); "
        "riskppo-separate: each twin critic has its own LSTM (lstm_sharing=none); "
        "riskppo-scalar: one scalar critic",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="interleaved rounds (every trainer once per round); the median is reported",
    )
    a = p.parse_args()
    a.bptt_len = a.bptt_len or None
    if a.worker:
        worker(a)
        return
    common = [
        f"--steps={a.steps}", f"--n-envs={a.n_envs}", f"--n-steps={a.n_steps}",
        f"--batch-size={a.batch_size}", f"--n-epochs={a.n_epochs}", f"--lstm={a.lstm}",
        f"--bptt-len={a.bptt_len or 0}", f"--threads={a.threads}", f"--device={a.device}",
    ]  # fmt: skip
    print(f"machine: {machine()}")
    print(
        f"settings: n_envs={a.n_envs} n_steps={a.n_steps} batch={a.batch_size} "
        f"epochs={a.n_epochs} lstm={a.lstm} riskppo bptt_len={a.bptt_len or 'auto (16)'} "
        f"threads={a.threads} device={a.device}, {a.steps} timed steps each"
    )
    print(f"{a.repeats} interleaved rounds; median steps/s (min–max), median peak RSS")
    rows = []
    for env in a.envs:
        runs: dict[str, list[dict[str, float]]] = {algo: [] for algo in a.algos}
        for _ in range(a.repeats):  # interleaved, so slow phases of a noisy host hit everyone
            for algo in a.algos:
                runs[algo].append(run_worker(__file__, [f"--algo={algo}", f"--env={env}", *common]))
        fps = {k: statistics.median(r["fps"] for r in v) for k, v in runs.items()}
        rss = {k: statistics.median(r["rss_mb"] for r in v) for k, v in runs.items()}
        base = "RecurrentPPO" if "RecurrentPPO" in fps else None
        for algo in a.algos:
            lo, hi = min(r["fps"] for r in runs[algo]), max(r["fps"] for r in runs[algo])
            rows.append([
                env, algo, f"{fps[algo]:,.0f} ({lo:,.0f}–{hi:,.0f})",
                f"{fps[algo] / fps[base]:.2f}×" if base else "-", f"{rss[algo]:.0f}",
                f"{rss[algo] / rss[base]:.2f}" if base else "-",
            ])  # fmt: skip
        for twin in ("riskppo", "riskppo-separate"):
            if twin in fps and "riskppo-scalar" in fps:
                over = fps["riskppo-scalar"] / fps[twin] - 1
                rows.append([env, f"overhead {twin} vs scalar", f"{over:+.1%}", "", "", ""])
    print(table(rows, ["env", "trainer", "steps/s", "vs RecurrentPPO", "peak RSS MB", "RSS ratio"]))


if __name__ == "__main__":
    main()
