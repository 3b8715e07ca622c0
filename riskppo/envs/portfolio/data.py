"""Many assets on one calendar: the data of :class:`~riskppo.envs.portfolio.env.PortfolioEnv`.

Three sources (exactly one):

* ``dataset="sp500"``: the bundled closes of 20 US stocks (:mod:`riskppo.envs.market.datasets`);
  ``symbols`` picks some (default: all 20).
* ``paths``: one file per asset, each read like ``data.path`` (:func:`~riskppo.envs.load_ohlcv`,
  OHLCV or close-only); the asset's name is the file name without its suffixes
  (``data/AAPL.csv.gz`` -> ``AAPL``).
* ``table``: one CSV or Parquet file holding every asset, either *long* (a ``symbol`` /
  ``ticker`` / ``asset`` column, then a time column and the price columns, one row per asset
  and bar) or *wide* (a time column and one close column per asset; an empty cell means the
  asset has no bar that day).

**Alignment.** Every asset must have a bar on the same dates. With ``align="strict"`` (default)
the first asset whose dates differ from the first asset's raises one line naming both, how many
dates each lacks and the first of them; ``align="intersect"`` keeps the dates that every asset
has (and raises, listing each asset's date range, if fewer than two remain).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from riskppo.envs.market.csvfile import normalize_sep
from riskppo.envs.market.datasets import SP500_SYMBOLS, check_symbol, dataset_path
from riskppo.envs.market.errors import DataError, Remedy
from riskppo.envs.market.ohlcv import (
    NanPolicy,
    _canonical_frame,
    _read_file,
    _TimeSpec,
    load_ohlcv,
    validate_ohlcv,
)

__all__ = ["ALIGNS", "PortfolioData", "align_frames", "load_portfolio"]

ALIGNS: tuple[str, ...] = ("strict", "intersect")
_SYMBOL_COLUMNS = ("symbol", "ticker", "asset")
_SUFFIXES = re.compile(r"(\.(csv|txt|parquet|pq))?(\.(gz|bz2|zip|xz))?$", re.IGNORECASE)
_SHOWN = 3  # dates named in an alignment error


class PortfolioData(NamedTuple):
    """Aligned assets: ``frames[i]`` is the canonical frame of asset ``symbols[i]`` (see
    :func:`~riskppo.envs.load_ohlcv`); all share one DatetimeIndex."""

    frames: tuple[pd.DataFrame, ...]
    symbols: tuple[str, ...]
    label: str  # the data's name in messages

    @property
    def index(self) -> pd.DatetimeIndex:
        return pd.DatetimeIndex(self.frames[0].index)

    def close(self) -> np.ndarray:
        """``[T, N]`` float64 closes."""
        return np.stack([f["close"].to_numpy(np.float64) for f in self.frames], axis=1)

    def head(self, end: int) -> PortfolioData:
        """The first ``end`` bars (nothing after them can reach an env built on the result)."""
        return PortfolioData(tuple(f.iloc[:end] for f in self.frames), self.symbols, self.label)


def load_portfolio(
    *,
    dataset: str | None = None,
    symbols: Sequence[str] | None = None,
    paths: Sequence[str] | None = None,
    table: str | None = None,
    align: str = "strict",
    nan_policy: NanPolicy = "raise",
    ffill_limit: int = 5,
    sort: bool = False,
    timestamp_format: str | None = None,
    dayfirst: bool | None = None,
    adjusted: bool = False,
    sep: str | None = None,
    decimal: str | None = None,
    signals: Sequence[str] = (),
) -> PortfolioData:
    """Load and align the assets of one source (module docstring).

    ``nan_policy``, ``ffill_limit``, ``sort``, ``timestamp_format``, ``dayfirst``, ``sep`` and
    ``decimal`` apply to ``paths`` / ``table`` as in :func:`~riskppo.envs.load_ohlcv`,
    ``adjusted`` to ``paths``.
    ``symbols`` selects assets of ``dataset`` or ``table`` (in that order; default: all).
    ``signals``: each asset's own columns of those names, kept in its frame (``paths`` or a long
    ``table`` only).

    Raises:
        ValueError: not exactly one source, an unknown symbol, fewer than two assets, a bad
            ``align``.
        DataError: a file that does not load, or assets that do not align.
    """
    _check_source(dataset, symbols, paths, table, align)
    sources: dict[str, str] = {}
    if dataset and signals:
        raise ValueError(
            f"signals {list(signals)} need files with those columns; dataset {dataset!r} has "
            "closes only (give paths or a long table)"
        )
    if dataset:
        frames, label = _from_dataset(dataset, symbols)
    elif paths:
        if symbols is not None:
            raise ValueError("symbols applies to dataset or table; with paths, list the files")
        sources = {_stem(p): Path(p).name for p in _unique_stems(paths)}
        frames = {
            _stem(p): load_ohlcv(
                p,
                nan_policy=nan_policy,
                ffill_limit=ffill_limit,
                sort=sort,
                timestamp_format=timestamp_format,
                dayfirst=dayfirst,
                adjusted=adjusted,
                sep=sep,
                decimal=decimal,
                signals=signals,
            )
            for p in paths
        }
        label = ", ".join(sources.values())
    else:
        assert table is not None
        times = _TimeSpec(None, timestamp_format, dayfirst, sort)
        nans = (nan_policy, ffill_limit)
        frames = _from_table(table, symbols, times, nans, (sep, decimal), tuple(signals))
        label = Path(table).name
    if len(frames) < 2:
        raise ValueError(f"portfolio data {label}: needs at least two assets, got {list(frames)}")
    return align_frames(frames, align, label, sources)


def _check_source(
    dataset: str | None,
    symbols: Sequence[str] | None,
    paths: Sequence[str] | None,
    table: str | None,
    align: str,
) -> None:
    """Exactly one source, a known ``align``, lists where lists are meant (one line each)."""
    given = [n for n, v in (("dataset", dataset), ("paths", paths), ("table", table)) if v]
    if len(given) != 1:
        raise ValueError(
            f"portfolio data: give exactly one of dataset, paths or table (got {given or 'none'})"
        )
    if align not in ALIGNS:
        raise ValueError(f"align={align!r} is invalid: must be one of {ALIGNS}")
    for name, value in (("symbols", symbols), ("paths", paths)):
        if isinstance(value, str):
            raise ValueError(f"{name}={value!r} must be a list, e.g. [{value}]")


def align_frames(
    frames: dict[str, pd.DataFrame],
    align: str,
    label: str,
    sources: Mapping[str, str] | None = None,
) -> PortfolioData:
    """``frames`` (asset -> canonical frame) on one calendar (module docstring); ``sources``
    (asset -> file name) names the files in messages."""
    names = list(frames)
    if align == "strict":
        ref = frames[names[0]].index
        for name in names[1:]:
            idx = frames[name].index
            if not idx.equals(ref):
                where = f"{name} ({sources[name]})" if sources and name in sources else name
                raise DataError(where, _mismatch(name, idx, names[0], ref), remedy=_INTERSECT)
        common = ref
    else:
        common = frames[names[0]].index
        for name in names[1:]:
            common = common.intersection(frames[name].index)
        if len(common) < 2:
            ranges = "; ".join(f"{n} {_span(frames[n].index)}" for n in names)
            raise DataError(label, f"the assets share {len(common)} dates (need 2): {ranges}")
    out = tuple(frames[n].loc[common] for n in names)
    return PortfolioData(out, tuple(names), label)


_INTERSECT = Remedy((("align", "intersect"),), "to keep only the dates every asset has")


def _mismatch(name: str, idx: pd.Index, ref_name: str, ref: pd.Index) -> str:
    lacks, extra = ref.difference(idx), idx.difference(ref)
    parts = []
    if len(lacks):
        parts.append(f"it lacks {len(lacks)} of {ref_name}'s dates ({_dates(lacks)})")
    if len(extra):
        parts.append(f"has {len(extra)} dates {ref_name} lacks ({_dates(extra)})")
    return f"dates do not align with {ref_name}: {' and '.join(parts)}"


def _dates(idx: pd.Index) -> str:
    shown = ", ".join(str(t.date()) if t == t.normalize() else str(t) for t in idx[:_SHOWN])
    return shown + (", ..." if len(idx) > _SHOWN else "")


def _span(idx: pd.Index) -> str:
    return f"{idx[0].date()}..{idx[-1].date()}" if len(idx) else "(no dates)"


def _stem(path: str) -> str:
    return _SUFFIXES.sub("", Path(path).name)


def _unique_stems(paths: Sequence[str]) -> list[str]:
    """``paths``, checked to name distinct assets."""
    seen: dict[str, str] = {}
    for p in paths:
        s = _stem(p)
        if s in seen:
            raise ValueError(f"paths {seen[s]!r} and {p!r} name the same asset {s!r}")
        seen[s] = p
    return list(paths)


def _from_dataset(
    dataset: str, symbols: Sequence[str] | None
) -> tuple[dict[str, pd.DataFrame], str]:
    check_symbol(dataset, SP500_SYMBOLS[0])  # a multi-asset dataset (the only one: sp500)
    syms = (
        SP500_SYMBOLS if symbols is None else tuple(str(check_symbol(dataset, s)) for s in symbols)
    )
    if len(set(syms)) != len(syms):
        raise ValueError(f"symbols={list(symbols or ())} names an asset twice")
    path = dataset_path(dataset)
    wide = pd.read_csv(path, usecols=["Date", *syms], dtype={"Date": str})
    frames = {
        s: validate_ohlcv(wide[["Date", s]].rename(columns={s: "close"}), source=f"{path} [{s}]")
        for s in syms
    }
    return frames, dataset


def _from_table(
    table: str,
    symbols: Sequence[str] | None,
    times: _TimeSpec,
    nans: tuple[NanPolicy, int],
    marks: tuple[str | None, str | None] = (None, None),
    signals: tuple[str, ...] = (),
) -> dict[str, pd.DataFrame]:
    """Each asset of a long or wide ``table`` file as a canonical frame; ``marks``: the field
    separator and decimal mark (:func:`~riskppo.envs.load_ohlcv`'s ``sep``, ``decimal``);
    ``signals``: columns of a long table kept per asset (a wide one has none)."""
    raw, decimal = _read_file(Path(table), normalize_sep(marks[0]), marks[1])
    lower = {str(c).lower(): c for c in raw.columns}
    key = next((lower[c] for c in _SYMBOL_COLUMNS if c in lower), None)
    if key is not None:  # long: one row per asset and bar
        groups = {str(s): g.drop(columns=[key]) for s, g in raw.groupby(key, sort=False)}
    elif signals:
        raise DataError(
            table,
            f"signals {list(signals)} need a long table (a symbol/ticker/asset column, the "
            "signal columns beside the prices) or one file per asset; this one is wide (one "
            "close column per asset)",
        )
    else:  # wide: a time column, then one close column per asset
        time_col = raw.columns[0]
        groups = {
            str(c): raw[[time_col, c]].rename(columns={c: "close"}).dropna(subset=["close"])
            for c in raw.columns[1:]
        }
    if symbols is not None:
        missing = [s for s in symbols if s not in groups]
        if missing:
            raise ValueError(f"symbols {missing} are not in {table} (it has {sorted(groups)})")
        groups = {s: groups[s] for s in symbols}
    return {
        s: _canonical_frame(
            g.reset_index(drop=True),
            f"{Path(table).name} [{s}]",
            times=times,
            nan_policy=nans[0],
            ffill_limit=nans[1],
            adjusted=False,
            require_volume=False,
            decimal=decimal,
            signals=signals,
        )
        for s, g in groups.items()
    }
