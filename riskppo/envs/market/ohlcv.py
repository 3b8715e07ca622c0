"""OHLCV data: loaders, validation and train/val/test splits (R-TRADE-1).

Every loader returns the same canonical frame::

    columns  close and those of open, high, low,  (float64, in the order open, high, low,
             volume the input has                  close, volume)
    index    DatetimeIndex named "timestamp"      (datetime64[ns], tz-naive UTC, strictly
                                                  increasing)

Only ``close`` is required: a file with a date and a close (e.g. a FRED export) is as valid as a
full OHLCV file. A column the input lacks is *absent* from the frame (never a column of NaN),
so ``"high" in df`` says whether the data has highs, and a NaN in a present column is always a
missing value that ``nan_policy`` deals with. The features that need an absent column are left
out by :class:`~riskppo.envs.TradingEnv` (:func:`riskppo.envs.features.split_features`).

Reading a file (:func:`load_ohlcv`)
-----------------------------------
**Columns** (names matched case-insensitively, spaces and hyphens as ``_``; see ``_ALIASES``):
``close`` is required, ``open``/``high``/``low``/``volume`` are optional and absent from the
result when the file lacks them. Without a ``close`` column (and without open/high/low) the
close is the first of ``adj close``, ``price``, ``value``; failing those, a file of a time column
and exactly one other column (a FRED export: ``DATE,SP500``) reads that column as the close.
Any other column is ignored unless ``signals`` names it (:mod:`riskppo.envs.market.signals`).
Empty cells, ``"."`` (FRED), ``"NA"``, ``"N/A"``, ``"-"`` and the other spellings of
:data:`_MISSING_TEXT` are missing values (``nan_policy``). An ``Adj Close`` next to the close is
read only with ``adjusted=True``; otherwise a split the close is not adjusted for is named in a
:class:`~riskppo.envs.market.errors.DataWarning` (:mod:`riskppo.envs.market.adjustment`).

**Separator and decimal mark** (``sep``, ``decimal``; :mod:`riskppo.envs.market.csvfile`):
``,`` and ``.`` unless given, or detected for European files: a header that is one column on
``,`` but several on ``;`` (a tab, ``|``) is read with that separator, and the numbers of a file
not separated by ``,`` are read with decimal commas when they hold them (``101,25``, ``1.234,5``).

**Timestamps.** Without ``timestamp_col`` the time column is the first of ``timestamp,
datetime, Gmt time, Local time, Open time, Date, Time, dt`` (a separate ``Date`` and ``Time``
pair is joined); a Parquet file may carry the timestamps in its DatetimeIndex instead. Without
``timestamp_format`` ISO 8601, day-first dotted (``31.12.2017 22:00:00.000``), slashed and
``YYYYMMDD`` are tried.

Every problem in the input raises :class:`DataError` whose message names the source (file
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

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd

from riskppo.config.yaml_io import short
from riskppo.envs.market import csvfile
from riskppo.envs.market.adjustment import adjust_prices, warn_unadjusted_splits
from riskppo.envs.market.errors import DataError, Remedy
from riskppo.envs.market.limits import check_parquet_size, max_data_bytes
from riskppo.envs.market.nans import NanPolicy, apply_nan_policy
from riskppo.envs.market.signals import read_signals
from riskppo.envs.market.splits import (
    Fold,
    Split,
    default_split,
    index_range,
    split_by_date,
    walk_forward,
)
from riskppo.envs.market.timestamps import (
    _find_time_values,
    _norm_name,
    _parse_timestamps,
)

__all__ = [
    "OHLCV_COLUMNS",
    "DataError",
    "Fold",
    "Split",
    "default_split",
    "index_range",
    "load_ohlcv",
    "split_by_date",
    "validate_ohlcv",
    "walk_forward",
]

OHLCV_COLUMNS: tuple[str, ...] = ("open", "high", "low", "close", "volume")
PRICE_COLUMNS: tuple[str, ...] = ("open", "high", "low", "close")

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
    "price": "price",
    "value": "value",
}
# Read as the close when the input has no close column (nor open/high/low), first present wins.
_CLOSE_FALLBACKS: tuple[str, ...] = ("adj_close", "price", "value")
# Cells that mean "no value" (compared case-insensitively, after stripping spaces): empty; "."
# (FRED exports mark holidays with it); "ND" (the Federal Reserve's Data Download Program: no
# data); "-" (spreadsheets and many broker exports); and the NA spellings pandas' read_csv
# recognises by default ("NA", "N/A", "#N/A", "NaN", "null", "None", ...), so that a Parquet file
# or an in-memory frame of text reads as its CSV would.
_MISSING_TEXT: frozenset[str] = frozenset(
    {"", ".", "-", "nd", "na", "n/a", "#n/a", "#n/a n/a", "#na", "nan", "-nan", "null", "none",
     "<na>", "nat"}
)  # fmt: skip


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
    require_volume: bool = False,
    sep: str | None = None,
    decimal: str | None = None,
    signals: Sequence[str] = (),
) -> pd.DataFrame:
    """Load and validate an OHLCV or close-only file (CSV or Parquet, chosen by suffix); its
    columns and timestamps are read as the module docstring says ("Reading a file").

    Args:
        path: ``.csv`` (optionally compressed: ``.csv.gz`` …), ``.txt`` (CSV) or
            ``.parquet``/``.pq``. Any other suffix raises :class:`DataError`.
        nan_policy: ``"raise"`` (default): any missing value raises, naming the column and the
            run of rows. ``"ffill"``: forward-fill each column; a run of more than ``ffill_limit``
            consecutive missing values, or a missing value in the first row, raises.
        ffill_limit: longest NaN run that ``"ffill"`` may fill.
        timestamp_col: name of the time column (case-insensitive); None: found by name.
        timestamp_format: ``strftime`` format of the time strings, or an epoch unit
            (``"s"``, ``"ms"``, ``"us"``, ``"ns"``) for numeric timestamps; None: guessed.
        dayfirst: resolves ``01/02/2017``-style dates. ``None``: the format under which all
            rows parse and the timestamps increase is used; if both do, :class:`DataError`.
        sort: timestamps must be strictly increasing in the file; an unsorted file raises unless
            ``sort=True``, which stably sorts the rows by time (duplicates still raise).
        adjusted: use the ``Adj Close`` column as ``close`` and scale ``open``/``high``/``low``
            by the same factor (``adj_close / close``) so that OHLC stays consistent. By default
            ``Adj Close`` is ignored (unless it is the only close, see above).
        require_volume: if ``True`` a file without a volume column raises (by default it loads
            without one).
        sep: the CSV field separator: ``","``, ``";"``, ``"\t"`` (or ``"tab"``), ``"|"`` (or
            ``"pipe"``); None: ``,`` or the one the header shows (module docstring).
        decimal: the decimal mark of the numbers, ``"."`` or ``","``; None: ``.``, or ``,`` for a
            file not separated by ``,`` whose numbers have decimal commas.
        signals: the file's own numeric columns to keep, named exactly (e.g. a forecast), each
            a value known at its bar's close; missing values follow ``nan_policy``
            (:mod:`riskppo.envs.market.signals`). Other extra columns are ignored.

    Returns:
        The canonical frame: float64 ``close`` and whichever of ``open, high, low, volume`` the
        file has (in the order ``open, high, low, close, volume``), then the ``signals``
        columns (float64, in their order), with a sorted, unique, tz-naive DatetimeIndex named
        ``timestamp`` (tz-aware times are converted to UTC).

    Raises:
        DataError: for an unknown suffix, an empty file, missing columns, unparsable, duplicate
            or unsorted timestamps, non-numeric or non-finite values, non-positive prices,
            negative volume, ``high < low``, ``high < max(open, close)``,
            ``low > min(open, close)`` or NaNs the policy does not allow.
        FileNotFoundError: if the file does not exist (a directory or other non-regular file
            raises :class:`DataError`).
    """
    p = Path(path)
    raw, mark = _read_file(p, csvfile.normalize_sep(sep), decimal, timestamp_col)
    return _canonical_frame(
        raw,
        str(p),
        times=_TimeSpec(timestamp_col, timestamp_format, dayfirst, sort),
        nan_policy=nan_policy,
        ffill_limit=ffill_limit,
        adjusted=adjusted,
        require_volume=require_volume,
        decimal=mark,
        signals=signals,
    )


def validate_ohlcv(
    df: pd.DataFrame,
    *,
    source: str = "<DataFrame>",
    nan_policy: NanPolicy = "raise",
    ffill_limit: int = 5,
    sort: bool = False,
    require_volume: bool = False,
    signals: Sequence[str] = (),
) -> pd.DataFrame:
    """Validate an in-memory OHLCV or close-only frame and return its canonical copy (see
    :func:`load_ohlcv`: the same column names, fallbacks, missing values and ``signals``).

    The timestamps come from a DatetimeIndex or, failing that, from a time column. Column names
    are matched case-insensitively; extra columns other than ``signals`` are dropped. ``df`` is
    not modified.
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
        times=_TimeSpec(timestamp_col, None, None, sort),
        nan_policy=nan_policy,
        ffill_limit=ffill_limit,
        adjusted=False,
        require_volume=require_volume,
        signals=signals,
    )


