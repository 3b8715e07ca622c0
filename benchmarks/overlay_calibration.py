"""How the risk overlay's defaults (``env.kwargs.overlay``: fast volatility span and margin) were
chosen, on validation periods only — and what the choice does on the test periods.

The passive full signal (vol-targeted buy-and-hold at signal 1, the most exposure the agent can
ever reach) runs through the trading env on GOOGL and the 20 bundled stocks, frozen split
(train 70% / validation 15% / test 15%), with the default config's sizing and costs and each
overlay setting of the grid. Per setting it prints how many series meet the 20-bar CVaR limit
over the whole period, in how many 126-bar windows (the walk-forward segment length) it is met,
the mean Sharpe ratio and the mean |exposure|.

The rule, fixed before any test figure was looked at: the smallest margin with which the limit
holds on every series' whole validation period and in >= 95% of the validation windows, for
every fast span; then the fast span that meets the most windows (ties: the faster).

    python benchmarks/overlay_calibration.py                 # validation: the choice
    python benchmarks/overlay_calibration.py --part test     # what it does out of sample
    python benchmarks/overlay_calibration.py --limit -0.02   # a tighter limit
"""

from __future__ import annotations

import logging
import sys

import numpy as np
from _common import BenchParser, run_main

from riskppo.envs.market.datasets import SP500_SYMBOLS
from riskppo.envs.trading.factory import make_trading_env
from riskppo.evaluation.metrics import horizon_cvar

WINDOW = 126
GRID_FAST = (5, 10, 20)
GRID_MARGIN = (1.0, 1.15, 1.3, 1.5)


def passive_returns(
    dataset: str, symbol: str | None, part: str, overlay: dict[str, object] | None
) -> tuple[np.ndarray, np.ndarray]:
    """Net log returns and exposures ``[T]`` of signal 1 held through ``part``."""
    kw = {
        "dataset": dataset,
        "symbol": symbol,
        "part": part,
        "continuous": True,
        "sizing": "vol_target",
        "vol_target": 0.08,
        "vol_span": 60,
        "fee": 0.0005,
    }
    if overlay is not None:
        kw["overlay"] = overlay
    env = make_trading_env(**kw)
    env.reset()
    action = np.ones(1, np.float32)
    rets, pos = [], []
    done = False
    while not done:
        _, _, term, trunc, info = env.step(action)
        rets.append(info["gross_return"] - info["costs"])
        pos.append(info["position"])
        done = term or trunc
    return np.asarray(rets), np.asarray(pos)


def evaluate(part: str, limit: float, overlay: dict[str, object] | None) -> dict[str, float]:
    """Whole-period and per-window limit counts, mean Sharpe and |exposure| over the series."""
    series = [("googl", None)] + [("sp500", s) for s in SP500_SYMBOLS]
    whole = windows = met = 0
    sharpe, exposure = [], []
    for dataset, symbol in series:
        full = None if overlay is None else {"limit": limit, **overlay}
        r, p = passive_returns(dataset, symbol, part, full)
        whole += int((horizon_cvar(r, 0.05, 20) or 0.0) >= limit)
        for i in range(0, len(r) - WINDOW // 2, WINDOW):
            windows += 1
            met += int((horizon_cvar(r[i : i + WINDOW], 0.05, 20) or 0.0) >= limit)
        sharpe.append(r.mean() / r.std() * np.sqrt(252))
        exposure.append(np.abs(p).mean())
    return {
        "series": len(series),
        "whole": whole,
        "windows": windows,
        "met": met,
        "sharpe": float(np.mean(sharpe)),
        "exposure": float(np.mean(exposure)),
    }


def main() -> None:
    ap = BenchParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="val", choices=("train", "val", "test"))
    ap.add_argument("--limit", type=float, default=-0.04, help="20-bar CVaR 5%% limit")
    args = ap.parse_args()
    logging.getLogger("riskppo").setLevel(logging.ERROR)  # close-only data notes
    print(f"passive full signal, {args.part} periods, 20-bar CVaR 5% limit {args.limit:g}")
    print(f"{'overlay':<16} {'whole':>7} {'windows met':>13} {'Sharpe':>7} {'|exposure|':>10}")
    settings: list[dict[str, object] | None] = [None]
    settings += [{"fast_span": f, "margin": m} for f in GRID_FAST for m in GRID_MARGIN]
    for ov in settings:
        name = "none" if ov is None else f"fast {ov['fast_span']}, m {ov['margin']}"
        e = evaluate(args.part, args.limit, ov)
        print(
            f"{name:<16} {e['whole']:>3}/{e['series']:<3} {e['met']:>5}/{e['windows']:<3} "
            f"({e['met'] / e['windows']:.0%}) {e['sharpe']:>6.2f} {e['exposure']:>10.3f}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(run_main(main))
