"""The cells of a CSV file, with its field separator and decimal mark given or detected.

European spreadsheets and brokers write ``;``-separated files with decimal commas
(``01.02.2024;101,25;...``); tab- and ``|``-separated files are common too. So, unless
``sep`` / ``decimal`` (``data.sep`` / ``data.decimal``) are given:

* **Separator**: a header line that is one column when split on ``,`` but several on ``;``, a tab
  or ``|`` is read with that separator (the one giving the most columns).
* **Decimal mark** of a file not separated by ``,``: ``,`` when the number cells (every column
  but the time columns) hold commas and no ``.`` except as thousands separators (``1.234,5``);
  ``.`` when they hold no comma. Commas next to other dots (``1,234.5`` and ``1.5``) cannot be
  told apart: :class:`DataError` naming the settings.

What was detected is said once in a :class:`DataWarning`, whose remedy names the settings that
make it explicit. With the decimal mark ``,``, a ``.`` is read only as a thousands separator
(:func:`as_point_decimals`). A header the separator cannot be read from (one column on ``,``, no
other separator in it) with longer rows gets the European settings as a hint.
"""

from __future__ import annotations

import csv
import io
import lzma
import re
import warnings
import zipfile
from pathlib import Path

import pandas as pd

from riskppo.config.data import normalize_sep
from riskppo.config.yaml_io import short
from riskppo.envs.market.errors import DataError, DataWarning, Remedy
from riskppo.envs.market.limits import DataTooLarge, max_data_bytes, open_capped, too_large
from riskppo.envs.market.timestamps import _TIME_COLUMNS, _norm_name

__all__ = [
    "as_point_decimals",
    "check_decimal",
    "decimal_remedy",
    "normalize_sep",
    "read_csv",
    "sep_word",
]

_DETECTED = (";", "\t", "|")  # tried when the header is one column on ","
# A number with "." as thousands separator and an optional decimal comma: 1.234 or 1.234.567,5
_DOT_THOUSANDS = r"[+-]?\d{1,3}(\.\d{3})+(,\d*)?"
_NUMBER_CELL = r"[+-]?[\d.,]*\d[\d.,]*([eE][+-]?\d+)?"  # digits with any marks: a number cell
_EUROPEAN = Remedy(
    (("sep", ";"), ("decimal", ",")),
    "if the file separates fields with ';' and writes decimal commas",
)


def check_decimal(decimal: str | None) -> None:
    """ValueError unless ``decimal`` is ``"."``, ``","`` or None (detected)."""
    if decimal not in (None, ".", ","):
        raise ValueError(f"unknown decimal mark {decimal!r}: '.', ',' or null to detect it")


def sep_word(sep: str) -> str:
    """``sep`` as a setting is typed: ``tab`` and ``pipe`` for the characters."""
    return {"\t": "tab", "|": "pipe"}.get(sep, sep)


