"""Features a user adds by name (:func:`riskppo.envs.features.register`), each checked for
look-ahead when added.

A registered feature is a function of the price frame (the canonical frame of
:func:`~riskppo.envs.load_ohlcv`, with any signal columns) returning one float per row; once
registered, its name works in ``features`` (``env.kwargs.features``) like a built-in one
(:mod:`riskppo.envs.features`). Registration runs it on a seeded synthetic frame
(:func:`~riskppo.envs.causality.probe_frame`) and refuses it — one ``ValueError`` line — when it
returns anything but one float per row, looks ahead (for several cuts ``t`` the bars after ``t``
are changed and no value at a row ``<= t`` may move: :func:`~riskppo.envs.causality.lookahead`,
the test the built-in features pass) or is not finite from its ``lookback`` on. A check on
synthetic data cannot prove causality on every input, but it catches the usual mistakes (a
``shift(-1)``, a centred window, normalising by the whole series).

The registry lives in the process: workers of ``env.vec_env: subproc`` see the features that
their own imports register (register them at the top level of a module, not under
``if __name__ == "__main__"``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "FeatureFn",
    "RegisteredFeature",
    "check_causal",
    "new_feature",
    "registered_features",
    "registered_values",
    "unregister",
]


FeatureFn = Callable[[pd.DataFrame], "np.ndarray | pd.Series"]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
PROBE_SEED = 20240613  # seed of the synthetic frame the causality check runs on
PROBE_CUTS = 8  # bars after which the frame is changed, each cut in turn


@dataclass(frozen=True)
class RegisteredFeature:
    """A feature added with :func:`register`.

    Attributes:
        name: its name in ``features``.
        fn: ``fn(df) -> [len(df)]`` floats, the value at each bar (NaN before ``lookback``).
        lookback: its first complete row: bars of history it needs.
        columns: the frame's columns it reads besides ``close`` (``("high", "low")``, or a
            signal column's name).
    """

    name: str
    fn: FeatureFn
    lookback: int
    columns: tuple[str, ...]


_REGISTRY: dict[str, RegisteredFeature] = {}


def unregister(name: str) -> None:
    """Remove registered feature ``name`` (``KeyError`` if there is none)."""
    del _REGISTRY[name]


def registered_features() -> dict[str, RegisteredFeature]:
    """The registered features by name (a copy)."""
    return dict(_REGISTRY)


def new_feature(
    name: str, fn: FeatureFn, lookback: int, columns: Sequence[str], replace: bool
) -> RegisteredFeature:
    """The feature's settings, checked (``ValueError`` naming the bad one)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"feature name {name!r}: letters, digits, '_' and '.', not first a digit")
    if name in _REGISTRY and not replace:
        raise ValueError(f"feature {name!r} is registered already; pass replace=True to replace it")
    if not callable(fn):
        raise ValueError(f"feature {name!r}: fn must be a function of the frame, got {fn!r}")
    if isinstance(lookback, bool) or not isinstance(lookback, int) or lookback < 0:
        raise ValueError(f"feature {name!r}: lookback={lookback!r} must be an int >= 0")
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise ValueError(f"feature {name!r}: columns={columns!r} must be a list of column names")
    return RegisteredFeature(name, fn, lookback, tuple(columns))


def registered_values(feature: RegisteredFeature, df: pd.DataFrame) -> np.ndarray:
    """``feature.fn`` on a copy of ``df`` as float64 ``[len(df)]`` (``ValueError`` otherwise)."""
    out = feature.fn(df.copy())
    values = out.to_numpy() if isinstance(out, pd.Series) else out
    what = f"feature {feature.name!r} returned"
    if not isinstance(values, np.ndarray):
        raise ValueError(f"{what} a {type(out).__name__}; it must return a float array")
    if values.shape != (len(df),):
        raise ValueError(
            f"{what} shape {values.shape} for a frame of {len(df)} rows; it must return one "
            "float per row"
        )
    if values.dtype.kind != "f":
        raise ValueError(f"{what} {values.dtype} values; it must return floats (NaN if unknown)")
    return values.astype(np.float64)


def check_causal(feature: RegisteredFeature) -> None:
    """Refuse ``feature`` unless, on a seeded synthetic frame, it is causal
    (:func:`riskppo.envs.causality.lookahead`, several cuts) and finite from its lookback on."""
    from riskppo.envs.causality import lookahead, probe_frame

    n = max(600, 2 * feature.lookback + 200)
    df = probe_frame(n, PROBE_SEED, feature.columns)
    try:
        values = registered_values(feature, df)
    except ValueError:
        raise
    except Exception as exc:  # the user's function: any error, said in one line
        raise ValueError(
            f"feature {feature.name!r} fails on a synthetic OHLCV frame "
            f"({type(exc).__name__}: {exc}); declare the columns it reads in columns="
        ) from None
    rng = np.random.default_rng(PROBE_SEED)
    cuts = np.linspace(max(feature.lookback, n // 5), n - 2, PROBE_CUTS).astype(int)
    found = lookahead(lambda d: registered_values(feature, d), df, cuts.tolist(), rng)
    if found is not None:
        raise ValueError(
            f"feature {feature.name!r} looks ahead: its value at row {found.row} changes when "
            f"rows after {found.cut} change"
        )
    bad = np.flatnonzero(~np.isfinite(values[feature.lookback :]))
    if len(bad):
        row = feature.lookback + int(bad[0])
        raise ValueError(
            f"feature {feature.name!r} is {values[row]} at row {row} of a synthetic frame, "
            f"after its lookback={feature.lookback}; raise lookback or return finite values"
        )
