"""Demonstration datasets for behaviour cloning (R-ALG-12): storage, validation and chunking.

A demonstration set is time-major like a rollout: ``N`` columns (sequences, e.g. one per env) of
``T`` steps each.

==================  ==================  =====================================================
field               shape               meaning
==================  ==================  =====================================================
``observations``    ``[T, N, D]``       raw env observations (before any obs normalisation)
``actions``         ``[T, N, *A]``      the demonstrator's action: float32 ``[T, N, A]`` in
                                        the Box bounds, or integer ``[T, N]`` in
                                        ``[0, n)`` for ``Discrete(n)``
``episode_starts``  ``[T, N]``          bool/0-1: an episode starts at this step (the LSTM
                                        state is reset before it)
``returns``         ``[T, N]``          optional: discounted return-to-go of each step
==================  ==================  =====================================================

``[T, D]`` / ``[T, *A]`` / ``[T]`` (one sequence) are accepted as ``N = 1``. Files are
safetensors, or Parquet tables with one row per step (``.parquet``/``.pq``, columns in
:mod:`riskppo.demos.parquet`); the suffix decides (:func:`save_demonstrations` /
:func:`load_demonstrations`; never pickle). Every problem raises :class:`DemonstrationError`,
one line naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from riskppo.demos.parquet import (
    PARQUET_SUFFIXES,
    read_parquet_demonstrations,
    write_parquet_demonstrations,
)
from riskppo.demos.types import DemonstrationError, Demonstrations

__all__ = [
    "FIELDS",
    "DemonstrationError",
    "Demonstrations",
    "load_demonstrations",
    "save_demonstrations",
    "validate_demonstrations",
]

FIELDS: tuple[str, ...] = ("observations", "actions", "episode_starts", "returns")
SAFETENSORS_SUFFIX = ".safetensors"
_REQUIRED = FIELDS[:3]


def check_demonstration_suffix(path: str | Path) -> None:
    """Raise :class:`DemonstrationError` unless ``path`` ends in ``.safetensors`` or a Parquet
    suffix (``.parquet``/``.pq``): a demonstration file is read back by its suffix."""
    path = Path(path)
    if path.suffix.lower() not in (SAFETENSORS_SUFFIX, *PARQUET_SUFFIXES):
        raise DemonstrationError(
            f"{path}: a demonstration file is safetensors or Parquet, not "
            f"{repr(path.suffix) if path.suffix else 'a name without a suffix'}; write it as "
            f"{path.with_suffix(SAFETENSORS_SUFFIX)} (or .parquet for a table)"
        )


def save_demonstrations(
    path: str | Path, demos: Demonstrations, metadata: dict[str, str] | None = None
) -> Path:
    """Write ``demos`` to a ``.safetensors`` file, or a Parquet table for a
    ``.parquet``/``.pq`` path (any other suffix raises :class:`DemonstrationError`);
    ``metadata``: strings kept in the file's header (schema)."""
    path = Path(path)
    check_demonstration_suffix(path)
    if path.suffix.lower() in PARQUET_SUFFIXES:
        return write_parquet_demonstrations(path, demos, metadata)
    tensors = {
        "observations": demos.observations.float().contiguous(),
        "actions": demos.actions.contiguous(),
        "episode_starts": demos.episode_starts.bool().contiguous(),
    }
    if demos.returns is not None:
        tensors["returns"] = demos.returns.float().contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=metadata)
    return path


def load_demonstrations(
    path: str | Path,
    observation_space: spaces.Space[Any] | None = None,
    action_space: spaces.Space[Any] | None = None,
) -> Demonstrations:
    """Read a demonstration file (safetensors, or Parquet by its suffix) and validate it
    (against the spaces, if given).

    Raises:
        DemonstrationError: unreadable file, a missing or unknown field, a wrong shape or dtype,
            non-finite values, actions outside the action space.
    """
    path = Path(path)
    if not path.is_file():
        raise DemonstrationError(f"{path}: no such demonstration file")
    if path.suffix.lower() in PARQUET_SUFFIXES:
        demos = read_parquet_demonstrations(path)
        return validate_demonstrations(demos, observation_space, action_space, where=str(path))
    try:
        raw = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        msg = " ".join(str(exc).split())
        raise DemonstrationError(f"{path}: not a safetensors demonstration file ({msg})") from None
    missing = [f for f in _REQUIRED if f not in raw]
    if missing:
        raise DemonstrationError(
            f"{path}: field '{missing[0]}' is missing (fields: {', '.join(FIELDS[:3])}, optional "
            "returns)"
        )
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise DemonstrationError(f"{path}: unknown field '{unknown[0]}' (allowed: {FIELDS})")
    demos = Demonstrations(
        raw["observations"], raw["actions"], raw["episode_starts"], raw.get("returns")
    )
    return validate_demonstrations(demos, observation_space, action_space, where=str(path))


