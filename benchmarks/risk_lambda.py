"""λ dynamics of the CVaR constraint on riskppo/RiskyChoice-v0: dual ascent vs PID Lagrangian.

Each seed trains once per multiplier update (``risk.lambda_update``): ``dual`` (projected dual
ascent with ``--lambda-lr``) and ``pid`` (the PID Lagrangian with RiskConfig's default gains unless
``--pid-kp/--pid-ki/--pid-kd/--pid-ema`` say otherwise). The plot overlays λ and the empirical
CVaR of recent episodes (against the limit) over updates, one colour per update kind; the table
gives per update kind and seed the peak-to-peak amplitude of λ (max − min) over the second half of
training, the final λ, and the final deterministic policy: its arm (1 = risky), the sampled
policy's share of risky picks and the evaluation mean/CVaR over 200 episodes.

    python benchmarks/risk_lambda.py --out docs/img/risk_lambda.png --seeds 0 1 2
    python benchmarks/risk_lambda.py --updates pid --pid-kp 1.0 --out /tmp/pid.png

Smoke test: ``--seeds 0 --steps 2048``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from _common import BenchParser, non_negative_int, positive_int, run_main, table

from riskppo import DistributionalPPO
from riskppo.config import RiskConfig

SETTINGS: dict[str, Any] = dict(
    n_envs=8, n_steps=32, batch_size=64, bptt_len=8, cvar_alpha=0.1, cvar_limit=0.0,
    learning_rate=3e-3, ent_coef=0.01,
)  # fmt: skip
UPDATES = ("dual", "pid")
COLOURS = {"dual": "C0", "pid": "C3"}
PID_KEYS = ("pid_kp", "pid_ki", "pid_kd", "pid_ema")
EVAL_EPISODES = 200


@dataclass
class Trace:
    """One training run: per update λ and the empirical CVaR; the trained policy's evaluation."""

    kind: str
    seed: int
    lam: list[float] = field(default_factory=list)
    cvar_emp: list[float] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)

    @property
    def amplitude(self) -> float:
        """Peak-to-peak λ (max − min) over the second half of the updates."""
        half = self.lam[len(self.lam) // 2 :]
        return float(np.ptp(half)) if half else float("nan")


def update_settings(kind: str, a: argparse.Namespace) -> dict[str, Any]:
    if kind == "dual":
        return {"lambda_update": "dual", "lambda_lr": a.lambda_lr}
    return {"lambda_update": "pid", **{k: getattr(a, k) for k in PID_KEYS}}


def describe(kind: str, a: argparse.Namespace) -> str:
    s = update_settings(kind, a)
    return ", ".join(
        f"{k.removeprefix('pid_')} {v:g}" for k, v in s.items() if k != "lambda_update"
    )


def risky_choice(model: DistributionalPPO, samples: int = 1000) -> dict[str, float]:
    """The deterministic arm at the (only) observation, and the sampled policy's risky share."""
    obs = np.zeros((1, 1), np.float32)
    arm, _ = model.predict(obs, deterministic=True)
    sampled, _ = model.predict(np.zeros((samples, 1), np.float32), deterministic=False)
    return {"risky_arm": float(arm[0]), "p_risky": float(np.mean(sampled))}


def trace(kind: str, seed: int, a: argparse.Namespace) -> Trace:
    model = DistributionalPPO(
        "riskppo/RiskyChoice-v0", seed=seed, **SETTINGS, **update_settings(kind, a)
    )
    out = Trace(kind, seed)

    def record(m: DistributionalPPO, _metrics: object) -> bool:
        latest = m.monitor.latest if m.monitor else {}
        out.lam.append(latest["risk/lambda"])
        out.cvar_emp.append(latest.get("risk/cvar_empirical_segment", float("nan")))
        return True

    model.learn(a.steps, callback=record)
    stats = model.evaluate(EVAL_EPISODES, deterministic=True)
    out.final = {**risky_choice(model), "eval_mean": stats["mean"], "eval_cvar": stats["cvar"]}
    model.close()
    print(f"{kind} seed {seed}: λ amplitude {out.amplitude:.3f}, {out.final}")
    return out


def plot(traces: list[Trace], a: argparse.Namespace) -> None:
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    styles = ["-", "--", ":", "-."]
    for t in traces:
        x = range(1, len(t.lam) + 1)
        ls = styles[a.seeds.index(t.seed) % len(styles)]
        label = f"{t.kind} ({describe(t.kind, a)}), seed {t.seed}"
        ax1.plot(x, t.lam, color=COLOURS[t.kind], ls=ls, lw=1.3, label=label)
        ax2.plot(x, t.cvar_emp, color=COLOURS[t.kind], ls=ls, lw=1.3)
    limit = SETTINGS["cvar_limit"]
    ax2.axhline(limit, color="k", ls="--", lw=1, label=f"limit {limit:g}")
    alpha = SETTINGS["cvar_alpha"]
    ax1.set_title(
        f"CVaR constraint on RiskyChoice-v0 (α = {alpha}, limit {limit:g}): "
        "dual ascent vs PID Lagrangian"
    )
    ax1.set_ylabel("λ (CVaR multiplier)")
    ax1.legend(fontsize=7, ncol=2)
    ax2.set_ylabel(f"empirical CVaR{alpha:g} of recent\nepisode returns")
    ax2.set_xlabel(f"update ({SETTINGS['n_envs'] * SETTINGS['n_steps']} env steps each)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    plt.close(fig)
    print(f"wrote {a.out}")


def report(traces: list[Trace], a: argparse.Namespace) -> None:
    rows = [
        [t.kind, str(t.seed), f"{t.amplitude:.3f}", f"{t.lam[-1]:.3f}" if t.lam else "—",
         f"{t.final['risky_arm']:.0f}", f"{t.final['p_risky']:.2f}",
         f"{t.final['eval_mean']:.2f}", f"{t.final['eval_cvar']:.2f}"]
        for t in traces
    ]  # fmt: skip
    header = ["update", "seed", "λ p2p (2nd half)", "final λ", "risky arm (det.)"]
    print(table(rows, [*header, "P(risky)", "eval mean", f"eval CVaR ({EVAL_EPISODES} ep.)"]))
    for kind in a.updates:
        ts = [t for t in traces if t.kind == kind]
        amp = np.mean([t.amplitude for t in ts])
        risky = np.mean([t.final["risky_arm"] for t in ts])
        cvar = np.mean([t.final["eval_cvar"] for t in ts])
        print(
            f"{kind} ({describe(kind, a)}): mean λ amplitude {amp:.3f} over {len(ts)} seeds; "
            f"risky arm in {risky:.0%} of seeds; mean eval CVaR {cvar:.2f} "
            f"(limit {SETTINGS['cvar_limit']:g})"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="docs/img/risk_lambda.png")
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=positive_int, default=40_000)
    p.add_argument("--updates", nargs="+", choices=UPDATES, default=list(UPDATES))
    p.add_argument("--lambda-lr", type=float, default=0.05, help="dual ascent step")
    defaults = RiskConfig.model_fields
    for key in PID_KEYS:
        flag = "--" + key.replace("_", "-")
        p.add_argument(
            flag, type=float, default=defaults[key].default, help="(PID) default %(default)s"
        )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    traces = [trace(kind, seed, a) for kind in a.updates for seed in a.seeds]
    plot(traces, a)
    report(traces, a)


if __name__ == "__main__":
    sys.exit(run_main(main))
