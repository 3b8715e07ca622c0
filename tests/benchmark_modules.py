"""The scripts of ``benchmarks/`` as modules, for the tests that check their arithmetic (a
benchmark imports its siblings by plain name, so the folder is on ``sys.path`` while it loads)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def import_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported (once per process, as any module)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
