"""Plasticity under non-stationarity: Adam vs (Adaptive)UPGD vs Adam + VGS (design §4, R-OPT-1/2).

Task: :class:`~riskppo.envs.tasks.nonstationary.NonStationaryCartPole` (mode ``both``). Phase 0
is plain CartPole; at every switch the observation is re-coded (a new permutation and sign flips of
``(x, ẋ, θ, θ̇)``) and the meaning of the two actions flips in odd phases. Every phase is the same
MDP up to relabelling, so returns reached in later phases measure how well the learner still
adapts (loss of plasticity), not how hard the phase is.

One model per (optimizer, seed) is trained through ``--phases`` phases of ``--steps-per-phase``
env steps each, the phase switched between ``learn`` calls with ``venv.env_method("set_phase",
k)``. The task sequence depends on the seed only, so every optimizer sees the same phases for a
given seed. Evaluation (deterministic policy, separate eval envs in the same phase, **exactly one
episode per eval env**, so short episodes are not over-counted) happens right after each switch
("at switch": how much of the old policy transfers) and ``--evals-per-phase`` times during the
phase; "end" is the last of these, "adapt" their mean (area under the phase's learning curve,
i.e. adaptation speed). Each run is a fresh process, one at a time.

    python benchmarks/plasticity.py --quick                      # smoke test, ~1 min
    python benchmarks/plasticity.py                              # 3 seeds × 6 phases × 16k steps,
                                                                 # 4 optimizers: ~13 min, 2 cores
    python benchmarks/plasticity.py --seeds 5 --phases 8 --plot plasticity.png --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
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

# Shared PPO settings (small: the benchmark must run on a laptop CPU).
SETTINGS: dict[str, Any] = dict(
    n_envs=8, n_steps=64, batch_size=256, bptt_len=16, n_epochs=4, lstm_hidden_size=32
)
ROLLOUT = SETTINGS["n_envs"] * SETTINGS["n_steps"]

# Optimizer configurations: keyword arguments and the ``optim`` config section. Not tuned: one
# coarse check each on plain CartPole (24k steps, seed 0, training return): adam 1e-3 → ~180,
# adaptive_upgd 1e-3 → ~140. Plain UPGD is SGD with a utility gate (which passes about half the
# step) and PPO's gradients here are small (norm ~0.1–0.3 after clipping to 0.5): lr 1e-2 → 24,
# 5e-2 → 26, 0.2 → 37, 1.0 → 56 (sgd 5e-2 → 28), so it gets the largest of those, 1.0.
OPTIMIZERS: dict[str, dict[str, Any]] = {
    "adam": {"optimizer": "adam", "learning_rate": 1e-3, "optim": {}},
    "upgd": {
        "optimizer": "upgd",
        "learning_rate": 1.0,
        "optim": {"sigma": 1e-3, "beta_utility": 0.999},
    },
    "adam+vgs": {
        "optimizer": "adam",
        "learning_rate": 1e-3,
        "optim": {
            "vgs": {
                "enabled": True,
                "mode": "spatial_mean",
                "beta": 0.99,
                "alpha": 1.0,
                "warmup_steps": 100,
                "min_scale": 0.1,
            }
        },
    },
    "adaptive_upgd": {
        "optimizer": "adaptive_upgd",
        "learning_rate": 1e-3,
        "optim": {"sigma": 1e-3, "beta_utility": 0.999},
    },
}
DEFAULT_OPTIMIZERS = ["adam", "upgd", "adaptive_upgd", "adam+vgs"]


# ------------------------------------------------------------------------------------- worker
def _make_env(task_seed: int, max_episode_steps: int) -> Any:
    import functools

    from riskppo.envs.tasks.nonstationary import NonStationaryCartPole

    return functools.partial(
        NonStationaryCartPole, task_seed=task_seed, max_episode_steps=max_episode_steps
    )


def evaluate_one_episode_each(model: Any, venv: Any) -> float:
    """Mean undiscounted return of the first episode of every env (deterministic policy)."""
    import numpy as np

    obs = venv.reset()
    n = venv.num_envs
    state, starts = None, np.ones(n, dtype=bool)
    acc, done = np.zeros(n), np.zeros(n, dtype=bool)
    while not done.all():
        actions, state = model.predict(obs, state, starts, deterministic=True)
        obs, rewards, dones, _ = venv.step(actions)
        acc += np.where(done, 0.0, rewards)
        done |= dones
        starts = dones
    return float(acc.mean())


def worker(a: argparse.Namespace) -> None:
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    from riskppo import DistributionalPPO

    torch.set_num_threads(1)
    spec = OPTIMIZERS[a.opt]
    env_fn = _make_env(a.seed, a.max_episode_steps)
    model = DistributionalPPO(
        env_fn,
        seed=a.seed,
        optimizer=spec["optimizer"],
        learning_rate=spec["learning_rate"],
        config={"optim": json.loads(json.dumps(spec["optim"]))},  # a private copy
        **SETTINGS,
    )
    eval_env = make_vec_env(env_fn, n_envs=a.eval_episodes, seed=a.seed + 10_000)
    chunk = a.steps_per_phase // a.evals_per_phase
    at_switch, curves = [], []
    t0 = time.perf_counter()
    train_s = 0.0
    for k in range(a.phases):
        model.env.env_method("set_phase", k)
        eval_env.env_method("set_phase", k)
        at_switch.append(evaluate_one_episode_each(model, eval_env))
        curve = []
        for _ in range(a.evals_per_phase):
            t = time.perf_counter()
            model.learn(chunk, reset_num_timesteps=False)
            train_s += time.perf_counter() - t
            curve.append(evaluate_one_episode_each(model, eval_env))
        curves.append(curve)
    out = {
        "opt": a.opt,
        "seed": a.seed,
        "at_switch": at_switch,
        "curves": curves,
        "end": [c[-1] for c in curves],
        "adapt": [sum(c) / len(c) for c in curves],
        "timesteps": model.num_timesteps,
        "wall_s": time.perf_counter() - t0,
        "train_sps": model.num_timesteps / train_s,
        "rss_mb": peak_rss_mb(),
    }
    if model.vgs is not None:
        f = list(model.vgs.last_factors.values())
        out["vgs_factor_mean_last"] = sum(f) / len(f)
        out["vgs_factor_min_last"] = min(f)
    print(json.dumps(out))


# ------------------------------------------------------------------------------------- report
def _mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s


def _cell(xs: list[float]) -> str:
    m, s = _mean_std(xs)
    return f"{m:.0f} ± {s:.0f}"


def _report(results: dict[str, list[dict[str, Any]]], key: str, title: str, phases: int) -> None:
    half = phases // 2
    header = ["optimizer", *[f"P{k}" for k in range(phases)]]
    if phases >= 2:
        header += [f"P0–{half - 1}", f"P{phases - half}–{phases - 1}", "late − early"]
    rows = []
    for opt, runs in results.items():
        row = [opt, *[_cell([r[key][k] for r in runs]) for k in range(phases)]]
        if phases >= 2:
            early = [sum(r[key][:half]) / half for r in runs]
            late = [sum(r[key][phases - half :]) / half for r in runs]
            delta = [b - e for e, b in zip(early, late)]
            m, s = _mean_std(delta)
            row += [_cell(early), _cell(late), f"{m:+.0f} ± {s:.0f}"]
        rows.append(row)
    print(f"\n{title}")
    print(table(rows, header))


def _plot(results: dict[str, list[dict[str, Any]]], a: argparse.Namespace, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    chunk = a.steps_per_phase // a.evals_per_phase
    fig, ax = plt.subplots(figsize=(10, 4))
    for opt, runs in results.items():
        xs, ys = [], []
        for k in range(a.phases):
            xs.append(k * a.steps_per_phase)
            ys.append([r["at_switch"][k] for r in runs])
            for j in range(a.evals_per_phase):
                xs.append(k * a.steps_per_phase + (j + 1) * chunk)
                ys.append([r["curves"][k][j] for r in runs])
        y = np.asarray(ys)
        mean, std = y.mean(axis=1), y.std(axis=1)
        ax.plot(xs, mean, label=opt)
        ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
    for k in range(1, a.phases):
        ax.axvline(k * a.steps_per_phase, color="grey", lw=0.5, ls="--")
    ax.set_xlabel("env steps (phase switch at dashed lines)")
    ax.set_ylabel("eval return (deterministic)")
    ax.set_title(f"NonStationaryCartPole, {a.seeds} seeds, mean ± std")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nplot written to {path}")


def _args() -> argparse.Namespace:
    """The command line, ``--quick`` applied, steps per phase rounded to whole updates."""
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--opt", default="adam", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=non_negative_int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--optimizers", nargs="+", default=DEFAULT_OPTIMIZERS, choices=OPTIMIZERS)
    p.add_argument("--seeds", type=positive_int, default=3, help="seeds 0..N-1 per optimizer")
    p.add_argument("--phases", type=positive_int, default=6)
    p.add_argument("--steps-per-phase", type=positive_int, default=16384)
    p.add_argument("--evals-per-phase", type=positive_int, default=4)
    p.add_argument(
        "--eval-episodes", type=positive_int, default=16, help="eval envs, one episode each"
    )
    p.add_argument("--max-episode-steps", type=positive_int, default=500)
    p.add_argument("--quick", action="store_true", help="2 seeds, 3 phases of 4096 steps")
    p.add_argument("--plot", metavar="PNG", help="learning curves (needs matplotlib)")
    p.add_argument("--json", metavar="PATH", help="write all per-run results")
    a = p.parse_args()
    if a.quick:
        a.seeds, a.phases, a.steps_per_phase, a.evals_per_phase = 2, 3, 4096, 2
    # whole updates per eval chunk (learn() always finishes the update it started)
    per_chunk = max(1, round(a.steps_per_phase / a.evals_per_phase / ROLLOUT)) * ROLLOUT
    a.steps_per_phase = per_chunk * a.evals_per_phase
    return a


def _print_setup(a: argparse.Namespace) -> None:
    print(f"machine: {', '.join(machine().split(', ')[:3])}; 1 torch thread per worker")
    print(
        "task: NonStationaryCartPole(mode='both', max_episode_steps="
        f"{a.max_episode_steps}), task_seed = seed; {a.phases} phases × {a.steps_per_phase} "
        f"steps, {a.evals_per_phase} evals per phase + 1 at each switch, "
        f"{a.eval_episodes} deterministic eval episodes each"
    )
    print(
        "PPO: " + " ".join(f"{k}={v}" for k, v in SETTINGS.items()) + ", quantile twin critics "
        "(library defaults otherwise)"
    )
    for opt in a.optimizers:
        s = OPTIMIZERS[opt]
        print(f"  {opt}: optimizer={s['optimizer']} lr={s['learning_rate']:g} optim={s['optim']}")


def _run_all(a: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every (seed, optimizer) run, each in its own worker process."""
    common = [
        f"--phases={a.phases}", f"--steps-per-phase={a.steps_per_phase}",
        f"--evals-per-phase={a.evals_per_phase}", f"--eval-episodes={a.eval_episodes}",
        f"--max-episode-steps={a.max_episode_steps}",
    ]  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {opt: [] for opt in a.optimizers}
    t0 = time.perf_counter()
    for seed in range(a.seeds):
        for opt in a.optimizers:
            r = run_worker(__file__, [f"--opt={opt}", f"--seed={seed}", *common])
            results[opt].append(r)
            print(
                f"  done {opt:<13} seed {seed}: end={[round(x) for x in r['end']]} "
                f"({r['wall_s']:.0f} s, {r['train_sps']:.0f} train steps/s, "
                f"{r['rss_mb']:.0f} MB)",
                flush=True,
            )
    print(f"total wall time {time.perf_counter() - t0:.0f} s")
    return results


def main() -> None:
    a = _args()
    if a.worker:
        worker(a)
        return
    _print_setup(a)
    results = _run_all(a)
    n = f"mean ± std over {a.seeds} seeds; P<k> = phase k; P0 is plain CartPole from scratch"
    _report(results, "at_switch", f"Return right after each switch, untrained ({n})", a.phases)
    _report(results, "end", f"Return at the end of each phase ({n})", a.phases)
    _report(results, "adapt", f"Adaptation: mean return over each phase's evals ({n})", a.phases)
    vgs = [r for runs in results.values() for r in runs if "vgs_factor_mean_last" in r]
    if vgs:
        mean_f = sum(r["vgs_factor_mean_last"] for r in vgs) / len(vgs)
        min_f = min(r["vgs_factor_min_last"] for r in vgs)
        print(f"\nVGS factors at the last update: mean {mean_f:.3f}, min {min_f:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": results}, f, indent=1)
    if a.plot:
        _plot(results, a, a.plot)


if __name__ == "__main__":
    sys.exit(run_main(main))
