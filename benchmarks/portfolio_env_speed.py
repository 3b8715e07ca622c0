"""Single-env step throughput of ``PortfolioEnv`` on the 20 bundled sp500 stocks (goal: >= 20k
steps/s).

    python benchmarks/portfolio_env_speed.py --steps 50000

Measures ``env.step`` in a plain Python loop (``reset`` whenever an episode ends), actions
pre-sampled from a local RNG so that sampling is not timed. Prints one row per configuration.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

import numpy as np
from _common import BenchParser, positive_int, run_main, time_env

from riskppo.envs.portfolio.data import load_portfolio
from riskppo.envs.portfolio.env import PortfolioEnv

TARGET = 20_000


def main(argv: list[str] | None = None) -> None:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=50_000, help="steps per measurement")
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="measurements (best is kept)"
    )
    args = parser.parse_args(argv)

    data = load_portfolio(dataset="sp500")
    rng = np.random.default_rng(0)
    actions = list(rng.uniform(-1, 1, size=(args.steps, len(data.symbols))).astype(np.float32))
    configs: list[tuple[str, dict[str, Any]]] = [
        ("long-only, vol target", {}),
        ("long-only, no sizing", {"sizing": "none"}),
        ("long-short, vol target", {"long_only": False, "max_gross": 1.5}),
        ("long-only, ledoit_wolf", {"covariance": "ledoit_wolf"}),
        ("vol target, reward slopes", {"reward_slopes": True}),
    ]
    print(
        f"PortfolioEnv on sp500 ({len(data.index)} bars, {len(data.symbols)} assets), "
        f"{args.steps} steps, best of {args.repeats}; python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs"
    )
    print(f"{'configuration':<26}{'obs dim':>8}{'build s':>9}{'steps/s':>12}{'goal':>8}")
    for name, kwargs in configs:
        t0 = time.perf_counter()
        env = PortfolioEnv(data, **kwargs)
        build = time.perf_counter() - t0
        sps = time_env(env, actions, args.repeats)
        ok = "ok" if sps >= TARGET else "MISS"
        dim = int(np.prod(env.observation_space.shape or (0,)))
        print(f"{name:<26}{dim:>8}{build:>9.2f}{sps:>12,.0f}{ok:>8}")


if __name__ == "__main__":
    sys.exit(run_main(main))
