"""How much a data file may expand to when read: a cap on the decompressed bytes.

A compressed CSV of under a megabyte can expand to hundreds of megabytes, and pandas holds
several bytes of memory per byte of text, so a file is read through a counting stream
(:func:`open_capped`) that stops at ``RISKPPO_MAX_DATA_MB`` mebibytes (default
:data:`DEFAULT_MAX_DATA_MB`); a Parquet file's uncompressed size is read from its footer
(:func:`check_parquet_size`). Raise the cap with the environment variable, e.g.
``RISKPPO_MAX_DATA_MB=4096``.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from riskppo.envs.market.timestamps import DataError

__all__ = [
    "DEFAULT_MAX_DATA_MB",
    "ENV_VAR",
    "DataTooLarge",
    "check_parquet_size",
    "max_data_bytes",
    "open_capped",
    "too_large",
]

ENV_VAR = "RISKPPO_MAX_DATA_MB"
DEFAULT_MAX_DATA_MB = 256  # ≈ 4M rows of OHLCV text; reading it takes ≈ 10x in memory


class DataTooLarge(Exception):
    """A data file expands past the cap (turned into a ``DataError`` by the reader)."""


def max_data_bytes() -> int:
    """The cap in bytes: ``$RISKPPO_MAX_DATA_MB`` MiB, or :data:`DEFAULT_MAX_DATA_MB`."""
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_MAX_DATA_MB << 20
    if not raw.isdigit() or int(raw) < 1 or len(raw) > 9:
        raise DataError(ENV_VAR, f"must be a whole number of MiB >= 1, got {raw[:40]!r}")
    return int(raw) << 20


def too_large(cap: int) -> str:
    """The message for a file over ``cap`` bytes: the cap and how to raise it."""
    return (
        f"the data expands to more than {cap >> 20} MiB, the limit on a data file; raise it "
        f"with the environment variable {ENV_VAR} (e.g. {ENV_VAR}={2 * (cap >> 20)})"
    )


class _Capped(io.RawIOBase):
    """A read-only stream that raises :class:`DataTooLarge` past ``cap`` bytes."""

    def __init__(self, inner: io.BufferedIOBase, cap: int) -> None:
        self._inner, self._left = inner, cap

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(min(len(buffer), self._left + 1))
        if len(data) > self._left:
            raise DataTooLarge
        self._left -= len(data)
        buffer[: len(data)] = data
        return len(data)


def _decompressed(p: Path) -> io.BufferedIOBase:
    """The file's bytes, decompressed by its suffix (``.gz``, ``.bz2``, ``.xz``, ``.zip``)."""
    name = p.name.lower()
    if name.endswith(".gz"):
        return gzip.open(p, "rb")
    if name.endswith(".bz2"):
        return bz2.open(p, "rb")
    if name.endswith(".xz"):
        return lzma.open(p, "rb")
    if name.endswith(".zip"):
        archive = zipfile.ZipFile(p)
        members = [i for i in archive.infolist() if not i.is_dir()]
        if len(members) != 1:
            archive.close()
            raise DataError(str(p), f"a .zip must hold exactly one file, found {len(members)}")
        return cast(io.BufferedIOBase, archive.open(members[0]))
    return open(p, "rb")


@contextlib.contextmanager
def open_capped(p: Path, cap: int) -> Iterator[io.BufferedReader]:
    """The decompressed bytes of ``p``, raising :class:`DataTooLarge` past ``cap`` (a plain
    file over it before a byte is read)."""
    if p.stat().st_size > cap and not p.name.lower().endswith((".gz", ".bz2", ".xz", ".zip")):
        raise DataTooLarge
    with _decompressed(p) as inner:
        yield io.BufferedReader(_Capped(inner, cap))


def check_parquet_size(p: Path, cap: int) -> None:
    """``DataError`` if the Parquet file at ``p`` holds more than ``cap`` bytes once read: its
    pages' uncompressed size, or 8 bytes a cell (dictionary-encoded pages are far smaller than
    the columns they decode to), from its footer; a file without a readable footer is left to
    the reader's error."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(p).metadata
    except Exception:  # pyarrow raises several unrelated types; the reader reports them
        return
    pages = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    size = max(pages, 8 * meta.num_rows * meta.num_columns)
    if size > cap or p.stat().st_size > cap:
        raise DataError(str(p), too_large(cap))
