"""SA-PPO vs vanilla under observation attacks (R-ADV acceptance; issue: adversarial robustness).

For each seed, trains a vanilla agent and an SA-PPO agent (same config, plus the SA regulariser)
on masked-velocity Pendulum, each in its own process (``--jobs`` at a time), then evaluates both
clean and under the random, PGD (MAD) and critic attacks at several ε (normalised observation
units). Prints mean ± std over seeds and writes a plot.

    python benchmarks/robustness.py --seeds 0 1 2 --out runs/robustness
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    BenchParser,
    machine,
    non_negative_int,
    positive_int,
    run_main,
    run_worker,
    table,
)

ENV = "riskppo/MaskedVelocityPendulum-v1"
TRAIN = {
    "env": {"id": ENV, "n_envs": 8, "normalize_obs": True},
    "ppo": {
        "n_steps": 256, "batch_size": 512, "bptt_len": 16, "n_epochs": 10, "gamma": 0.9,
        "learning_rate": 1e-3,
    },
}  # fmt: skip
SA = {"kappa": 0.3, "eps": 0.1, "pgd_steps": 3}
ATTACKS = ["random", "pgd", "critic"]


def worker(arm: str, seed: int, steps: int, eps: list[float], out: Path) -> dict[str, Any]:
    from riskppo.agent import DistributionalPPO
    from riskppo.config import Config
    from riskppo.evaluation.robustness import robustness_table

    data = json.loads(json.dumps(TRAIN))
    data.update(seed=seed, total_timesteps=steps)
    if arm == "sa":
        data["adversarial"] = {**SA, "eps_warmup_updates": steps // (8 * 256) // 2}
    model = DistributionalPPO(config=Config.build(data))
    t0 = time.perf_counter()
    model.learn(steps)
    minutes = (time.perf_counter() - t0) / 60
    model.save(out / f"{arm}-s{seed}")
    rows = robustness_table(model, ATTACKS, eps, n_episodes=20, steps=10)
    model.close()
    return {"arm": arm, "seed": seed, "train_minutes": minutes, "rows": rows}


def main() -> None:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=positive_int, default=163_840)
    p.add_argument("--eps", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    p.add_argument("--jobs", type=positive_int, default=2)
    p.add_argument("--out", default="runs/robustness")
    p.add_argument("--worker", nargs=2, metavar=("ARM", "SEED"), help=argparse.SUPPRESS)
    a = p.parse_args()
    out = Path(a.out)
    if a.worker:
        res = worker(a.worker[0], int(a.worker[1]), a.steps, a.eps, out)
        print(json.dumps(res))
        return
    out.mkdir(parents=True, exist_ok=True)
    common = ["--steps", str(a.steps), "--out", str(out), "--eps", *map(str, a.eps)]
    jobs = [(arm, s) for s in a.seeds for arm in ("vanilla", "sa")]
    with ProcessPoolExecutor(a.jobs) as pool:
        futures = [
            pool.submit(run_worker, __file__, [arm, str(s), *common], 7200) for arm, s in jobs
        ]
        results = [f.result() for f in futures]
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"machine: {machine()}")
    print(f"{ENV}, {a.steps:,} steps, seeds {a.seeds}, SA-PPO {SA}; mean ± std over seeds of the")
    print("mean return over 20 deterministic episodes (attack ε in normalised-observation units)")
    print(summary_table(results, a.eps))
    plot(results, a.eps, out / "robustness.png")
    print(f"plot → {out / 'robustness.png'}")


def cell(results: list[dict[str, Any]], arm: str, attack: str, eps: float) -> str:
    vals = [
        r["mean"]
        for res in results
        if res["arm"] == arm
        for r in res["rows"]
        if r["attack"] == attack and r["eps"] == eps
    ]
    return f"{np.mean(vals):.0f} ± {np.std(vals):.0f}"


def summary_table(results: list[dict[str, Any]], eps_values: list[float]) -> str:
    header = ["arm", "clean", *(f"{att} ε={e}" for att in ATTACKS for e in eps_values), "train min"]
    rows = []
    for arm in ("vanilla", "sa"):
        minutes = np.mean([r["train_minutes"] for r in results if r["arm"] == arm])
        rows.append(
            [
                arm,
                cell(results, arm, "none", 0.0),
                *(cell(results, arm, att, e) for att in ATTACKS for e in eps_values),
                f"{minutes:.1f}",
            ]
        )
    return table(rows, header)


def plot(results: list[dict[str, Any]], eps_values: list[float], path: Path) -> None:
    from matplotlib.figure import Figure

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from riskppo.evaluation.plots import figure_png

    fig = Figure(figsize=(11, 3.6), layout="constrained")
    axes = fig.subplots(1, len(ATTACKS), sharey=True)
    xs = [0.0, *eps_values]
    for ax, att in zip(axes, ATTACKS):
        for arm, color in (("vanilla", "C0"), ("sa", "C3")):
            per_seed = []
            for res in (r for r in results if r["arm"] == arm):
                rows = {(r["attack"], r["eps"]): r["mean"] for r in res["rows"]}
                per_seed.append([rows[("none", 0.0)], *(rows[(att, e)] for e in eps_values)])
            m, s = np.mean(per_seed, axis=0), np.std(per_seed, axis=0)
            label = "SA-PPO" if arm == "sa" else "vanilla"
            ax.plot(xs, m, marker="o", color=color, label=label)
            ax.fill_between(xs, m - s, m + s, color=color, alpha=0.15)
        ax.set_title(f"{att} attack")
        ax.set_xlabel("ε (L∞, normalised obs)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean episode return")
    axes[0].legend()
    fig.suptitle(f"{ENV}: return under attack (mean ± std over seeds)")
    path.write_bytes(figure_png(fig))


if __name__ == "__main__":
    sys.exit(run_main(main))
