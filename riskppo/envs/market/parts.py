"""Parts of a dataset: the train / validation / test parts an env trades, the ``data.bars``
rows that fix them, and how a price file is read (the ``data`` section's file options)."""

from __future__ import annotations

import os
from typing import NamedTuple

import pandas as pd

from riskppo.config import ConfigError
from riskppo.envs.market.ohlcv import DataError, NanPolicy

__all__ = ["SPLIT_PARTS", "FileOptions", "bar_range", "file_stamps"]

SPLIT_PARTS = ("train", "val", "test")


class FileOptions(NamedTuple):
    """How ``data.path`` is read: the ``data.*`` keys of the same names, passed to
    :func:`~riskppo.envs.market.ohlcv.load_ohlcv`."""

    nan_policy: NanPolicy = "raise"
    ffill_limit: int = 5
    sort: bool = False
    timestamp_format: str | None = None
    dayfirst: bool | None = None
    adjusted: bool = False
    sep: str | None = None
    decimal: str | None = None
    signals: tuple[str, ...] = ()  # data.signals: the file's own columns to observe


def file_stamps(*paths: str | None) -> tuple[tuple[int, int], ...]:
    """``(modification time in ns, size in bytes)`` of each of ``paths`` (``(-1, -1)`` for a
    missing one or ``None``): part of the key under which a file reader caches what it read, so
    that a file rewritten in the same process (a notebook regenerating its data, a feed that grows)
    is read again instead of served from memory."""
    return tuple(_stamp(path) for path in paths)


def _stamp(path: str | None) -> tuple[int, int]:
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        st = None
    return (-1, -1) if st is None else (st.st_mtime_ns, st.st_size)


def bar_range(
    df: pd.DataFrame, bars: tuple[int, ...], part: str, source: str
) -> tuple[pd.DataFrame, int, int]:
    """``df`` cut at ``bars[3]`` and the ``[lo, hi)`` rows of ``part`` (``bars``: ``data.bars``,
    the rows ``[start, train_end, val_end, end]``)."""
    start, train_end, val_end, end = bars
    if end > len(df):
        raise DataError(source, f"data.bars ends at row {end} but the data has {len(df)} rows")
    lo, hi = {"train": (start, train_end), "val": (train_end, val_end), "test": (val_end, end)}[
        part
    ]
    if hi <= lo:
        raise ConfigError(f"data.bars={list(bars)} has no {part} part (its rows are empty)")
    return df.iloc[:end], lo, hi
