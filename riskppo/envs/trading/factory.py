"""The trading env factory behind the ``riskppo/Trading-v0`` id: one part of a dataset's split."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import pandas as pd

from riskppo.config import ConfigError
from riskppo.envs.market.calendar import file_bars_per_year
from riskppo.envs.market.datasets import DATASETS, load_dataset
from riskppo.envs.market.errors import data_warnings_in
from riskppo.envs.market.ohlcv import (
    DataError,
    NanPolicy,
    default_split,
    index_range,
    load_ohlcv,
    validate_ohlcv,
)
from riskppo.envs.market.parts import SPLIT_PARTS, FileOptions, bar_range, file_stamps
from riskppo.envs.registration import data_label
from riskppo.envs.trading.env import TradingEnv


def _any_frame(
    dataset: str | None,
    path: str | None,
    options: FileOptions,
    symbol: str | None = None,
    frame: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The canonical frame of the user's ``frame`` (a DataFrame: it wins), ``path`` or
    ``dataset`` (with ``options.signals``' columns)."""
    if frame is None:
        return _frame(dataset, path, options, symbol, file_stamps(path))
    if not isinstance(frame, pd.DataFrame):
        raise ConfigError(f"df: a pandas DataFrame of bars, got {type(frame).__name__}")
    try:
        return validate_ohlcv(
            frame,
            nan_policy=options.nan_policy,
            ffill_limit=options.ffill_limit,
            sort=options.sort,
            signals=options.signals,
        )
    except DataError as exc:
        raise exc.in_section("data") from None


@lru_cache(maxsize=8)
def _frame(
    dataset: str | None,
    path: str | None,
    options: FileOptions,
    symbol: str | None,
    stamps: tuple[tuple[int, int], ...],
) -> pd.DataFrame:
    """The bars read from ``path`` or ``dataset``, cached by the arguments and by the file's
    ``stamps`` (:func:`~riskppo.envs.market.parts.file_stamps`: a rewritten file is read again)."""
    del stamps  # only the cache's key
    if path is None and options.signals:
        raise ConfigError(
            f"data.signals={list(options.signals)}: the bundled dataset "
            f"{data_label(dataset, path, symbol)} has no columns of yours; point data.path at "
            "your file (or pass the DataFrame as df= in Python)"
        )
    if path is not None:
        try:
            with data_warnings_in("data"):
                return load_ohlcv(path, **options._asdict())
        except DataError as exc:  # its remedy spelled as the config keys that set it
            raise exc.in_section("data") from None
    if dataset is None:
        names = " | ".join(repr(k) for k in DATASETS)
        raise ValueError(f"trading env: set data.dataset ({names}) or data.path")
    return load_dataset(dataset, symbol)


def trading_range(
    dataset: str | None,
    path: str | None,
    split: Sequence[float],
    part: str,
    *,
    nan_policy: NanPolicy = "raise",
    ffill_limit: int = 5,
    sort: bool = False,
    timestamp_format: str | None = None,
    dayfirst: bool | None = None,
    adjusted: bool = False,
    symbol: str | None = None,
    bars: Sequence[int] | None = None,
    sep: str | None = None,
    decimal: str | None = None,
    signals: Sequence[str] = (),
    frame: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, int, int]:
    """The full frame and the ``[lo, hi)`` bar range of ``part`` of the time split.

    ``nan_policy``, ``ffill_limit``, ``sort``, ``timestamp_format``, ``dayfirst``,
    ``adjusted``, ``sep`` and ``decimal`` (``data.*`` in the config, :class:`FileOptions`) go to
    :func:`~riskppo.envs.market.ohlcv.load_ohlcv` for a ``path``; bundled datasets ignore them. A
    :class:`~riskppo.envs.market.ohlcv.DataError` from the file names its remedy as ``data.*`` keys.
    ``symbol`` picks the stock of a multi-asset dataset (``sp500``).
    ``bars`` (``data.bars``: ``[start, train_end, val_end, end]`` row positions) replaces the
    fractional ``split``; the frame is then cut at ``end``, so nothing after it can reach the
    env (a walk-forward segment sees only its own past). ``signals`` (``data.signals``): the
    data's own columns kept in the frame. ``frame``: a user's DataFrame of bars instead of a file
    or dataset (validated with :func:`~riskppo.envs.validate_ohlcv`)."""
    options = FileOptions(
        nan_policy, ffill_limit, sort, timestamp_format, dayfirst, adjusted, sep, decimal,
        tuple(signals),
    )  # fmt: skip
    return _range(dataset, path, split, part, options, symbol, bars, frame)


