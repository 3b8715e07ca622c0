"""A user's own numeric columns, read next to the prices as observations (``signals``).

A *signal column* is any numeric column of the price file (or DataFrame) besides the time and
the price columns: a forecast, a sentiment score, a macro series. Its value at a bar is taken
as **known at that bar's close**: it is part of the observation for the decision taken at that
close, exactly like the price features of the same bar (:mod:`riskppo.envs.features`). A value
published later than the bar it stands on (e.g. a daily figure released the next morning) must
be shifted by the user to the bar at whose close it is known.

Reading rules (each failure is one :class:`~riskppo.envs.market.errors.DataError` naming the
column and the file):

* the column is named exactly (a missing name gets the closest column as a suggestion);
* it must not be the time column or a price column (``open``, ``close``, their aliases, ...);
* cells are read as numbers like the prices (empty cells, ``"."``, ``"NA"``, ... are missing);
  text that is no number, or a boolean column, raises;
* a column with no value at all, or an infinite value, raises;
* missing values then go through the same ``nan_policy`` as the prices
  (:mod:`riskppo.envs.market.nans`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import pandas as pd

from riskppo.config.data import signal_names
from riskppo.envs.market.errors import DataError

__all__ = ["check_signal_names", "read_signals"]


class Numbers(Protocol):
    """Reads column ``s`` (called ``name`` in messages) as float64, missing cells as NaN."""

    def __call__(self, s: pd.Series, name: str) -> np.ndarray: ...


def check_signal_names(signals: Sequence[str]) -> tuple[str, ...]:
    """``signals`` as a tuple of distinct, non-empty names (``ValueError`` naming the bad one)."""
    try:
        return signal_names(signals)
    except ValueError as exc:
        raise ValueError(f"signals: {exc}") from None


def read_signals(
    raw: pd.DataFrame,
    signals: Sequence[str],
    used: Mapping[str, str],
    number: Numbers,
    source: str,
) -> dict[str, np.ndarray]:
    """The float64 values ``[T]`` of each signal column of ``raw``, by name, in order.

    ``used``: the columns of ``raw`` already read as time or prices (canonical name -> column
    name); ``number`` reads a column as numbers (missing cells as NaN); ``source`` names the file
    in messages. NaNs are left for the caller's ``nan_policy``.
    """
    names = check_signal_names(signals)
    taken = {str(c): role for role, c in used.items()}
    out: dict[str, np.ndarray] = {}
    for name in names:
        col = _find(raw, name, taken, source)
        values = number(raw[col], name)
        if np.isnan(values).all():
            raise DataError(source, f"signal column {name!r} has no value: every cell is missing")
        inf = np.flatnonzero(np.isinf(values))
        if len(inf):
            raise DataError(
                source,
                f"signal column {name!r} holds an infinite value ({values[inf[0]]}); give a "
                "finite number or leave the cell empty (a missing value)",
                row=int(inf[0]) + 1,
            )
        out[name] = values
    return out


def _find(raw: pd.DataFrame, name: str, taken: Mapping[str, str], source: str) -> object:
    """The label of the column of ``raw`` named ``name`` (exactly, as text), not one read as
    time or prices (``taken``: column name -> what it is read as)."""
    columns = [str(c) for c in raw.columns]
    if name in taken:
        raise DataError(
            source,
            f"signal column {name!r} is read as the {taken[name]}; signals are the other "
            "numeric columns",
        )
    if name not in columns:
        others = [c for c in columns if c not in taken]
        lower = {c.lower(): c for c in others}
        close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
        hint = f"; did you mean {lower[close[0]]!r}?" if close else ""
        raise DataError(
            source,
            f"signal column {name!r} is not among its columns ({', '.join(columns)}){hint}",
        )
    if columns.count(name) > 1:
        raise DataError(source, f"signal column {name!r}: two columns have that name")
    return raw.columns[columns.index(name)]
