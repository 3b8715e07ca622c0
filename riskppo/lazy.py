"""Names of a package imported on first use (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, module: str, names: frozenset[str] | None = None
) -> Callable[[str], Any]:
    """Module ``__getattr__`` (PEP 562) of ``package`` giving ``names`` (None: every name) of
    ``module``, imported on first use: a package that was ``module`` before keeps its names, and
    a package whose parts import one another can name its main class without building it."""

    def __getattr__(name: str) -> Any:
        if names is not None and name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return getattr(importlib.import_module(module), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
