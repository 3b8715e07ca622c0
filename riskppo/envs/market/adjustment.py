"""Adjusted prices: a file's Adj Close as its close, and the splits its Close is not adjusted
for, found by comparing the two.

Files from a broker or an exchange often carry the traded (unadjusted) Close next to an Adj Close
that is adjusted for splits and dividends. On a 4-for-1 split the Close falls 75% in one bar
while the Adj Close does not move: an agent trained on the Close sees a crash that never cost a
holder anything, and the CVaR of the period is that crash. The ratio ``adj_close / close`` moves
only by a dividend's yield on an ex-date (a few percent), and by the split factor on a split
(×1.25 for 5:4, ×2 for 2:1, ×4 for 4:1). A bar where it moves by more than a factor 1.2 is named
in a :class:`~riskppo.envs.market.errors.DataWarning` whose remedy is ``adjusted=True``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from riskppo.envs.market.errors import DataError, DataWarning, Remedy

__all__ = ["SPLIT_FACTOR", "adjust_prices", "warn_unadjusted_splits"]

SPLIT_FACTOR = 1.2  # a one-bar change of adj_close / close beyond this factor: a split
_ADJUST = Remedy((("adjusted", True),), "to trade the Adj Close (splits and dividends adjusted)")


def adjust_prices(values: dict[str, np.ndarray], adj: np.ndarray) -> None:
    """In place: ``close`` becomes ``adj`` and open/high/low (those present) scale by
    ``adj / close``, so OHLC stays consistent."""
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = adj / values["close"]
    for c in ("open", "high", "low"):
        if c in values:
            values[c] = values[c] * factor
    values["close"] = adj


def warn_unadjusted_splits(
    close: np.ndarray, adj: np.ndarray, ts: np.ndarray, rows: np.ndarray, source: str
) -> None:
    """Warn once for ``source`` if ``adj / close`` changes by more than :data:`SPLIT_FACTOR`
    between two bars, naming the first such bar (its 1-based data row ``rows[i]`` and timestamp
    ``ts[i]``) and how many there are. Bars where either price is missing are skipped."""
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.abs(np.diff(np.log(adj / close)))
    jumps = np.flatnonzero(step > math.log(SPLIT_FACTOR)) + 1  # NaN compares False
    if len(jumps) == 0:
        return
    i = int(jumps[0])
    more = f"; {len(jumps) - 1} more such bars follow" if len(jumps) > 1 else ""
    problem = (
        f"Close moves {close[i] / close[i - 1] - 1:+.1%} in one bar and Adj Close "
        f"{adj[i] / adj[i - 1] - 1:+.1%}, as at a split the Close is not adjusted for{more}: the "
        "agent trains and is scored on the Close"
    )
    detail = DataError(
        source, problem, row=int(rows[i]), when=str(pd.Timestamp(ts[i])), remedy=_ADJUST
    )
    warnings.warn(DataWarning(detail), stacklevel=3)
