"""Where does a trained agent's signal lose the planted information? A probe of a walk-forward's
cell models on a planted market (``benchmarks/learnability.py --walkforward`` writes the runs).

For each cell (segment, seed) it loads the frozen model and evaluates its policy on every bar of
the cell's training rows and test rows (the observation of that bar, the position slot at the
middle of the band, so the probe asks what the policy wants rather than what it held): the
action mean **before** the env clips it into ``[-1, 1]``, and the signal after. Printed per cell:

* ``out``: the share of bars whose action mean lies outside ``[-1, 1]`` (where the deterministic
  signal sits at a bound and a small change of the mean has no effect);
* ``top``: the share of bars at the top of the band;
* the correlation with the planted information of the unclipped mean (``r mean``), of the
  signal (``r signal``) and of the supervised ridge baseline's signal fitted on the same
  training rows (``r ridge``), and the correlation of the unclipped mean with the ridge
  forecast (``mean~ridge``);
* ``agree``: how often the agent's signal is above the band's middle exactly where the ridge's
  is above its own quantile at the agent's share of such bars (the same decisions, bang-bang).

    python benchmarks/learnability_probe.py RUN_DIR --market ar0.15 --seed 1
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BenchParser, run_main
from _planted_refs import make_market


def policy_means(model: Any, env: Any) -> np.ndarray:
    """``[n]`` the deterministic action means (unclipped) over ``env``'s trading range."""
    import torch

    lo, hi = env.trading_range
    obs = env._table[lo:hi].copy()
    band = env.signal_range
    obs[:, env._n_win] = 0.5 * (band[0] + band[1]) * np.asarray(env._scale)[lo:hi]
    x = torch.as_tensor(model.normalize_obs(obs))
    state = model.policy.initial_state(len(x), torch.device("cpu"))
    starts = torch.zeros(len(x), dtype=torch.bool)
    with torch.inference_mode():
        step = model.policy.act(
            x, state.pi, starts, deterministic=True, generator=model.state.rng.sample
        )
    return step.actions.numpy().reshape(-1)


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1]) if np.std(a) > 0 and np.std(b) > 0 else float("nan")


def probe_cell(cell: Path, info: np.ndarray) -> list[dict[str, Any]]:
    """The figures of one cell's model on its training and test rows."""
    from riskppo.agent import DistributionalPPO
    from riskppo.evaluation.backtest import _agent_env
    from riskppo.evaluation.supervised import supervised_signals

    model = DistributionalPPO.load(cell / "model", rebuild_env=False)
    _, train = _agent_env(model.config, "train")
    _, test = _agent_env(model.config, "test")
    rows = []
    for part, env in (("train", train), ("test", test)):
        lo, hi = env.trading_range
        mean = policy_means(model, env)
        signal = np.clip(mean, -1.0, 1.0)
        ridge = supervised_signals(train, env)[0][lo:hi]
        up = signal > 0.0
        cut = np.quantile(ridge, 1.0 - up.mean())
        rows.append(
            {
                "cell": cell.name,
                "part": part,
                "out": float((np.abs(mean) > 1.0).mean()),
                "top": float((mean >= 1.0).mean()),
                "r mean": _corr(mean, info[lo:hi]),
                "r signal": _corr(signal, info[lo:hi]),
                "r ridge": _corr(ridge, info[lo:hi]),
                "mean~ridge": _corr(mean, ridge),
                "agree": float((up == (ridge > cut)).mean()),
            }
        )
    return rows


def main() -> None:
    p = BenchParser(description=__doc__)
    p.add_argument("run_dir", type=Path, help="a walk-forward run on a planted market")
    p.add_argument("--market", default="ar0.15", help="the planted market's name")
    p.add_argument("--seed", type=int, default=1, help="the planted market's seed")
    p.add_argument("--bars", type=int, default=3000)
    args = p.parse_args()
    _, planted = make_market(args.market, args.bars, args.seed)
    info = np.asarray(planted.info, dtype=np.float64)
    keys = ("out", "top", "r mean", "r signal", "r ridge", "mean~ridge", "agree")
    print(f"| cell | part | {' | '.join(keys)} |")
    print("|---|---|" + "---|" * len(keys))
    for cell in sorted((args.run_dir / "cells").iterdir()):
        for row in probe_cell(cell, info):
            figures = " | ".join(f"{row[k]:.2f}" for k in keys)
            print(f"| {row['cell']} | {row['part']} | {figures} |")


if __name__ == "__main__":
    sys.exit(run_main(main))