def read_bars(data: Mapping[str, Any]) -> pd.DataFrame:
    """All the bars that ``data`` (:func:`trading_range`'s keywords) names, read as the env reads
    them and kept for it (the file reader's cache); any split or ``bars`` is left to the env."""
    df, _, _ = trading_range(**{**data, "bars": None, "split": (1 / 3, 1 / 3, 1 / 3)}, part="train")
    return df


def read_data(data: Mapping[str, Any], env_kwargs: Mapping[str, Any]) -> None:
    """:func:`read_bars`, the ``reader`` of the trading kind
    (:class:`~riskppo.envs.registration.EnvKind`): a bad file fails before anything else loads."""
    del env_kwargs  # the data section names a single asset's bars
    read_bars(data)


def _range(
    dataset: str | None,
    path: str | None,
    split: Sequence[float],
    part: str,
    options: FileOptions,
    symbol: str | None,
    bars: Sequence[int] | None,
    frame: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, int, int]:
    """:func:`trading_range` with the file options as one :class:`FileOptions`."""
    if part not in SPLIT_PARTS:
        raise ValueError(f"trading env: part must be one of {SPLIT_PARTS}, got {part!r}")
    df = _any_frame(dataset, path, options, symbol, frame)
    label = _label(dataset, path, symbol, frame)
    if bars is not None:
        return bar_range(df, tuple(bars), part, label)
    try:
        parts = default_split(df, tuple(split))
    except ValueError as exc:  # e.g. too few rows for the split
        raise DataError(path or label, str(exc)) from None
    lo, hi = index_range(df, getattr(parts, part))
    return df, lo, hi


def _label(
    dataset: str | None, path: str | None, symbol: str | None, frame: pd.DataFrame | None
) -> str:
    return "<DataFrame>" if frame is not None else data_label(dataset, path, symbol)


def make_trading_env(
    *,
    dataset: str | None = "googl",
    path: str | None = None,
    split: Sequence[float] = (0.7, 0.15, 0.15),
    part: str = "train",
    nan_policy: NanPolicy = "raise",
    ffill_limit: int = 5,
    sort: bool = False,
    timestamp_format: str | None = None,
    dayfirst: bool | None = None,
    adjusted: bool = False,
    symbol: str | None = None,
    bars: Sequence[int] | None = None,
    sep: str | None = None,
    decimal: str | None = None,
    signals: Sequence[str] = (),
    frame: pd.DataFrame | None = None,
    **env_kwargs: Any,
) -> TradingEnv:
    """A :class:`TradingEnv` trading only inside ``part``; evaluation parts run start to end.
    ``signals``: the data's own columns, observed after the features; ``frame``: a user's
    DataFrame of bars instead of ``path`` / ``dataset`` (:func:`trading_range`)."""
    env_kwargs.pop("render_mode", None)  # SB3's make_vec_env asks for rgb_array; nothing to render
    options = FileOptions(
        nan_policy, ffill_limit, sort, timestamp_format, dayfirst, adjusted, sep, decimal,
        tuple(signals),
    )  # fmt: skip
    df, lo, hi = _range(dataset, path, split, part, options, symbol, bars, frame)
    label = _label(dataset, path, symbol, frame)
    env_kwargs.setdefault("data_label", label)
    if path is not None or frame is not None:  # the whole data's count, whatever part trades
        whole = _any_frame(dataset, path, options, symbol, frame)  # a file: cached
        env_kwargs["bars_per_year"] = file_bars_per_year(
            whole.index, label, env_kwargs.get("bars_per_year")
        )
    elif dataset is not None:
        env_kwargs.setdefault("bars_per_year", DATASETS[dataset].bars_per_year)
    if part != "train":
        env_kwargs.setdefault("random_start", False)
    try:
        return TradingEnv(df, start=lo, end=hi, signals=options.signals, **env_kwargs)
    except DataError:
        raise
    except ValueError as exc:  # env.kwargs that do not fit (this part of) the data
        raise ConfigError(
            f"trading env on {label} ({part} part, bars {lo}..{hi - 1} of {len(df)}): {exc}"
        ) from None
