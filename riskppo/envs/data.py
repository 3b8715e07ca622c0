"""OHLCV data: loaders, validation, bundled datasets and train/val/test splits (R-TRADE-1).

Every loader returns the same canonical frame::

    columns  open, high, low, close, volume      (float64, in this order)
    index    DatetimeIndex named "timestamp"      (datetime64[ns], tz-naive UTC, strictly
                                                  increasing)

and every problem in the input raises :class:`DataError` whose message names the source (file
path), the row and the problem, e.g.::

    DataError: /data/x.csv: data row 7 (timestamp 2017-01-09 00:00:00): high < low (open=9.8,
    high=9.5, low=10.0, close=9.9, volume=1200.0)

Row numbers are **1-based data rows** (the header is not counted; in a CSV without blank lines,
data row ``n`` is file line ``n + 1``). They always refer to the row as it appears in the file,
also after ``sort=True`` re-ordered the rows.

Splits and feature warm-up
--------------------------
:func:`split_by_date`, :func:`default_split` and :func:`walk_forward` cut a frame into
non-overlapping, time-ordered parts. An environment for a later part must still see the bars
*before* it to warm its features up (a 20-bar volatility on the first test bar needs 20 earlier
bars). The clean way, with no leakage, is to give :class:`~riskppo.envs.TradingEnv` the **full**
frame and restrict its *trading range*::

    split = default_split(df)
    lo, hi = index_range(df, split.test)           # positions [lo, hi) of the test bars
    env = TradingEnv(df, start=lo, end=hi, random_start=False)

Features are computed causally on the full frame (each row uses only bars at or before it), so the
test environment's observations may use earlier (train/validation) bars — which were known at that
time — while every reward is computed from prices inside ``[lo, hi)`` only.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd

__all__ = [
    "DATASETS",
    "OHLCV_COLUMNS",
    "DataError",
    "DatasetInfo",
    "Fold",
    "Split",
    "dataset_path",
    "default_split",
    "index_range",
    "load_dataset",
    "load_ohlcv",
    "split_by_date",
    "validate_ohlcv",
    "walk_forward",
]

OHLCV_COLUMNS: tuple[str, ...] = ("open", "high", "low", "close", "volume")
PRICE_COLUMNS: tuple[str, ...] = ("open", "high", "low", "close")

NanPolicy = Literal["raise", "ffill"]

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zip", ".csv.xz", ".txt")
_PARQUET_SUFFIXES = (".parquet", ".pq")

# Normalised column name -> canonical name. Names are normalised by _norm_name first.
_ALIASES: dict[str, str] = {
    "open": "open",
    "o": "open",
    "high": "high",
    "h": "high",
    "low": "low",
    "l": "low",
    "close": "close",
    "c": "close",
    "last": "close",
    "volume": "volume",
    "vol": "volume",
    "v": "volume",
    "adj_close": "adj_close",
    "adjclose": "adj_close",
    "adjusted_close": "adj_close",
}

# Candidate timestamp columns, by priority (normalised names).
_TIME_COLUMNS: tuple[str, ...] = (
    "timestamp",
    "datetime",
    "date_time",
    "time_stamp",
    "gmt_time",
    "local_time",
    "open_time",
    "date",
    "time",
    "dt",
)

# Tried in order when no timestamp_format is given. "ISO8601" covers 2009-05-22, 2017-01-01 22:00,
# 2017-01-01T22:00:00Z, ... Dotted dates are the European (day-first) convention, used e.g. by
# Dukascopy exports such as gym-anytrading's EURUSD file ("01.01.2017 22:00:00.000").
_DAYFIRST_DOT = ("%d.%m.%Y %H:%M:%S.%f", "%d.%m.%Y %H:%M:%S", "%d.%m.%Y %H:%M", "%d.%m.%Y")
_SLASH_MDY = ("%m/%d/%Y %H:%M:%S", "%m/%d/%Y %H:%M", "%m/%d/%Y")
_SLASH_DMY = ("%d/%m/%Y %H:%M:%S", "%d/%m/%Y %H:%M", "%d/%m/%Y")
_OTHER = ("%Y/%m/%d %H:%M:%S", "%Y/%m/%d %H:%M", "%Y/%m/%d", "%Y%m%d")
_EPOCH_UNITS = ("s", "ms", "us", "ns")


class DataError(ValueError):
    """Malformed market data. The message names the source, the row (if any) and the problem.

    Attributes:
        source: the file path (or a label for in-memory frames).
        row: 1-based data row number of the offending row, or ``None`` for file-level problems.
    """

    def __init__(self, source: str, problem: str, *, row: int | None = None, when: str = ""):
        where = ""
        if row is not None:
            where = f"data row {row}" + (f" (timestamp {when})" if when else "") + ": "
        super().__init__(f"{source}: {where}{problem}")
        self.source = source
        self.row = row
        self.problem = problem


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_ohlcv(
    path: str | os.PathLike[str],
    *,
    nan_policy: NanPolicy = "raise",
    ffill_limit: int = 5,
    timestamp_col: str | None = None,
    timestamp_format: str | None = None,
    dayfirst: bool | None = None,
    sort: bool = False,
    adjusted: bool = False,
    require_volume: bool = True,
) -> pd.DataFrame:
    """Load and validate an OHLCV file (CSV or Parquet, chosen by suffix).

    Args:
        path: ``.csv`` (optionally compressed: ``.csv.gz`` …), ``.txt`` (CSV) or
            ``.parquet``/``.pq``. Any other suffix raises :class:`DataError`.
        nan_policy: ``"raise"`` (default): any missing value raises, naming the column and the
            run of rows. ``"ffill"``: forward-fill each column; a run of more than ``ffill_limit``
            consecutive missing values, or a missing value in the first row, raises.
        ffill_limit: longest NaN run that ``"ffill"`` may fill.
        timestamp_col: name of the time column (case-insensitive). By default the first of
            ``timestamp, datetime, Gmt time, Local time, Open time, Date, Time, dt`` is used
            (a separate ``Date`` and ``Time`` pair is joined). A Parquet file may carry the
            timestamps in its DatetimeIndex instead.
        timestamp_format: ``strftime`` format of the time strings, or an epoch unit
            (``"s"``, ``"ms"``, ``"us"``, ``"ns"``) for numeric timestamps. By default ISO 8601,
            day-first dotted (``31.12.2017 22:00:00.000``), slashed and ``YYYYMMDD`` are tried.
        dayfirst: resolves ``01/02/2017``-style dates. ``None``: the format under which all
            rows parse and the timestamps increase is used; if both do, :class:`DataError`.
        sort: timestamps must be strictly increasing in the file; an unsorted file raises unless
            ``sort=True``, which stably sorts the rows by time (duplicates still raise).
        adjusted: use the ``Adj Close`` column as ``close`` and scale ``open``/``high``/``low``
            by the same factor (``adj_close / close``) so that OHLC stays consistent. By default
            ``Adj Close`` is ignored.
        require_volume: if ``False`` a file without a volume column loads with volume 0.

    Returns:
        The canonical frame: float64 ``open, high, low, close, volume`` with a sorted, unique,
        tz-naive DatetimeIndex named ``timestamp`` (tz-aware times are converted to UTC).

    Raises:
        DataError: for an unknown suffix, an empty file, missing columns, unparsable, duplicate
            or unsorted timestamps, non-numeric or non-finite values, non-positive prices,
            negative volume, ``high < low``, ``high < max(open, close)``,
            ``low > min(open, close)`` or NaNs the policy does not allow.
        FileNotFoundError: if the file does not exist.
    """
    p = Path(path)
    source = str(p)
    kind = _file_kind(p)
    if not p.exists():
        raise FileNotFoundError(f"{source}: no such file")
    raw = _read_csv(p) if kind == "csv" else _read_parquet(p)
    return _canonical_frame(
        raw,
        source,
        nan_policy=nan_policy,
        ffill_limit=ffill_limit,
        timestamp_col=timestamp_col,
        timestamp_format=timestamp_format,
        dayfirst=dayfirst,
        sort=sort,
        adjusted=adjusted,
        require_volume=require_volume,
    )


def validate_ohlcv(
    df: pd.DataFrame,
    *,
    source: str = "<DataFrame>",
    nan_policy: NanPolicy = "raise",
    ffill_limit: int = 5,
    sort: bool = False,
    require_volume: bool = True,
) -> pd.DataFrame:
    """Validate an in-memory OHLCV frame and return its canonical copy (see :func:`load_ohlcv`).

    The timestamps come from a DatetimeIndex or, failing that, from a time column. Column names
    are matched case-insensitively; extra columns are dropped. ``df`` is not modified.
    """
    if isinstance(df.index, pd.DatetimeIndex):
        name = df.index.name if df.index.name is not None else "timestamp"
        if name in df.columns:
            name = "__timestamp__"
        raw = df.reset_index(names=name)
        timestamp_col: str | None = name
    else:
        raw = df.reset_index(drop=True)
        timestamp_col = None
    return _canonical_frame(
        raw,
        source,
        nan_policy=nan_policy,
        ffill_limit=ffill_limit,
        timestamp_col=timestamp_col,
        timestamp_format=None,
        dayfirst=None,
        sort=sort,
        adjusted=False,
        require_volume=require_volume,
    )


def _file_kind(p: Path) -> Literal["csv", "parquet"]:
    name = p.name.lower()
    if name.endswith(_CSV_SUFFIXES):
        return "csv"
    if name.endswith(_PARQUET_SUFFIXES):
        return "parquet"
    supported = ", ".join(_CSV_SUFFIXES + _PARQUET_SUFFIXES)
    raise DataError(str(p), f"unknown file suffix {''.join(p.suffixes)!r}; supported: {supported}")


def _read_csv(p: Path) -> pd.DataFrame:
    try:
        # Everything as text: numbers are converted (and bad cells reported) by us, and the
        # time column is never guessed by pandas.
        raw = pd.read_csv(p, dtype=str, skipinitialspace=True, keep_default_na=True)
    except pd.errors.EmptyDataError:
        raise DataError(str(p), "empty file (no header, no data rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
        if m:  # pandas counts file lines from 1, header included
            want, line, saw = (int(g) for g in m.groups())
            problem = f"{saw} fields, expected {want} (file line {line})"
            raise DataError(str(p), problem, row=line - 1) from None
        raise DataError(str(p), f"cannot parse as CSV: {e}") from None
    if not isinstance(raw.index, pd.RangeIndex):
        # pandas turns the extra leading fields of over-long rows into an index
        raise DataError(str(p), f"more fields than the {len(raw.columns)} header columns", row=1)
    return raw


def _read_parquet(p: Path) -> pd.DataFrame:
    try:
        raw = pd.read_parquet(p)
    except Exception as e:  # pyarrow raises several unrelated exception types
        raise DataError(str(p), f"cannot read as Parquet: {e}") from None
    if isinstance(raw.index, pd.DatetimeIndex):
        name = raw.index.name if raw.index.name is not None else "timestamp"
        raw = raw.reset_index(names=name)
    return raw


def _norm_name(name: object) -> str:
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


def _canonical_frame(
    raw: pd.DataFrame,
    source: str,
    *,
    nan_policy: NanPolicy,
    ffill_limit: int,
    timestamp_col: str | None,
    timestamp_format: str | None,
    dayfirst: bool | None,
    sort: bool,
    adjusted: bool,
    require_volume: bool,
) -> pd.DataFrame:
    if nan_policy not in ("raise", "ffill"):
        raise ValueError(f"nan_policy must be 'raise' or 'ffill', got {nan_policy!r}")
    if not isinstance(ffill_limit, int | np.integer) or ffill_limit < 0:
        raise ValueError(f"ffill_limit must be an int >= 0, got {ffill_limit!r}")
    if len(raw) == 0:
        raise DataError(source, "empty file: a header but no data rows")

    columns = _map_columns(raw, source)
    time_values = _find_time_values(raw, columns, timestamp_col, source)
    required = [*PRICE_COLUMNS, "volume"] if require_volume else list(PRICE_COLUMNS)
    if adjusted:
        required.append("adj_close")
    missing = [c for c in required if c not in columns]
    if time_values is None:
        missing.append("timestamp (a Date/Time/timestamp/datetime column)")
    if missing:
        found = [str(c) for c in raw.columns]
        raise DataError(source, f"missing required columns {missing}; found columns {found}")
    assert time_values is not None

    n = len(raw)
    rows = np.arange(1, n + 1)
    ts = _parse_timestamps(time_values, timestamp_format, dayfirst, source)
    values = {c: _numeric(raw[columns[c]], c, ts, source) for c in required if c != "adj_close"}
    if not require_volume and "volume" not in values:
        values["volume"] = (
            _numeric(raw[columns["volume"]], "volume", ts, source)
            if "volume" in columns
            else np.zeros(n)
        )
    if adjusted:
        adj = _numeric(raw[columns["adj_close"]], "adj_close", ts, source)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = adj / values["close"]
        for c in ("open", "high", "low"):
            values[c] = values[c] * factor
        values["close"] = adj

    # Order: timestamps (sort / duplicates / order) -> NaN policy -> value checks.
    if sort:
        order = np.argsort(ts, kind="stable")
        ts, rows = ts[order], rows[order]
        values = {c: v[order] for c, v in values.items()}
    _check_time_order(ts, rows, source, sort)
    _apply_nan_policy(values, ts, rows, source, nan_policy, ffill_limit)
    _check_values(values, ts, rows, source)

    index = pd.DatetimeIndex(ts, name="timestamp")
    return pd.DataFrame({c: values[c] for c in OHLCV_COLUMNS}, index=index)


def _map_columns(raw: pd.DataFrame, source: str) -> dict[str, str]:
    """canonical name -> raw column name (OHLCV and adj_close only)."""
    out: dict[str, str] = {}
    for col in raw.columns:
        canon = _ALIASES.get(_norm_name(col))
        if canon is None:
            continue
        if canon in out:
            raise DataError(
                source, f"columns {out[canon]!r} and {col!r} both name the {canon!r} column"
            )
        out[canon] = str(col)
    return out


def _find_time_values(
    raw: pd.DataFrame, columns: dict[str, str], timestamp_col: str | None, source: str
) -> pd.Series | None:
    by_norm: dict[str, str] = {}
    for col in raw.columns:
        by_norm.setdefault(_norm_name(col), col)
    if timestamp_col is not None:
        key = _norm_name(timestamp_col)
        if key not in by_norm:
            found = [str(c) for c in raw.columns]
            raise DataError(
                source, f"missing timestamp column {timestamp_col!r}; found columns {found}"
            )
        return raw[by_norm[key]]
    for cand in _TIME_COLUMNS:
        if cand in by_norm:
            if cand == "date" and "time" in by_norm and not _is_datetime(raw[by_norm["date"]]):
                # separate "Date" and "Time" columns: join them.
                joined = raw[by_norm["date"]].astype(str) + " " + raw[by_norm["time"]].astype(str)
                return joined.where(raw[by_norm["date"]].notna() & raw[by_norm["time"]].notna())
            return raw[by_norm[cand]]
    return None


def _is_datetime(s: pd.Series) -> bool:
    return bool(pd.api.types.is_datetime64_any_dtype(s.dtype))


def _to_naive_utc(parsed: pd.Series) -> pd.Series:
    if isinstance(parsed.dtype, pd.DatetimeTZDtype):
        return parsed.dt.tz_convert("UTC").dt.tz_localize(None)
    return parsed


def _try_format(s: pd.Series, fmt: str) -> pd.Series:
    try:
        if fmt in _EPOCH_UNITS:
            return pd.to_datetime(pd.to_numeric(s, errors="coerce"), unit=fmt, errors="coerce")
        # utc=True: tz-aware strings (also mixed offsets) become UTC; naive ones are unchanged
        # once the tz is dropped again.
        parsed = pd.to_datetime(s, format=fmt, errors="coerce", utc=True)
    except (ValueError, TypeError, OverflowError):
        return pd.Series(pd.NaT, index=s.index, dtype="datetime64[ns]")
    return _to_naive_utc(parsed)


def _parse_timestamps(
    s: pd.Series, timestamp_format: str | None, dayfirst: bool | None, source: str
) -> np.ndarray:
    """Parse the time column into a datetime64 array (tz-naive), or raise naming the row."""
    if _is_datetime(s):
        parsed = _to_naive_utc(s)
        return _require_parsed(s, parsed, source)
    if timestamp_format is None and pd.api.types.is_integer_dtype(s.dtype):
        timestamp_format = _epoch_unit(s)
    text = s if timestamp_format in _EPOCH_UNITS else s.astype("string").str.strip()
    if timestamp_format is not None:
        return _require_parsed(s, _try_format(text, timestamp_format), source)

    slash: tuple[str, ...]
    if dayfirst is None:
        slash = (*_SLASH_MDY, *_SLASH_DMY)
    else:
        slash = _SLASH_DMY if dayfirst else _SLASH_MDY
    candidates = ("ISO8601", *_DAYFIRST_DOT, *slash, *_OTHER)
    complete: list[tuple[str, pd.Series]] = []
    best: pd.Series | None = None
    for fmt in candidates:
        parsed = _try_format(text, fmt)
        ok = int(parsed.notna().sum())
        if ok == len(s):
            complete.append((fmt, parsed))
            if fmt not in slash:
                break  # unambiguous format parsed every row
        if best is None or ok > int(best.notna().sum()):
            best = parsed
    if not complete:
        assert best is not None
        return _require_parsed(s, best, source)
    if len(complete) > 1:
        increasing = [(f, p) for f, p in complete if p.is_monotonic_increasing and p.is_unique]
        if len(increasing) == 1:
            complete = increasing
        else:
            fmts = [f for f, _ in complete]
            raise DataError(
                source,
                f"ambiguous timestamps: every row parses under {fmts}; "
                "pass dayfirst=True/False or timestamp_format=...",
            )
    return np.asarray(complete[0][1].to_numpy(dtype="datetime64[ns]"))


def _epoch_unit(s: pd.Series) -> str:
    m = float(np.nanmax(np.abs(s.to_numpy(dtype=np.float64)))) if len(s) else 0.0
    for unit, limit in (("s", 1e11), ("ms", 1e14), ("us", 1e17)):
        if m < limit:
            return unit
    return "ns"


def _require_parsed(original: pd.Series, parsed: pd.Series, source: str) -> np.ndarray:
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if len(bad):
        i = int(bad[0])
        value = original.iloc[i]
        what = "missing timestamp" if pd.isna(value) else f"unparsable timestamp {value!r}"
        more = f" ({len(bad)} bad rows in all)" if len(bad) > 1 else ""
        raise DataError(source, what + more, row=i + 1)
    return np.asarray(parsed.to_numpy(dtype="datetime64[ns]"))


def _numeric(s: pd.Series, name: str, ts: np.ndarray, source: str) -> np.ndarray:
    if pd.api.types.is_bool_dtype(s.dtype):
        raise DataError(source, f"column {name!r} is boolean, expected numbers")
    if pd.api.types.is_numeric_dtype(s.dtype):
        return np.asarray(s.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    text = s.astype("string").str.strip().fillna("")
    num = pd.to_numeric(text.replace("", pd.NA), errors="coerce")
    out = np.asarray(num.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    bad = np.flatnonzero(np.isnan(out) & (text != "").to_numpy(dtype=bool))
    if len(bad):
        i = int(bad[0])
        raise DataError(
            source,
            f"non-numeric value {s.iloc[i]!r} in column {name!r}",
            row=i + 1,
            when=str(pd.Timestamp(ts[i])),
        )
    return out


def _when(ts: np.ndarray, i: int) -> str:
    return str(pd.Timestamp(ts[i]))


def _check_time_order(ts: np.ndarray, rows: np.ndarray, source: str, sorted_: bool) -> None:
    i8 = ts.view(np.int64)
    bad = np.flatnonzero(np.diff(i8) <= 0)
    if not len(bad):
        return
    i = int(bad[0])
    if i8[i + 1] == i8[i]:
        raise DataError(
            source,
            f"duplicate timestamp: data rows {rows[i]} and {rows[i + 1]} both have "
            f"timestamp {_when(ts, i)}",
            row=int(rows[i + 1]),
            when=_when(ts, i + 1),
        )
    assert not sorted_
    raise DataError(
        source,
        f"timestamps are not sorted: this row is earlier than data row {rows[i]} "
        f"({_when(ts, i)}); pass sort=True to sort rows by time",
        row=int(rows[i + 1]),
        when=_when(ts, i + 1),
    )


def _nan_runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start positions and lengths of the runs of True in a 1-d bool mask."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    d = np.diff(padded)
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    return starts, ends - starts


def _apply_nan_policy(
    values: dict[str, np.ndarray],
    ts: np.ndarray,
    rows: np.ndarray,
    source: str,
    policy: NanPolicy,
    limit: int,
) -> None:
    """Raise on NaNs (policy "raise") or forward-fill runs of at most ``limit`` in place."""
    worst: tuple[int, str, int] | None = None  # (start position, column, run length)
    for name, v in values.items():
        mask = np.isnan(v)
        if not mask.any():
            continue
        starts, lengths = _nan_runs(mask)
        if policy == "ffill":
            for s0, ln in zip(starts, lengths):
                if s0 == 0 or ln > limit:
                    if worst is None or s0 < worst[0]:
                        worst = (int(s0), name, int(ln))
                    break
        elif worst is None or starts[0] < worst[0]:
            worst = (int(starts[0]), name, int(lengths[0]))
    if worst is not None:
        s0, name, ln = worst
        if ln > 1:
            run = f"a run of {ln} missing values (data rows {rows[s0]}-{rows[s0 + ln - 1]})"
        else:
            run = "a run of 1 missing value"
        if policy == "raise":
            hint = f"nan_policy='raise' (use nan_policy='ffill', ffill_limit>={ln} to fill)"
        elif s0 == 0:
            hint = "cannot forward-fill: the first row has no earlier value"
        else:
            hint = f"longer than ffill_limit={limit}"
        raise DataError(
            source, f"NaN in column {name!r}: {run}; {hint}", row=int(rows[s0]), when=_when(ts, s0)
        )
    if policy == "ffill":
        for name, v in values.items():
            mask = np.isnan(v)
            if mask.any():
                idx = np.where(mask, 0, np.arange(len(v)))
                np.maximum.accumulate(idx, out=idx)
                values[name] = v[idx]


def _check_values(
    values: dict[str, np.ndarray], ts: np.ndarray, rows: np.ndarray, source: str
) -> None:
    """Finite, positive prices, non-negative volume and consistent OHLC; earliest row wins."""
    o, h, lo, c, vol = (values[k] for k in OHLCV_COLUMNS)
    problems: list[tuple[np.ndarray, str]] = []
    for name in OHLCV_COLUMNS:
        problems.append((~np.isfinite(values[name]), f"non-finite {name}"))
    for name in PRICE_COLUMNS:
        problems.append((values[name] <= 0, f"non-positive price: {name}"))
    problems.append((vol < 0, "negative volume"))
    problems.append((h < lo, "high < low"))
    problems.append((h < np.maximum(o, c), "high < max(open, close)"))
    problems.append((lo > np.minimum(o, c), "low > min(open, close)"))
    first: tuple[int, str] | None = None
    for mask, what in problems:
        bad = np.flatnonzero(mask)
        if len(bad) and (first is None or bad[0] < first[0]):
            first = (int(bad[0]), what)
    if first is None:
        return
    i, what = first
    bar = ", ".join(f"{k}={float(values[k][i])!r}" for k in OHLCV_COLUMNS)
    raise DataError(source, f"{what} ({bar})", row=int(rows[i]), when=_when(ts, i))


# --------------------------------------------------------------------------------------------
# Bundled datasets (from the installed gym-anytrading package; never copied into this repo)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset shipped inside the MIT-licensed ``gym-anytrading`` package."""

    filename: str
    timestamp_format: str
    bars_per_year: int
    description: str


