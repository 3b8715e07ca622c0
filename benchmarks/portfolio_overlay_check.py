"""Does the risk overlay's setting (``env.kwargs.overlay: {fast_span: 5, margin: 1.3}``, chosen
on the single assets' validation periods, docs/risk.md) keep the 20-bar CVaR limit for the
20-stock portfolio — checked on the portfolio's validation rows only?

The five skfolio baselines (:mod:`riskppo.evaluation.portfolio.baselines`; equal weight is what
the agent's zero action holds), fitted on the rows before the validation rows, are held through
the portfolio env of ``riskppo/configs/portfolio_sp20.yaml`` (8% volatility target, EWM
covariance of span 60, 5 bp fee) over the last ``--bars`` rows before ``--before`` (the first
test row of the walk-forward, 2018-01), without and with the overlay. Per series it prints the
whole period's 20-bar CVaR (5%), how many 126-bar windows (the walk-forward segment) meet the
limit, the Sharpe ratio, the mean gross exposure and the share of bars where the cap bound. No
row at or after ``--before`` is read.

    python benchmarks/portfolio_overlay_check.py
    python benchmarks/portfolio_overlay_check.py --margin 1.0 1.3   # other margins, for reference
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np
import pandas as pd
from _common import BenchError, BenchParser, positive_int, run_main

from riskppo.envs.portfolio.data import load_portfolio
from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.evaluation.metrics import horizon_cvar
from riskppo.evaluation.portfolio.baselines import fit_baselines, hold_weights

WINDOW = 126
ENV = {"vol_target": 0.08, "vol_span": 60, "covariance": "ewm", "fee": 0.0005}


def series_stats(log_returns: np.ndarray, limit: float) -> tuple[float, int, int, float]:
    """Whole-period 20-bar CVaR, windows meeting ``limit``, windows, annual Sharpe ratio."""
    r = np.asarray(log_returns)
    cvar = horizon_cvar(r, 0.05, 20) or 0.0
    starts = range(0, len(r) - WINDOW // 2, WINDOW)
    met = sum(int((horizon_cvar(r[i : i + WINDOW], 0.05, 20) or 0.0) >= limit) for i in starts)
    return cvar, met, len(starts), float(r.mean() / r.std() * np.sqrt(252))


def date(text: str) -> pd.Timestamp:
    """An argparse type: a date (``2018-01-01``)."""
    try:
        return pd.Timestamp(text)
    except ValueError:
        message = f"expected a date such as 2018-01-01, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None


def main() -> None:
    ap = BenchParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--before", type=date, default="2018-01-01", help="first row not read (the test's)"
    )
    ap.add_argument("--bars", type=positive_int, default=1250, help="validation rows before it")
    ap.add_argument("--limit", type=float, default=-0.04, help="20-bar CVaR 5%% limit")
    ap.add_argument("--margin", type=float, nargs="+", default=[1.3])
    args = ap.parse_args()
    logging.getLogger("riskppo").setLevel(logging.ERROR)
    data = load_portfolio(dataset="sp500")
    hi = int(data.index.searchsorted(args.before))
    lo = hi - args.bars
    if lo < 1:  # the baselines are fitted on the rows before the validation rows
        raise BenchError(
            f"--bars {args.bars}: only {hi} rows lie before --before {args.before.date()}; "
            f"give at most {hi - 1}"
        )
    print(f"validation rows {lo}..{hi - 1}: {data.index[lo].date()} .. {data.index[hi - 1].date()}")
    targets = fit_baselines(data.close(), (0, lo))
    head = f"{'overlay':<10} {'baseline':<19} {'CVaR20':>7} {'windows':>8} {'Sharpe':>6}"
    print(f"{head} {'gross':>6} {'bound':>6}")
    for margin in [None, *args.margin]:
        overlay = (
            None if margin is None else {"limit": args.limit, "fast_span": 5, "margin": margin}
        )
        env = PortfolioEnv(
            data.head(hi), start=lo, end=hi, random_start=False, episode_length=None,
            overlay=overlay, **ENV,
        )  # fmt: skip
        name = "none" if margin is None else f"5, m {margin:g}"
        for base, target in targets.items():
            rec = hold_weights(env, base, target)
            cvar, met, n, sharpe = series_stats(rec.log_returns, args.limit)
            gross = np.abs(rec.weights).sum(axis=1).mean()
            bound = env.overlay_binding().get("binding_share")
            shown = "-" if bound is None else f"{bound:.0%}"
            print(
                f"{name:<10} {base:<19} {cvar:>7.2%} {met:>4}/{n:<3} {sharpe:>6.2f} "
                f"{gross:>6.3f} {shown:>6}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(run_main(main))