def validate_demonstrations(
    demos: Demonstrations,
    observation_space: spaces.Space[Any] | None = None,
    action_space: spaces.Space[Any] | None = None,
    *,
    where: str = "demonstrations",
) -> Demonstrations:
    """Check and normalise ``demos``: ``N = 1`` axes added, dtypes fixed, finite values, shapes
    and action range against the spaces. Returns the checked set."""

    def fail(field: str, msg: str) -> DemonstrationError:
        return DemonstrationError(f"{where}: field '{field}' {msg}")

    obs = demos.observations
    if obs.dtype.is_complex or not obs.dtype.is_floating_point or obs.dim() not in (2, 3):
        raise fail("observations", f"must be float [T, N, D], got {obs.dtype} {list(obs.shape)}")
    one_seq = obs.dim() == 2
    obs = obs.unsqueeze(1) if one_seq else obs
    T, N = obs.shape[:2]
    if T == 0 or N == 0:
        raise fail("observations", f"is empty ({list(obs.shape)})")
    if observation_space is not None and obs.shape[2:] != tuple(observation_space.shape or ()):
        raise fail(
            "observations",
            f"has observation shape {list(obs.shape[2:])}, the env's is "
            f"{list(observation_space.shape or ())}",
        )
    _finite(obs, fail, "observations")
    starts = _per_step(demos.episode_starts, one_seq, (T, N), fail, "episode_starts")
    if not bool(((starts == 0) | (starts == 1)).all()):
        raise fail("episode_starts", "must hold only 0/1 (or bool) values")
    returns = None
    if demos.returns is not None:
        returns = _per_step(demos.returns, one_seq, (T, N), fail, "returns").float()
        _finite(returns, fail, "returns")
    actions = _check_actions(demos.actions, one_seq, (T, N), action_space, fail)
    return Demonstrations(obs.float(), actions, starts.bool(), returns)


def _per_step(x: Tensor, one_seq: bool, tn: tuple[int, int], fail: Any, field: str) -> Tensor:
    """A ``[T, N]`` field (``[T]`` for one sequence) with the observations' ``T, N``."""
    y = x.unsqueeze(1) if one_seq and x.dim() == 1 else x
    if tuple(y.shape) != tn:
        raise fail(field, f"has shape {list(x.shape)}, expected {list(tn)} like observations")
    if y.dtype.is_complex:
        raise fail(field, f"has dtype {y.dtype}")
    return y


def _finite(x: Tensor, fail: Any, field: str) -> None:
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0]]
        raise fail(field, f"has a non-finite value at index {idx}")


def _check_actions(
    a: Tensor, one_seq: bool, tn: tuple[int, int], space: spaces.Space[Any] | None, fail: Any
) -> Tensor:
    """Actions ``[T, N, *A]``: integer in ``[0, n)`` for Discrete, float in the bounds for Box."""
    a = a.unsqueeze(1) if one_seq else a
    if tuple(a.shape[:2]) != tn:
        raise fail("actions", f"has shape {list(a.shape)}, expected [T, N, ...] = {list(tn)}")
    if isinstance(space, spaces.Discrete):
        if a.dim() != 2 or a.dtype.is_floating_point or a.dtype == torch.bool:
            raise fail("actions", f"must be integer [T, N] for {space}, got {a.dtype} {a.dim()}-d")
        lo, n = int(space.start), int(space.n)
        if bool(((a < lo) | (a >= lo + n)).any()):
            raise fail("actions", f"has a value outside [{lo}, {lo + n}) of {space}")
        return a.long()
    if space is None and not a.dtype.is_floating_point and a.dtype != torch.bool:
        return a.long()  # discrete actions, no space to check them against
    if not a.dtype.is_floating_point:
        raise fail("actions", f"must be float for a continuous action space, got {a.dtype}")
    _finite(a, fail, "actions")
    if isinstance(space, spaces.Box):
        if a.dim() == 2 and tuple(space.shape) == (1,):
            a = a.unsqueeze(-1)  # one scalar per step for a 1-d Box
        if tuple(a.shape[2:]) != tuple(space.shape):
            raise fail("actions", f"has action shape {list(a.shape[2:])}, the env's is {space}")
        low = torch.as_tensor(np.asarray(space.low, np.float32))
        high = torch.as_tensor(np.asarray(space.high, np.float32))
        if bool(((a < low) | (a > high)).any()):
            raise fail("actions", f"has a value outside the action space bounds of {space}")
    return a.float()