def read_csv(
    p: Path, sep: str | None, decimal: str | None, timestamp_col: str | None
) -> tuple[pd.DataFrame, str]:
    """The cells of the CSV file ``p`` as text, and the decimal mark of its numbers (module
    docstring); ``sep`` (a character, :func:`normalize_sep`) and ``decimal`` None: detected.
    ``timestamp_col``: the time column, left out of the decimal detection."""
    source, cap = str(p), max_data_bytes()
    try:
        with open_capped(p, cap) as stream:
            used = _detect_sep(_header(stream)) if sep is None else sep
            # Everything as text: numbers are converted (and bad cells reported) by us, and
            # the time column is never guessed by pandas.
            raw = pd.read_csv(
                stream, sep=used or ",", dtype=str, skipinitialspace=True, keep_default_na=True
            )
    except DataTooLarge:
        raise DataError(source, too_large(cap)) from None
    except (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError) as e:
        raise DataError(source, f"cannot decompress: {short(str(e))}") from None
    except pd.errors.EmptyDataError:
        raise DataError(source, "empty file (no header, no data rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise _parse_error(source, str(e), used or ",") from None
    hint = _EUROPEAN if (used or ",") == "," and len(raw.columns) == 1 else None
    if not isinstance(raw.index, pd.RangeIndex):
        # pandas turns the extra leading fields of over-long rows into an index
        problem = f"more fields than the {len(raw.columns)} header columns"
        raise DataError(source, problem, row=1, remedy=hint)
    mark, detected = _resolve_decimal(raw, used or ",", decimal, timestamp_col, source)
    if (used is not None and sep is None) or detected:
        _notice(source, used if sep is None else None, mark if detected else None)
    return raw, mark


def _header(stream: io.BufferedReader) -> str:
    """The first non-blank line of ``stream``, without consuming it (as far as the buffer
    holds: a longer header is not looked at, and read with ',')."""
    text = stream.peek(1 << 16).decode("utf-8", "replace").lstrip("\ufeff")
    complete = text[: text.rfind("\n") + 1]  # the last line may be cut short
    return next((ln for ln in complete.splitlines() if ln.strip()), "")


def _fields(line: str, sep: str) -> int:
    return len(next(csv.reader([line], delimiter=sep), []))


def _detect_sep(header: str) -> str | None:
    """The separator of a header that is one column on ``,`` but several on another; None: ``,``."""
    if _fields(header, ",") > 1:
        return None
    counts = {sep: _fields(header, sep) for sep in _DETECTED}
    best = max(_DETECTED, key=lambda s: counts[s])
    return best if counts[best] > 1 else None


def _parse_error(source: str, message: str, sep: str) -> DataError:
    """The DataError of a pandas parser error (a row with the wrong number of fields...)."""
    m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", message)
    if m:  # pandas counts file lines from 1, header included
        want, line, saw = (int(g) for g in m.groups())
        problem = f"{saw} fields, expected {want} (file line {line})"
        hint = _EUROPEAN if sep == "," and want == 1 else None
        return DataError(source, problem, row=line - 1, remedy=hint)
    return DataError(source, f"cannot parse as CSV: {short(message, 200)}")


def _number_cells(raw: pd.DataFrame, timestamp_col: str | None) -> dict[str, pd.Series]:
    """Column -> its cells that look like numbers, for every column but the time columns."""
    skip = set(_TIME_COLUMNS) | ({_norm_name(timestamp_col)} if timestamp_col else set())
    out = {}
    for col in raw.columns:
        if _norm_name(col) in skip:
            continue
        text = raw[col].dropna().astype(str).str.strip()
        out[str(col)] = text[text.str.fullmatch(_NUMBER_CELL)]
    return out


def _resolve_decimal(
    raw: pd.DataFrame, sep: str, decimal: str | None, timestamp_col: str | None, source: str
) -> tuple[str, bool]:
    """The decimal mark (module docstring) and whether it was detected (not given, not ``.``)."""
    if decimal is not None:
        return decimal, False
    if sep == ",":
        return ".", False
    cells = _number_cells(raw, timestamp_col)
    commas = {c: t[t.str.contains(",", regex=False)] for c, t in cells.items()}
    comma = next(((c, t.iloc[0]) for c, t in commas.items() if len(t)), None)
    if comma is None:
        return ".", False
    for col, text in cells.items():
        dots = text[text.str.contains(".", regex=False) & ~text.str.fullmatch(_DOT_THOUSANDS)]
        if len(dots):
            settings = (("sep", sep_word(sep)), ("decimal", ","))
            raise DataError(
                source,
                f"cannot tell the decimal mark: numbers with ',' ({comma[1]!r} in column "
                f"{comma[0]!r}) and with '.' ({dots.iloc[0]!r} in column {col!r})",
                remedy=Remedy(settings, "to read decimal commas ('.' only as thousands: 1.234,5)"),
            )
    return ",", True


def _notice(source: str, sep: str | None, decimal: str | None) -> None:
    """One DataWarning saying what was detected, with the settings that say it explicitly."""
    parts, settings = [], []
    if sep is not None:
        parts.append(f"{sep_word(sep)!r} as the field separator (from the header)")
        settings.append(("sep", sep_word(sep)))
    if decimal is not None:
        parts.append(f"{decimal!r} as the decimal mark (from the numbers)")
        settings.append(("decimal", decimal))
    detail = DataError(
        source,
        "read with " + " and ".join(parts),
        remedy=Remedy(tuple(settings), "to set this and not be told again"),
    )
    warnings.warn(DataWarning(detail), stacklevel=4)


def as_point_decimals(text: pd.Series, decimal: str) -> pd.Series:
    """``text`` (stripped cells) with ``.`` as the decimal mark, for :func:`pandas.to_numeric`:
    with ``decimal=","`` a comma becomes ``.``, a ``.`` is dropped where it separates
    thousands (``1.234,5``) and makes any other cell not a number."""
    if decimal != ",":
        return text
    thousands = text.str.fullmatch(_DOT_THOUSANDS).fillna(False).astype(bool)
    dotted = text.str.contains(".", regex=False).fillna(False).astype(bool)
    out = text.where(~thousands, text.str.replace(".", "", regex=False))
    return out.str.replace(",", ".", regex=False).mask(dotted & ~thousands, "not a number")


def decimal_remedy(cell: str, decimal: str) -> tuple[str, Remedy | None]:
    """What to add to the message of a cell that is not a number under ``decimal``: a note on
    the ``.`` of a decimal-comma file, or the setting that would read a decimal comma."""
    if decimal == "," and "." in cell:
        return " (with the decimal mark ',' a '.' only separates thousands: 1.234,5)", None
    if decimal == "." and re.fullmatch(r"[+-]?\d*,\d+", cell):
        return "", Remedy((("decimal", ","),), "to read decimal commas")
    return "", None
