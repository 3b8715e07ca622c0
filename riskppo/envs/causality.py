"""Does a per-bar computation look ahead? Change every bar after ``t`` and see whether any value
at a row ``<= t`` moves.

A causal feature's value at row ``t`` is a function of bars ``0..t`` only, so changing bars
``t+1..`` must leave rows ``0..t`` exactly unchanged (bit for bit: the computation is
deterministic). The built-in features are tested this way (``tests/unit/envs``), and every
feature registered with :func:`riskppo.envs.features.register` is checked this way when it is
registered (:func:`lookahead`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

__all__ = ["Lookahead", "lookahead", "perturb_after", "probe_frame"]

_PRICES = ("open", "high", "low", "close")


def perturb_after(df: pd.DataFrame, t: int, rng: np.random.Generator) -> pd.DataFrame:
    """A copy of ``df`` whose bars after position ``t`` all differ: open/high/low/close scaled
    by one random factor per bar (``exp(N(0, 0.05²))``, so OHLC stays consistent), the volume
    by ``exp(N(0, 1))``, any other column (a signal) shifted by ``N(0, 1)``; rows ``<= t`` are
    untouched."""
    out = df.copy()
    n = len(df) - t - 1
    if n <= 0:
        return out
    factor = np.exp(rng.normal(0, 0.05, size=n))
    for col in out.columns:
        j = out.columns.get_loc(col)
        if col in _PRICES:
            out.iloc[t + 1 :, j] *= factor
        elif col == "volume":
            out.iloc[t + 1 :, j] *= np.exp(rng.normal(0, 1, size=n))
        else:
            out.iloc[t + 1 :, j] += rng.normal(0, 1, size=n)
    return out


def probe_frame(n: int, seed: int, columns: Sequence[str] = ()) -> pd.DataFrame:
    """A seeded synthetic OHLCV frame of ``n`` bars (regime switching with jumps,
    :func:`~riskppo.envs.market.synthetic.regime_switching`) with each of ``columns`` it lacks
    added as a random walk (a stand-in for a user's signal column)."""
    from riskppo.envs.market.synthetic import regime_switching

    df = regime_switching(n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    for col in columns:
        if col not in df.columns:
            df[col] = np.cumsum(rng.normal(0, 1, size=n))
    return df


class Lookahead(NamedTuple):
    """Evidence of look-ahead: the value at ``row`` (``<= cut``) changed when the bars after
    ``cut`` changed."""

    row: int
    cut: int


def lookahead(
    compute: Callable[[pd.DataFrame], np.ndarray],
    df: pd.DataFrame,
    cuts: Sequence[int],
    rng: np.random.Generator,
) -> Lookahead | None:
    """The first look-ahead of ``compute`` (``df`` -> values ``[T]`` or ``[T, F]``) over the
    ``cuts``, or ``None``: for each cut ``t``, the bars after ``t`` are changed
    (:func:`perturb_after`) and rows ``0..t`` of the result compared with those of ``df``'s
    (NaN equals NaN). ``row`` is the latest changed row ``<= t``."""
    base = np.asarray(compute(df))
    for t in cuts:
        pert = np.asarray(compute(perturb_after(df, int(t), rng)))
        a, b = base[: t + 1], pert[: t + 1]
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        if same.ndim > 1:
            same = same.all(axis=tuple(range(1, same.ndim)))
        changed = np.flatnonzero(~same)
        if len(changed):
            return Lookahead(int(changed[-1]), int(t))
    return None
