"""Timestamp columns of OHLCV files: finding, parsing and bounds-checking them.

Split out of :mod:`riskppo.envs.market.ohlcv`, which re-exports :class:`DataError`. Every
problem raises :class:`DataError` naming the source and the 1-based data row.

Bounds: pandas stores timestamps as 64-bit nanoseconds, so only 1677-09-21 .. 2262-04-11 fit.
A row outside that range (e.g. the typo ``2920-01-30``) raises naming the row instead of
wrapping around silently.

Epoch times: a time column whose every value is an integer of at least 9 digits (text or
numbers) is read as Unix epoch time, the unit chosen by magnitude (< 1e11: seconds, < 1e14:
milliseconds, < 1e17: microseconds, else nanoseconds); ``timestamp_format="s"`` etc.
fixes the unit. Other numeric values that do not parse get a hint naming ``timestamp_format``.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from riskppo.config.yaml_io import short
from riskppo.envs.market.errors import DataError, Remedy

__all__ = ["DataError"]

_TIME_COLUMNS: tuple[str, ...] = (
    "timestamp",
    "datetime",
    "date_time",
    "time_stamp",
    "gmt_time",
    "local_time",
    "open_time",
    "observation_date",  # FRED's CSV downloads
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


def _norm_name(name: object) -> str:
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


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
    elif timestamp_format is None and _all_epoch_like(s):
        timestamp_format = _epoch_unit(pd.to_numeric(s.astype("string").str.strip()))
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
                f"ambiguous timestamps: every row parses under {fmts}",
                remedy=Remedy(
                    (("dayfirst", True), ("dayfirst", False)),
                    "for day/month/year or month/day/year dates (or give timestamp_format)",
                    alternatives=True,
                ),
            )
    return _require_parsed(s, complete[0][1], source)


def _epoch_unit(s: pd.Series) -> str:
    m = float(np.nanmax(np.abs(s.to_numpy(dtype=np.float64)))) if len(s) else 0.0
    for unit, limit in (("s", 1e11), ("ms", 1e14), ("us", 1e17)):
        if m < limit:
            return unit
    return "ns"


def _all_epoch_like(s: pd.Series) -> bool:
    """Every present value an integer of >= 9 digits (too long for YYYYMMDD): epoch time."""
    text = s.dropna().astype("string").str.strip()
    return len(text) > 0 and bool(text.str.fullmatch(_EPOCH_RE).all())


_EPOCH_RE = r"-?\d{9,}"
_NUMBER_RE = re.compile(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?")
# Largest |value| of datetime64 in each unit that still fits datetime64[ns] (int64 nanoseconds).
_NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_I8_MAX = 2**63 - 1


def _require_parsed(original: pd.Series, parsed: pd.Series, source: str) -> np.ndarray:
    """``parsed`` as datetime64[ns]; a missing, unparsable or out-of-range row raises."""
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if len(bad):
        i = int(bad[0])
        value = original.iloc[i]
        what = "missing timestamp" if pd.isna(value) else f"unparsable timestamp {short(value)}"
        what += f" ({len(bad)} bad rows in all)" if len(bad) > 1 else ""
        remedy = None
        if not pd.isna(value) and _NUMBER_RE.fullmatch(str(value).strip()):
            what += "; it is a number"
            remedy = Remedy(
                (("timestamp_format", "s"), ("timestamp_format", "ms")),
                "for epoch times in seconds or milliseconds",
                alternatives=True,
            )
        raise DataError(source, what, row=i + 1, remedy=remedy)
    arr = np.asarray(parsed.to_numpy())
    unit = np.datetime_data(arr.dtype)[0]
    if unit != "ns":
        # pandas >= 2 parses into s/ms/us; casting to ns would wrap years past 2262 silently
        limit = _I8_MAX // _NS_PER.get(unit, 1)
        i8 = arr.view(np.int64)
        out = np.flatnonzero((i8 > limit) | (i8 < -limit))
        if len(out):
            i = int(out[0])
            more = f" ({len(out)} such rows in all)" if len(out) > 1 else ""
            raise DataError(
                source,
                f"timestamp {short(original.iloc[i])} is outside the range that fits "
                f"(1677-09-22 .. 2262-04-11){more}; a typo in the year?",
                row=i + 1,
            )
    return np.asarray(arr.astype("datetime64[ns]"))