def _read_file(
    p: Path, sep: str | None = None, decimal: str | None = None, timestamp_col: str | None = None
) -> tuple[pd.DataFrame, str]:
    """The raw cells of the file at ``p``, read by its suffix (:func:`_file_kind`), and the
    decimal mark of its numbers (``sep``, ``decimal``: :func:`load_ohlcv`'s)."""
    source = str(p)
    csvfile.check_decimal(decimal)
    kind = _file_kind(p)
    if not p.exists():
        raise FileNotFoundError(f"{source}: no such file")
    if p.is_dir():
        raise DataError(source, "is a directory, not a data file")
    if not p.is_file():  # a FIFO or device would block or never end
        raise DataError(source, "not a regular file")
    if kind == "csv":
        return csvfile.read_csv(p, sep, decimal, timestamp_col)
    return _read_parquet(p), decimal or "."


def _file_kind(p: Path) -> Literal["csv", "parquet"]:
    name = p.name.lower()
    if name.endswith(_CSV_SUFFIXES):
        return "csv"
    if name.endswith(_PARQUET_SUFFIXES):
        return "parquet"
    supported = ", ".join(_CSV_SUFFIXES + _PARQUET_SUFFIXES)
    raise DataError(str(p), f"unknown file suffix {''.join(p.suffixes)!r}; supported: {supported}")


