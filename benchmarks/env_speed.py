"""Single-env step throughput of ``TradingEnv`` on the bundled GOOGL data (R-TRADE-2: >= 100k/s).

    python benchmarks/env_speed.py --steps 200000

Measures ``env.step`` in a plain Python loop (with ``reset`` whenever an episode ends), actions
pre-sampled from a local RNG so that sampling is not timed. Prints one row per configuration.
"""

from __future__ import annotations

import os
import platform
import sys

import numpy as np
from _common import BenchParser, positive_int, run_main, time_env

from riskppo.envs import TradingEnv, load_dataset

TARGET = 100_000


def main(argv: list[str] | None = None) -> None:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=200_000, help="steps per measurement")
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="measurements (best is kept)"
    )
    parser.add_argument("--dataset", default="googl", choices=["googl", "eurusd"])
    args = parser.parse_args(argv)

    df = load_dataset(args.dataset)
    rng = np.random.default_rng(0)
    discrete_actions = rng.integers(0, 3, size=args.steps).tolist()
    box_actions = list(rng.uniform(-1, 1, size=(args.steps, 1)).astype(np.float32))
    configs = [
        ("discrete", dict(continuous=False), discrete_actions),
        ("continuous", dict(continuous=True), box_actions),
        ("discrete, window=32", dict(continuous=False, window=32), discrete_actions),
        ("discrete, episode=None", dict(continuous=False, episode_length=None), discrete_actions),
    ]
    print(
        f"TradingEnv on {args.dataset} ({len(df)} bars), {args.steps} steps, best of "
        f"{args.repeats}; python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"{'configuration':<26}{'obs dim':>8}{'steps/s':>12}{'target':>10}")
    for name, kwargs, actions in configs:
        env = TradingEnv(df, **kwargs)  # type: ignore[arg-type]
        sps = time_env(env, actions, args.repeats)
        ok = "ok" if sps >= TARGET else "MISS"
        dim = int(np.prod(env.observation_space.shape or (0,)))
        print(f"{name:<26}{dim:>8}{sps:>12,.0f}{ok:>10}")


if __name__ == "__main__":
    sys.exit(run_main(main))
