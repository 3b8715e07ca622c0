"""Serialise a training state as a whole: tensors for safetensors, everything else as JSON.

:func:`encode` walks dataclasses, named tuples, deques/tuples of numbers, tensors, generators and
JSON scalars, so a field added to the training state is saved without a hand-kept list (issue
15). A dataclass field whose metadata has ``"transient"`` (its reason) is not saved.

:func:`decode` rebuilds a value *on a template* — the initial state of the same model — and
trusts nothing it reads (R-REL-3): the JSON tree must have exactly the template's fields (one
whose metadata has ``"since"``, the version that added it, may be absent: a checkpoint written
before it keeps the template's value); every tensor must have the template's dtype and shape
and be finite; a generator state must be one; scalars must fit the field's type hint; fields
with ``metadata["min"]`` are range-checked.
Every problem is a :class:`StateDecodeError` that names the field path.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections import deque
from typing import Any

import torch
from torch import Tensor

__all__ = ["StateDecodeError", "decode", "encode"]

_SCALARS = (bool, int, float, str, type(None))


class StateDecodeError(ValueError):
    """A saved training state does not fit the template (names the field path)."""


def encode(obj: Any, prefix: str = "state") -> tuple[Any, dict[str, Tensor]]:
    """``obj`` → ``(JSON tree, tensors)``; tensors are keyed by their field path."""
    tensors: dict[str, Tensor] = {}
    return _enc(obj, prefix, tensors), tensors


def _enc(x: Any, path: str, tensors: dict[str, Tensor]) -> Any:
    if isinstance(x, Tensor):
        tensors[path] = x.detach().cpu().contiguous().clone()
        return {"tensor": path}
    if isinstance(x, torch.Generator):
        tensors[path] = x.get_state()
        return {"generator": path}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {
            f.name: _enc(getattr(x, f.name), f"{path}/{f.name}", tensors)
            for f in dataclasses.fields(x)
            if "transient" not in f.metadata
        }
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # NamedTuple
        return {k: _enc(v, f"{path}/{k}", tensors) for k, v in zip(x._fields, x)}
    if isinstance(x, deque | tuple | list):
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in x):
            raise TypeError(f"{path}: only sequences of numbers are serialised")
        return list(x)
    if isinstance(x, _SCALARS):
        return x
    raise TypeError(f"{path}: cannot serialise a {type(x).__name__}")


def decode(template: Any, tree: Any, tensors: dict[str, Tensor], prefix: str = "state") -> Any:
    """A value shaped like ``template`` from what :func:`encode` wrote (validated)."""
    return _dec(template, tree, tensors, prefix, None, {})


def _dec(tpl: Any, x: Any, tensors: dict[str, Tensor], path: str, hint: Any, meta: Any) -> Any:
    if isinstance(tpl, Tensor):
        return _tensor(tpl, x, tensors, path)
    if isinstance(tpl, torch.Generator):
        return _generator(tpl, x, tensors, path)
    if dataclasses.is_dataclass(tpl) and not isinstance(tpl, type):
        return _dataclass(tpl, x, tensors, path)
    if isinstance(tpl, tuple) and hasattr(tpl, "_fields"):
        _keys(x, set(tpl._fields), path)
        return type(tpl)(
            *(_dec(v, x[k], tensors, f"{path}/{k}", None, {}) for k, v in zip(tpl._fields, tpl))
        )
    if isinstance(tpl, deque | tuple):
        if not isinstance(x, list) or not all(_is_number(v) for v in x):
            raise StateDecodeError(f"{path}: must be a list of numbers")
        return deque(x, maxlen=tpl.maxlen) if isinstance(tpl, deque) else tuple(x)
    if tpl is None and not _is_scalar_hint(hint):  # e.g. no risk state: the model has none
        if x is not None:
            raise StateDecodeError(f"{path}: saved with a value where this model has none")
        return None
    return _scalar(x, hint if hint is not None else type(tpl), path, meta)


def _is_scalar_hint(hint: Any) -> bool:
    """Whether a field's type hint admits only JSON scalars (e.g. ``int | None``)."""
    if hint is None:
        return False
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return all(a in _SCALARS for a in allowed)


def _keys(x: Any, want: set[str], path: str) -> None:
    if not isinstance(x, dict) or set(x) != want:
        got = sorted(x) if isinstance(x, dict) else type(x).__name__
        raise StateDecodeError(f"{path}: must have exactly the fields {sorted(want)}, not {got}")


def _dataclass(tpl: Any, x: Any, tensors: dict[str, Tensor], path: str) -> Any:
    saved = [f for f in dataclasses.fields(tpl) if "transient" not in f.metadata]
    have = x if isinstance(x, dict) else {}
    # a field added since a checkpoint was written keeps the template's value
    fields = [f for f in saved if "since" not in f.metadata or f.name in have]
    _keys(x, {f.name for f in fields}, path)
    hints = typing.get_type_hints(type(tpl))
    values = {
        f.name: _dec(
            getattr(tpl, f.name), x[f.name], tensors, f"{path}/{f.name}", hints[f.name], f.metadata
        )
        for f in fields
    }
    return dataclasses.replace(tpl, **values)


def _tensor(tpl: Tensor, x: Any, tensors: dict[str, Tensor], path: str) -> Tensor:
    t = tensors.get(path) if x == {"tensor": path} else None
    if t is None:
        raise StateDecodeError(f"{path}: tensor missing")
    if t.dtype != tpl.dtype or t.shape != tpl.shape:
        raise StateDecodeError(
            f"{path}: {t.dtype} {list(t.shape)}, expected {tpl.dtype} {list(tpl.shape)}"
        )
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise StateDecodeError(f"{path}: has non-finite values")
    return t.to(tpl.device)


def _generator(tpl: torch.Generator, x: Any, tensors: dict[str, Tensor], path: str) -> Any:
    t = tensors.get(path) if x == {"generator": path} else None
    ref = tpl.get_state()
    if t is None or t.dtype != ref.dtype or t.shape != ref.shape:
        raise StateDecodeError(f"{path}: not a random generator state")
    g = torch.Generator(device=tpl.device)
    try:
        g.set_state(t)
    except RuntimeError as exc:
        raise StateDecodeError(f"{path}: invalid random generator state: {exc}") from None
    return g


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _scalar(x: Any, hint: Any, path: str, meta: Any) -> Any:
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    ok = (
        (x is None and type(None) in allowed)
        or (isinstance(x, bool) and bool in allowed)
        or (_is_number(x) and float in allowed)
        or (isinstance(x, int) and not isinstance(x, bool) and int in allowed)
        or (isinstance(x, str) and str in allowed)
    )
    if not ok:
        names = " or ".join(getattr(a, "__name__", str(a)) for a in allowed)
        raise StateDecodeError(f"{path}: must be {names}, not {x!r}")
    low = meta.get("min") if meta else None
    if low is not None and x is not None and not (math.isfinite(x) and x >= low):
        raise StateDecodeError(f"{path}: must be a finite number >= {low}, not {x!r}")
    return float(x) if float in allowed and int not in allowed and _is_number(x) else x
