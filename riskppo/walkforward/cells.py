"""A walk-forward cell's files on disk: ``cell.json`` (written last: the cell is finished when
it exists) and ``record.csv``, and how they are read back and checked
(:mod:`riskppo.walkforward.run` writes them; the selection among candidates,
:mod:`riskppo.walkforward.select`, reads its own cells the same way)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from riskppo.persist.files import sha256
from riskppo.safefs import write_text_atomic

__all__ = ["CELL_DONE", "UnreadableCell", "read_cell", "write_json"]

CELL_DONE = "cell.json"


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON atomically (a temporary sibling, then a rename; never through a
    link)."""
    write_text_atomic(path, json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n")


class UnreadableCell(ValueError):
    """A cell's ``cell.json`` is there but its files do not read back (a truncated write, a
    damaged copy); the message names the cell, the file and what is wrong."""


def read_cell(cell_dir: Path) -> tuple[dict[str, Any], pd.DataFrame] | None:
    """A finished cell's summary and record, or ``None`` if it did not finish; a cell whose
    files do not read back raises :class:`UnreadableCell`."""
    done = cell_dir / CELL_DONE
    if not done.is_file():
        return None
    where = f"{cell_dir.parent.name}/{cell_dir.name}"
    try:
        summary = json.loads(done.read_text())
        if not isinstance(summary, dict) or not isinstance(summary.get("metrics"), dict):
            raise ValueError("not a cell summary")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UnreadableCell(f"{where}/{CELL_DONE} does not read back ({exc})") from None
    try:
        frame = pd.read_csv(cell_dir / "record.csv", index_col=0, parse_dates=True)
        _check_record(frame, summary, cell_dir / "record.csv")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError) as exc:
        raise UnreadableCell(f"{where}/record.csv does not read back ({exc})") from None
    return summary, frame


def _check_record(frame: pd.DataFrame, summary: dict[str, Any], path: Path) -> None:
    """Raise ``ValueError`` unless ``frame``, read from ``path``, is the whole record
    ``summary`` describes: the file's SHA-256 (cells written before it was recorded: not
    checked), the number of bars, the first and last bar."""
    digest = summary.get("record_sha256")
    if digest is not None and sha256(path) != digest:
        raise ValueError("its SHA-256 differs from the one cell.json records")
    if len(frame) != summary["bars"]:
        raise ValueError(f"{len(frame)} bars where cell.json says {summary['bars']}")
    span = (str(frame.index[0]), str(frame.index[-1]))
    if span != (summary["start"], summary["end"]):
        raise ValueError(f"bars {span[0]} … {span[1]} where cell.json says {summary['start']} …")
