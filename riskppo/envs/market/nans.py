"""Missing values in a loaded frame's columns: raise on them, or forward-fill short runs
(``nan_policy``, see :func:`~riskppo.envs.load_ohlcv`). Prices and a user's signal columns
(``data.signals``) go through the same policy."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from riskppo.envs.market.errors import DataError, Remedy

__all__ = ["NanPolicy", "apply_nan_policy"]

NanPolicy = Literal["raise", "ffill"]


def _when(ts: np.ndarray, i: int) -> str:
    return str(pd.Timestamp(ts[i]))


def _nan_runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start positions and lengths of the runs of True in a 1-d bool mask."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    d = np.diff(padded)
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    return starts, ends - starts


def apply_nan_policy(
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
        problem, remedy = _nan_problem(name, rows[s0 : s0 + ln], s0 == 0, policy, limit)
        raise DataError(source, problem, row=int(rows[s0]), when=_when(ts, s0), remedy=remedy)
    if policy == "ffill":
        for name, v in values.items():
            mask = np.isnan(v)
            if mask.any():
                idx = np.where(mask, 0, np.arange(len(v)))
                np.maximum.accumulate(idx, out=idx)
                values[name] = v[idx]


def _nan_problem(
    name: str, run_rows: np.ndarray, at_start: bool, policy: NanPolicy, limit: int
) -> tuple[str, Remedy | None]:
    """What is wrong with the run of missing values at data rows ``run_rows`` of column ``name``
    (``at_start``: in the first row after sorting) under ``policy``, and the settings that would
    fill it (none at the start)."""
    ln = len(run_rows)
    run = f"a run of {ln} missing values (data rows {run_rows[0]}-{run_rows[-1]})"
    if ln == 1:
        run = "a run of 1 missing value"
    problem = f"NaN in column {name!r}: {run}"
    fill = "to forward-fill it"
    if at_start:
        return f"{problem}; the first row has no earlier value to forward-fill it from", None
    if policy == "ffill":
        return f"{problem}, longer than the forward-fill limit of {limit}", Remedy(
            (("ffill_limit", ln),), fill
        )
    settings: tuple[tuple[str, object], ...] = (("nan_policy", "ffill"),)
    if ln > limit:
        settings += (("ffill_limit", ln),)
    return problem, Remedy(settings, fill)
