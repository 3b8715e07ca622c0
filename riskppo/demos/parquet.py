"""Demonstrations as a Parquet table (R-ALG-12): one row per step, the tidy format a user's own
strategy or a dataframe library writes.

=====================  ===========================================================================
column                 meaning
=====================  ===========================================================================
``sequence``           optional integer: which sequence (column ``N`` of the time-major set) the
                       row belongs to; every sequence has the same number of rows, in time
                       order. Without it the table is one sequence.
``observations``       a fixed-size list column ``[D]`` of floats, **or** ``D`` scalar columns
                       ``observations_0 … observations_{D-1}``
``actions``            an integer (``Discrete``) or float scalar (a 1-d ``Box``), a fixed-size list
                       column ``[A]``, **or** ``actions_0 … actions_{A-1}``
``episode_starts``     bool or 0/1: an episode starts at this row
``returns``            optional float: discounted return-to-go
=====================  ===========================================================================

Reading gives an unvalidated :class:`~riskppo.demos.files.Demonstrations`; the caller validates
it like a safetensors file. Every problem raises ``DemonstrationError`` naming file and column.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch import Tensor

from riskppo.demos.types import DemonstrationError, Demonstrations

__all__ = ["PARQUET_SUFFIXES", "read_parquet_demonstrations", "write_parquet_demonstrations"]

PARQUET_SUFFIXES = (".parquet", ".pq")
_KNOWN = ("sequence", "observations", "actions", "episode_starts", "returns")
_NUMBERED = re.compile(r"(observations|actions)_\d+")


def write_parquet_demonstrations(
    path: Path, demos: Demonstrations, metadata: dict[str, str] | None = None
) -> Path:
    """Write ``demos`` (``[T, N, ...]``) as one row per step, sequence by sequence, with list
    columns for observations (and for vector actions); ``metadata`` in the schema."""
    T, N = demos.shape
    cols: dict[str, pa.Array] = {
        "sequence": pa.array(np.repeat(np.arange(N, dtype=np.int64), T)),
        "observations": _list_column(demos.observations.float()),
        "episode_starts": pa.array(_rows(demos.episode_starts).numpy().astype(bool)),
    }
    a = demos.actions
    cols["actions"] = _list_column(a) if a.dim() == 3 else pa.array(_rows(a).numpy())
    if demos.returns is not None:
        cols["returns"] = pa.array(_rows(demos.returns.float()).numpy())
    table = pa.table(cols).replace_schema_metadata(metadata or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def read_parquet_demonstrations(path: Path) -> Demonstrations:
    """Read a demonstration table into time-major tensors (not yet validated)."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        msg = " ".join(str(exc).split())
        raise DemonstrationError(f"{path}: not a Parquet demonstration file ({msg})") from None
    names = [n for n in table.column_names if not n.startswith("__index_level_")]  # pandas index
    unknown = [n for n in names if n not in _KNOWN and not _NUMBERED.fullmatch(n)]
    if unknown:
        raise DemonstrationError(f"{path}: unknown column '{unknown[0]}' (allowed: {_KNOWN})")
    order, N = _sequence_order(table, path)

    def field(name: str, required: bool = True) -> np.ndarray | None:
        value = _column(table, name, path, required)
        if value is None:
            return None
        value = value[order]
        return value.reshape(N, -1, *value.shape[1:]).swapaxes(0, 1)  # [T, N, ...]

    obs = field("observations")
    actions = field("actions")
    starts = field("episode_starts")
    returns = field("returns", required=False)
    assert obs is not None and actions is not None and starts is not None
    if obs.ndim == 2:
        obs = obs[..., None]  # one scalar observation column: D = 1
    return Demonstrations(
        _tensor(obs),
        _tensor(actions),
        _tensor(starts),
        None if returns is None else _tensor(returns),
    )


