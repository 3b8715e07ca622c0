"""Values made ready for strict JSON (``json.dumps(..., allow_nan=False)``), for the files runs
write: metrics, statistics, PBT state and summaries."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def jsonable(obj: Any) -> Any:
    """``obj`` with mappings' keys as strings, tuples as lists, numpy scalars as Python numbers,
    paths as strings and non-finite floats (NaN, a failed member's -inf) as ``None``."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
