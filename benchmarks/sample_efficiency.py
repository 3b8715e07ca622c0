"""Sample efficiency on masked-velocity tasks: riskppo vs sb3-contrib RecurrentPPO (design §10).

Both trainers get the same settings (n_envs 8, n_steps 128, batch 256, 4 epochs, LSTM 64,
lr 1e-3, γ 0.99, λ 0.95, no entropy bonus); every ``--eval-every`` steps each is evaluated on
``--eval-episodes`` deterministic episodes of a separate env. Reported: environment steps until
the evaluation mean first reaches the threshold (475 on masked CartPole; median over seeds;
"> budget" when never), and the final evaluation mean. Each (trainer, seed) runs in a fresh
process, one after another (``--jobs 2`` runs two at a time on a 2-core machine).

    python benchmarks/sample_efficiency.py                       # CartPole, 5 seeds, 150k steps
    python benchmarks/sample_efficiency.py --env riskppo/MaskedVelocityPendulum-v1 \\
        --threshold -200 --budget 100000
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from _common import machine, run_worker, table

HP = dict(n_envs=8, n_steps=128, batch_size=256, n_epochs=4, lr=1e-3, gamma=0.99, gae=0.95)


def _eval_sb3(model, env_id: str, episodes: int, seed: int) -> float:
    from stable_baselines3.common.env_util import make_vec_env

    import riskppo.envs  # noqa: F401
    from riskppo.envs.registration import register_envs

    register_envs()
    venv = make_vec_env(env_id, n_envs=4, seed=seed + 10_000)
    obs = venv.reset()
    state, starts = None, np.ones(4, dtype=bool)
    acc, out = np.zeros(4), []
    while len(out) < episodes:
        action, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
        obs, r, done, _ = venv.step(action)
        acc += r
        for i in np.flatnonzero(done):
            out.append(acc[i])
            acc[i] = 0
        starts = done
    venv.close()
    return float(np.mean(out[:episodes]))


def worker(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    curve: list[tuple[int, float]] = []
    if a.algo.startswith("riskppo"):
        from riskppo import DistributionalPPO

        model = DistributionalPPO(
            a.env,
            seed=a.seed,
            n_envs=HP["n_envs"],
            n_steps=HP["n_steps"],
            batch_size=HP["batch_size"],
            n_epochs=HP["n_epochs"],
            learning_rate=HP["lr"],
            gamma=HP["gamma"],
            gae_lambda=HP["gae"],
            bptt_len=a.bptt_len,
            lstm_hidden_size=64,
            net_arch=[64],
            lstm_sharing="none" if a.algo == "riskppo-separate" else "critics",
        )
        evaluate = lambda: model.evaluate(a.eval_episodes, env=a.env)["mean"]  # noqa: E731
    else:
        from sb3_contrib import RecurrentPPO
        from stable_baselines3.common.env_util import make_vec_env

        from riskppo.envs.registration import register_envs

        register_envs()
        model = RecurrentPPO(
            "MlpLstmPolicy",
            make_vec_env(a.env, n_envs=HP["n_envs"], seed=a.seed),
            n_steps=HP["n_steps"],
            batch_size=HP["batch_size"],
            n_epochs=HP["n_epochs"],
            learning_rate=HP["lr"],
            gamma=HP["gamma"],
            gae_lambda=HP["gae"],
            seed=a.seed,
            policy_kwargs=dict(lstm_hidden_size=64, net_arch=[64]),
        )
        evaluate = lambda: _eval_sb3(model, a.env, a.eval_episodes, a.seed)  # noqa: E731
    steps = 0
    while steps < a.budget:
        model.learn(a.eval_every, reset_num_timesteps=False)
        steps = int(model.num_timesteps)
        curve.append((steps, evaluate()))
        if curve[-1][1] >= a.threshold and a.stop_at_threshold:
            break
    print(json.dumps({"curve": curve}))


def first_hit(curve: list[list[float]], threshold: float) -> int | None:
    for steps, ret in curve:
        if ret >= threshold:
            return int(steps)
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--algo", default="riskppo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env", default="riskppo/MaskedVelocityCartPole-v1")
    p.add_argument("--threshold", type=float, default=475.0)
    p.add_argument("--budget", type=int, default=150_000)
    p.add_argument("--eval-every", type=int, default=10_240)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--bptt-len", type=int, default=16)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument(
        "--algos",
        nargs="+",
        default=["riskppo", "RecurrentPPO"],
        help="riskppo (default config), riskppo-separate (one LSTM per twin critic), RecurrentPPO",
    )
    p.add_argument("--stop-at-threshold", action="store_true", help="stop a run once it hits")
    a = p.parse_args()
    if a.worker:
        worker(a)
        return
    common = [
        f"--env={a.env}", f"--threshold={a.threshold}", f"--budget={a.budget}",
        f"--eval-every={a.eval_every}", f"--eval-episodes={a.eval_episodes}",
        f"--bptt-len={a.bptt_len}", *(["--stop-at-threshold"] if a.stop_at_threshold else []),
    ]  # fmt: skip
    print(f"machine: {machine()}")
    print(f"settings: {HP}, LSTM 64, riskppo bptt_len={a.bptt_len}, env={a.env}")
    jobs = [(algo, seed) for seed in range(a.seeds) for algo in a.algos]
    with ThreadPoolExecutor(a.jobs) as pool:
        futures = {
            job: pool.submit(
                run_worker, __file__, [f"--algo={job[0]}", f"--seed={job[1]}", *common]
            )
            for job in jobs
        }
        results = {job: f.result()["curve"] for job, f in futures.items()}
    rows = []
    for algo in a.algos:
        hits = [first_hit(results[(algo, s)], a.threshold) for s in range(a.seeds)]
        finals = [results[(algo, s)][-1][1] for s in range(a.seeds)]
        as_num = [h if h is not None else float("inf") for h in hits]
        med = statistics.median(as_num)
        rows.append([
            algo,
            " ".join(str(h) if h is not None else f">{a.budget}" for h in hits),
            f"{med:,.0f}" if med != float("inf") else f">{a.budget:,}",
            f"{np.mean(finals):.1f} ± {np.std(finals):.1f}",
        ])  # fmt: skip
    print(table(rows, ["trainer", f"steps to {a.threshold:g} per seed", "median", "final eval"]))
    print(json.dumps({f"{k[0]}/{k[1]}": v for k, v in results.items()}))


if __name__ == "__main__":
    main()
