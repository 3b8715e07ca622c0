"""Time-ordered train/validation/test splits of a canonical OHLCV frame (R-TRADE-1).

Split out of :mod:`riskppo.envs.market.ohlcv`, which re-exports everything here; see its
docstring for feature warm-up with :func:`index_range`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import pandas as pd


class Split(NamedTuple):
    """Time-ordered, non-overlapping train/validation/test parts of one frame."""

    train: pd.DataFrame
    val: pd.DataFrame
    test: pd.DataFrame


class Fold(NamedTuple):
    """One walk-forward window: ``train`` immediately followed by ``test``."""

    train: pd.DataFrame
    test: pd.DataFrame


def _require_time_index(df: pd.DataFrame) -> pd.DatetimeIndex:
    idx = df.index
    if not isinstance(idx, pd.DatetimeIndex):
        raise ValueError("expected a frame with a DatetimeIndex (see load_ohlcv)")
    if not (idx.is_monotonic_increasing and idx.is_unique):
        raise ValueError("the frame's DatetimeIndex must be sorted and unique (see load_ohlcv)")
    return idx


def split_by_date(
    df: pd.DataFrame, train_end: str | pd.Timestamp, val_end: str | pd.Timestamp
) -> Split:
    """Split at two dates: ``train = t < train_end``, ``val = train_end <= t < val_end``,
    ``test = t >= val_end`` (ends are exclusive). Each part must be non-empty.

    To trade a later part with feature warm-up from the bars before it, give the environment the
    full frame and the part's :func:`index_range` (see the module docstring).
    """
    idx = _require_time_index(df)
    a, b = pd.Timestamp(train_end), pd.Timestamp(val_end)
    if not a < b:
        raise ValueError(f"train_end ({a}) must be before val_end ({b})")
    i, j = int(idx.searchsorted(a, "left")), int(idx.searchsorted(b, "left"))
    parts = Split(df.iloc[:i], df.iloc[i:j], df.iloc[j:])
    for name, part in zip(Split._fields, parts):
        if len(part) == 0:
            raise ValueError(
                f"the {name} part of split_by_date({a}, {b}) is empty; data spans "
                f"{idx[0]} .. {idx[-1]}"
            )
    return parts


def default_split(df: pd.DataFrame, fractions: Sequence[float] = (0.7, 0.15, 0.15)) -> Split:
    """Split by time into consecutive parts holding ``fractions`` of the rows (default 70/15/15).

    The train part gets ``floor(f0 * n)`` rows, val ``floor((f0 + f1) * n) - floor(f0 * n)``, the
    test part the rest.
    """
    _require_time_index(df)
    fr = [float(f) for f in fractions]
    if len(fr) != 3 or min(fr) <= 0 or not math.isclose(sum(fr), 1.0, abs_tol=1e-9):
        raise ValueError(f"fractions must be three positive numbers summing to 1, got {fractions}")
    n = len(df)
    i = math.floor(fr[0] * n)
    j = math.floor((fr[0] + fr[1]) * n)
    if i < 1 or j - i < 1 or n - j < 1:
        raise ValueError(
            f"{n} rows are too few to split by {tuple(fr)}: at least "
            f"{_min_rows(fr[0], fr[1])} bars are needed, each part non-empty"
        )
    return Split(df.iloc[:i], df.iloc[i:j], df.iloc[j:])


def _min_rows(f0: float, f1: float) -> int:
    """The fewest rows :func:`default_split` can split by ``(f0, f1, 1 - f0 - f1)``."""
    n = 3
    while n < 10**7:
        i, j = math.floor(f0 * n), math.floor((f0 + f1) * n)
        if i >= 1 and j - i >= 1 and n - j >= 1:
            return n
        n += 1
    return n


def walk_forward(
    df: pd.DataFrame,
    n_folds: int,
    train_size: int,
    test_size: int,
    *,
    step: int | None = None,
    anchored: bool = False,
) -> Iterator[Fold]:
    """Yield ``n_folds`` walk-forward ``(train, test)`` windows, oldest first.

    Fold ``k`` tests on ``test_size`` rows right after its ``train_size`` training rows; each fold
    moves ``step`` rows (default ``test_size``, so test windows tile without overlap) later. The
    folds are aligned to the **end** of the data (the last test window ends at the last row);
    earlier rows that do not fit are unused. With ``anchored=True`` every training window starts
    at the first used row and grows (expanding window); ``train_size`` is then the first fold's.
    """
    _require_time_index(df)
    for name, v in (("n_folds", n_folds), ("train_size", train_size), ("test_size", test_size)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    step = test_size if step is None else step
    if int(step) != step or step < 1:
        raise ValueError(f"step must be a positive int, got {step!r}")
    need = (n_folds - 1) * step + train_size + test_size
    if need > len(df):
        raise ValueError(
            f"walk_forward needs {need} rows for n_folds={n_folds}, train_size={train_size}, "
            f"test_size={test_size}, step={step}; the frame has {len(df)}"
        )
    offset = len(df) - need
    for k in range(n_folds):
        train_stop = offset + k * step + train_size
        train_start = offset if anchored else train_stop - train_size
        yield Fold(df.iloc[train_start:train_stop], df.iloc[train_stop : train_stop + test_size])


def index_range(full: pd.DataFrame, part: pd.DataFrame) -> tuple[int, int]:
    """Positions ``[lo, hi)`` of the contiguous ``part`` (a split part) inside ``full``.

    Pass them as ``TradingEnv(full, start=lo, end=hi)`` so the env trades only inside ``part`` but
    warms its features up on the bars before it.
    """
    idx = _require_time_index(full)
    if len(part) == 0:
        raise ValueError("part is empty")
    lo = int(idx.searchsorted(part.index[0], "left"))
    hi = lo + len(part)
    if hi > len(idx) or not idx[lo:hi].equals(pd.DatetimeIndex(part.index)):
        raise ValueError("part is not a contiguous slice of full")
    return lo, hi