DATASETS: dict[str, DatasetInfo] = {
    "googl": DatasetInfo(
        "STOCKS_GOOGL.csv", "%Y-%m-%d", 252, "GOOGL daily bars, 2009-05-22 .. 2018-08-29"
    ),
    "eurusd": DatasetInfo(
        "FOREX_EURUSD_1H_ASK.csv",
        "%d.%m.%Y %H:%M:%S.%f",  # day-first: "01.01.2017 22:00:00.000"
        24 * 5 * 52,  # hourly, 24 h x 5 days a week
        "EURUSD hourly ask bars, 2017-01-01 22:00 .. 2017-12-29 21:00",
    ),
}


def _info(name: str) -> DatasetInfo:
    key = name.lower() if isinstance(name, str) else name
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {sorted(DATASETS)}")
    return DATASETS[key]


def dataset_path(name: str) -> Path:
    """Path of a bundled dataset's CSV inside the installed ``gym-anytrading`` package.

    Uses ``importlib.util.find_spec`` on the top-level package, which locates it **without
    importing it**: importing ``gym_anytrading`` registers environments in Gymnasium's global
    registry and parses both CSVs (with a month-first date parser that misreads the EURUSD file).
    """
    info = _info(name)
    spec = importlib.util.find_spec("gym_anytrading")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the bundled datasets come from the 'gym-anytrading' package: "
            "pip install gym-anytrading"
        )
    for base in spec.submodule_search_locations:
        p = Path(base) / "datasets" / "data" / info.filename
        if p.is_file():
            return p
    raise FileNotFoundError(f"{info.filename} not found in the installed gym-anytrading package")


def load_dataset(name: str) -> pd.DataFrame:
    """Load a bundled dataset, ``"googl"`` (daily) or ``"eurusd"`` (hourly), as a canonical frame.

    The bars per year of each dataset are in ``DATASETS[name].bars_per_year``.
    """
    info = _info(name)
    return load_ohlcv(dataset_path(name), timestamp_format=info.timestamp_format)


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------


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
        raise ValueError(f"{n} rows are too few to split by {tuple(fr)}")
    return Split(df.iloc[:i], df.iloc[i:j], df.iloc[j:])


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
