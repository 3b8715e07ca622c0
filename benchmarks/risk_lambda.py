"""λ dynamics of the CVaR constraint on riskppo/RiskyChoice-v0, as a plot for docs/risk.md.

python benchmarks/risk_lambda.py --out docs/img/risk_lambda.png --seeds 0 1 2
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from riskppo import DistributionalPPO

SETTINGS = dict(
    n_envs=8, n_steps=32, batch_size=64, bptt_len=8, cvar_alpha=0.1, cvar_limit=0.0,
    learning_rate=3e-3, lambda_lr=0.05, ent_coef=0.01,
)  # fmt: skip


def trace(seed: int, steps: int) -> dict[str, list[float]]:
    model = DistributionalPPO("riskppo/RiskyChoice-v0", seed=seed, **SETTINGS)
    out: dict[str, list[float]] = {"lambda": [], "cvar_pred": [], "cvar_emp": []}

    def record(m: DistributionalPPO, _metrics: object) -> bool:
        latest = m.monitor.latest if m.monitor else {}
        out["lambda"].append(latest["risk/lambda"])
        out["cvar_pred"].append(latest["risk/cvar_pred_segment"])
        out["cvar_emp"].append(latest.get("risk/cvar_empirical_segment", float("nan")))
        return True

    model.learn(steps, callback=record)
    print(f"seed {seed}: eval {model.evaluate(200)}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="docs/img/risk_lambda.png")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=40_000)
    a = p.parse_args()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for seed in a.seeds:
        t = trace(seed, a.steps)
        x = range(1, len(t["lambda"]) + 1)
        ax1.plot(x, t["lambda"], label=f"seed {seed}")
        ax2.plot(x, t["cvar_pred"], label=f"predicted CVaR, seed {seed}")
    ax2.axhline(SETTINGS["cvar_limit"], color="k", ls="--", label="limit")
    ax1.set_ylabel("λ")
    ax1.set_title("CVaR constraint on RiskyChoice-v0 (α = 0.1, limit 0, lambda_lr 0.05)")
    ax1.legend()
    ax2.set_ylabel("CVaR₀.₁ of episode return")
    ax2.set_xlabel("update")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