def _read_parquet(p: Path) -> pd.DataFrame:
    check_parquet_size(p, max_data_bytes())
    try:
        raw = pd.read_parquet(p)
    except Exception as e:  # pyarrow raises several unrelated exception types
        raise DataError(str(p), f"cannot read as Parquet: {e}") from None
    if isinstance(raw.index, pd.DatetimeIndex):
        name = raw.index.name if raw.index.name is not None else "timestamp"
        raw = raw.reset_index(names=name)
    return raw


class _TimeSpec(NamedTuple):
    """Where the timestamps are and how they parse (see :func:`load_ohlcv`)."""

    col: str | None  # timestamp_col
    format: str | None  # timestamp_format
    dayfirst: bool | None
    sort: bool  # stably sort the rows by time instead of raising on unsorted ones


def _canonical_frame(
    raw: pd.DataFrame,
    source: str,
    *,
    times: _TimeSpec,
    nan_policy: NanPolicy,
    ffill_limit: int,
    adjusted: bool,
    require_volume: bool,
    decimal: str = ".",
    signals: Sequence[str] = (),
) -> pd.DataFrame:
    if nan_policy not in ("raise", "ffill"):
        raise ValueError(f"nan_policy must be 'raise' or 'ffill', got {nan_policy!r}")
    if not isinstance(ffill_limit, int | np.integer) or ffill_limit < 0:
        raise ValueError(f"ffill_limit must be an int >= 0, got {ffill_limit!r}")
    if len(raw) == 0:
        raise DataError(source, "empty file: a header but no data rows")

    columns = _map_columns(raw, source)
    time_values = _find_time_values(raw, columns, times.col, source)
    _fallback_close(raw, columns, time_values)
    required = ["close", *(["volume"] if require_volume else []), *(["adj_close"] * adjusted)]
    _check_required(raw, columns, required, time_values is not None, source)
    assert time_values is not None

    rows = np.arange(1, len(raw) + 1)
    ts = _parse_timestamps(time_values, times.format, times.dayfirst, source)
    number = _Numbers(ts, source, decimal)
    values = {c: number(raw[columns[c]], c) for c in OHLCV_COLUMNS if c in columns}
    if adjusted:
        adjust_prices(values, number(raw[columns["adj_close"]], "adj_close"))
    unused_adj = None if adjusted else _unused_adj_close(raw, columns, number)
    read = [c for c in OHLCV_COLUMNS if c in columns] + ["adj_close"] * adjusted
    used = {"timestamp": str(time_values.name), **{c: columns[c] for c in read}}
    values.update(read_signals(raw, signals, used, number, source))

    # Order: timestamps (sort / duplicates / order) -> NaN policy -> value checks.
    if times.sort:
        order = np.argsort(ts, kind="stable")
        ts, rows = ts[order], rows[order]
        values = {c: v[order] for c, v in values.items()}
        unused_adj = None if unused_adj is None else unused_adj[order]
    _check_time_order(ts, rows, source, times.sort)
    apply_nan_policy(values, ts, rows, source, nan_policy, ffill_limit)
    _check_values(values, ts, rows, source)
    if unused_adj is not None:
        warn_unadjusted_splits(values["close"], unused_adj, ts, rows, source)

    index = pd.DatetimeIndex(ts, name="timestamp")
    return pd.DataFrame(values, index=index)