def _rows(x: Tensor) -> Tensor:
    """``[T, N, ...]`` → ``[N * T, ...]``, sequence by sequence."""
    return x.transpose(0, 1).reshape(-1, *x.shape[2:])


def _list_column(x: Tensor) -> pa.Array:
    flat = _rows(x).numpy()
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def _sequence_order(table: pa.Table, path: Path) -> tuple[np.ndarray, int]:
    """Row order grouping each sequence (stable: time order kept) and the number of sequences."""
    rows = table.num_rows
    if rows == 0:
        raise DemonstrationError(f"{path}: the table has no rows")
    if "sequence" not in table.column_names:
        return np.arange(rows), 1
    seq = table.column("sequence").to_numpy(zero_copy_only=False)
    if seq.dtype.kind not in "iu":
        raise DemonstrationError(f"{path}: column 'sequence' must be integer, got {seq.dtype}")
    ids, counts = np.unique(seq, return_counts=True)
    if len(set(counts.tolist())) != 1:
        short = int(ids[np.argmin(counts)])
        raise DemonstrationError(
            f"{path}: column 'sequence' — sequence {short} has {counts.min()} rows, others up to "
            f"{counts.max()} (every sequence needs the same number of steps)"
        )
    return np.argsort(seq, kind="stable"), len(ids)


def _column(table: pa.Table, name: str, path: Path, required: bool) -> np.ndarray | None:
    """A column as ``[rows, ...]`` numpy: a scalar column, a fixed-size list column, or the
    numbered scalar columns ``name_0 …``."""
    numbered = sorted(
        (c for c in table.column_names if re.fullmatch(rf"{name}_\d+", c)),
        key=lambda c: int(c.rsplit("_", 1)[1]),
    )
    if name in table.column_names and numbered:
        raise DemonstrationError(f"{path}: both column '{name}' and '{numbered[0]}' given")
    if numbered:
        expected = [f"{name}_{i}" for i in range(len(numbered))]
        if numbered != expected:
            missing = sorted(set(expected) - set(numbered))[0]
            raise DemonstrationError(f"{path}: column '{missing}' is missing")
        return np.stack([_scalars(table, c, path) for c in numbered], axis=1)
    if name not in table.column_names:
        if required:
            raise DemonstrationError(
                f"{path}: column '{name}' is missing (columns: observations, actions, "
                "episode_starts, optional sequence and returns)"
            )
        return None
    col = table.column(name).combine_chunks()
    if (
        pa.types.is_list(col.type)
        or pa.types.is_fixed_size_list(col.type)
        or pa.types.is_large_list(col.type)
    ):
        return _lists(col, name, path)
    return _scalars(table, name, path)


def _scalars(table: pa.Table, name: str, path: Path) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        raise DemonstrationError(f"{path}: column '{name}' has {col.null_count} missing value(s)")
    if not (
        pa.types.is_integer(col.type)
        or pa.types.is_floating(col.type)
        or pa.types.is_boolean(col.type)
    ):
        raise DemonstrationError(f"{path}: column '{name}' must be numeric, got {col.type}")
    return col.to_numpy(zero_copy_only=False)


def _lists(col: pa.Array, name: str, path: Path) -> np.ndarray:
    if col.null_count:
        raise DemonstrationError(f"{path}: column '{name}' has {col.null_count} missing row(s)")
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    if len(set(lengths.tolist())) != 1:
        row = int(np.flatnonzero(lengths != lengths[0])[0])
        raise DemonstrationError(
            f"{path}: column '{name}' row {row} has {lengths[row]} values, row 0 has {lengths[0]}"
        )
    values = col.flatten()
    if values.null_count:
        raise DemonstrationError(f"{path}: column '{name}' has missing values inside its lists")
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise DemonstrationError(f"{path}: column '{name}' must hold numbers, got {values.type}")
    return values.to_numpy(zero_copy_only=False).reshape(len(col), int(lengths[0]))


def _tensor(x: np.ndarray) -> Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))
