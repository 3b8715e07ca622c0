"""Env steps/s of the trading env: ``n`` separate envs vs the batched env, side by side.

    python benchmarks/vec_env_speed.py --config trading_googl --n-envs 8

Both vec envs are what training builds (``env.vectorized: false`` / ``true``, observation
normalisation off), in one process; they are timed in alternating blocks of ``--steps`` vec
steps (``--rounds`` each, the median kept), with the same pre-sampled actions, so a busy machine
slows both alike. Prints steps/s (env steps: vec steps x n) of each and their ratio.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from _common import BenchParser, positive_int, run_main
from stable_baselines3.common.vec_env import VecEnv

from riskppo.config import Config
from riskppo.envs.registration import register_envs
from riskppo.envs.vec.build import build_vec_env


def _build(cfg: Config, n: int, vectorized: bool) -> VecEnv:
    env = cfg.env.model_copy(update={"vectorized": vectorized, "normalize_obs": False})
    return build_vec_env(cfg.env.id, env, cfg.seed, cfg.data, n_envs=n, risk=cfg.risk)


def _steps_per_s(venv: VecEnv, actions: np.ndarray) -> float:
    """Env steps/s over ``len(actions)`` vec steps (resets happen inside, as in training)."""
    t0 = time.perf_counter()
    for a in actions:
        venv.step(a)
    return actions.shape[0] * venv.num_envs / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default="trading_googl", help="a YAML file or a shipped config's name"
    )
    parser.add_argument("--n-envs", type=positive_int, nargs="+", default=[8])
    parser.add_argument("--steps", type=positive_int, default=2000, help="vec steps per block")
    parser.add_argument(
        "--rounds", type=positive_int, default=5, help="blocks of each (median kept)"
    )
    args = parser.parse_args(argv)
    register_envs()
    cfg = Config.from_yaml(args.config)
    print(f"{args.config}: median of {args.rounds} alternating blocks of {args.steps} vec steps")
    print(f"{'n_envs':>6}{'separate steps/s':>18}{'batched steps/s':>17}{'ratio':>8}")
    for n in args.n_envs:
        separate, batched = _build(cfg, n, False), _build(cfg, n, True)
        space = separate.action_space
        rng = np.random.default_rng(0)
        if space.shape:  # continuous: [steps, n, 1]
            actions = rng.uniform(-1, 1, size=(args.steps, n, *space.shape)).astype(np.float32)
        else:
            actions = rng.integers(0, int(space.n), size=(args.steps, n))  # type: ignore[attr-defined]
        separate.reset()
        batched.reset()
        times: dict[str, list[float]] = {"separate": [], "batched": []}
        for _ in range(args.rounds):
            times["separate"].append(_steps_per_s(separate, actions))
            times["batched"].append(_steps_per_s(batched, actions))
        a, b = (statistics.median(times[k]) for k in ("separate", "batched"))
        print(f"{n:>6}{a:>18,.0f}{b:>17,.0f}{b / a:>7.2f}x")


if __name__ == "__main__":
    sys.exit(run_main(main))