def _fallback_close(
    raw: pd.DataFrame, columns: dict[str, str], time_values: pd.Series | None
) -> None:
    """In place: without a close column (nor open/high/low), map ``close`` to the first of
    :data:`_CLOSE_FALLBACKS`, or to the one column besides the time column of a two-column
    input (a FRED export)."""
    if any(c in columns for c in ("open", "high", "low", "close")):
        return
    for name in _CLOSE_FALLBACKS:
        if name in columns:
            columns["close"] = columns[name]
            return
    if time_values is None or columns or len(raw.columns) != 2:
        return
    others = [c for c in raw.columns if c != time_values.name]
    if len(others) == 1:
        columns["close"] = str(others[0])


def _check_required(
    raw: pd.DataFrame, columns: dict[str, str], required: list[str], has_time: bool, source: str
) -> None:
    """Raise naming the missing required columns (and a likely wrong delimiter), if any."""
    missing = [c for c in required if c not in columns]
    if not has_time:
        missing.append("timestamp (a Date/Time/timestamp/datetime column)")
    if not missing:
        return
    found = [str(c) for c in raw.columns]
    hint, remedy = "", None
    seps = [sep for sep in (";", "\t", "|") if len(found) == 1 and sep in found[0]]
    if seps:  # a separator that was given as ",": detection would have read the file
        hint = f"; the one column found contains {seps[0]!r}: the file seems to use it as delimiter"
        remedy = Remedy((("sep", csvfile.sep_word(seps[0])),), "to read it")
    raise DataError(
        source, f"missing required columns {missing}; found columns {found}{hint}", remedy=remedy
    )


def _unused_adj_close(
    raw: pd.DataFrame, columns: dict[str, str], number: _Numbers
) -> np.ndarray | None:
    """The Adj Close column next to the Close that is read (None where there is none, or where
    it is the close itself or holds anything but numbers: it is only compared, never read)."""
    name = columns.get("adj_close")
    if name is None or name == columns["close"]:
        return None
    try:
        return number(raw[name], "adj_close")
    except DataError:
        return None


def _map_columns(raw: pd.DataFrame, source: str) -> dict[str, str]:
    """canonical name -> raw column name (OHLCV and the close fallbacks only)."""
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


class _Numbers(NamedTuple):
    """Reads a column as float64 (:func:`_numeric`) for one source."""

    ts: np.ndarray  # the rows' timestamps, for messages
    source: str
    decimal: str  # the decimal mark of text cells: "." or ","

    def __call__(self, s: pd.Series, name: str) -> np.ndarray:
        return _numeric(s, name, self.ts, self.source, self.decimal)


def _numeric(
    s: pd.Series, name: str, ts: np.ndarray, source: str, decimal: str = "."
) -> np.ndarray:
    if pd.api.types.is_bool_dtype(s.dtype):
        raise DataError(source, f"column {name!r} is boolean, expected numbers")
    if pd.api.types.is_numeric_dtype(s.dtype):
        return np.asarray(s.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    text = s.astype("string").str.strip().fillna("")
    missing = text.str.lower().isin(_MISSING_TEXT)
    points = csvfile.as_point_decimals(text, decimal)
    num = pd.to_numeric(points.mask(missing, pd.NA), errors="coerce")
    out = np.asarray(num.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    bad = np.flatnonzero(np.isnan(out) & ~missing.to_numpy(dtype=bool))
    if len(bad):
        i = int(bad[0])
        note, remedy = csvfile.decimal_remedy(str(text.iloc[i]), decimal)
        raise DataError(
            source,
            f"non-numeric value {short(s.iloc[i])} in column {short(name)}{note}",
            row=i + 1,
            when=str(pd.Timestamp(ts[i])),
            remedy=remedy,
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
        f"timestamps are not sorted: this row is earlier than data row {rows[i]} ({_when(ts, i)})",
        row=int(rows[i + 1]),
        when=_when(ts, i + 1),
        remedy=Remedy((("sort", True),), "to sort the rows by time"),
    )


def _check_values(
    values: dict[str, np.ndarray], ts: np.ndarray, rows: np.ndarray, source: str
) -> None:
    """Finite, positive prices, non-negative volume and consistent OHLC, for the columns
    present (``high >= close`` without an open, ...); earliest row wins."""
    problems: list[tuple[np.ndarray, str]] = []
    for name in values:
        problems.append((~np.isfinite(values[name]), f"non-finite {name}"))
    for name in PRICE_COLUMNS:
        if name in values:
            problems.append((values[name] <= 0, f"non-positive price: {name}"))
    if "volume" in values:
        problems.append((values["volume"] < 0, "negative volume"))
    problems.extend(_ohlc_problems(values))
    first: tuple[int, str] | None = None
    for mask, what in problems:
        bad = np.flatnonzero(mask)
        if len(bad) and (first is None or bad[0] < first[0]):
            first = (int(bad[0]), what)
    if first is None:
        return
    i, what = first
    bar = ", ".join(f"{k}={float(values[k][i])!r}" for k in OHLCV_COLUMNS if k in values)
    raise DataError(source, f"{what} ({bar})", row=int(rows[i]), when=_when(ts, i))


def _ohlc_problems(values: dict[str, np.ndarray]) -> list[tuple[np.ndarray, str]]:
    """The high/low consistency checks the present columns allow (``bad rows``, problem)."""
    o, h, lo, c = (values.get(k) for k in PRICE_COLUMNS)
    assert c is not None
    out: list[tuple[np.ndarray, str]] = []
    if h is not None and lo is not None:
        out.append((h < lo, "high < low"))
    if h is not None:
        top, what = (np.maximum(o, c), "max(open, close)") if o is not None else (c, "close")
        out.append((h < top, f"high < {what}"))
    if lo is not None:
        bottom, what = (np.minimum(o, c), "min(open, close)") if o is not None else (c, "close")
        out.append((lo > bottom, f"low > {what}"))
    return out
