"""The configs shipped inside the package (``riskppo/configs/*.yaml``), reachable by name.

``config="cartpole_masked"`` (Python) or ``--config cartpole_masked`` (CLI) reads the shipped
``cartpole_masked.yaml`` — the presets of docs/benchmarks.md and the trading agents of the README
— wherever the package is installed. A file of that name in the working directory wins.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def bundled_dir() -> Path:
    """The folder of the shipped configs."""
    return Path(str(resources.files("riskppo") / "configs"))


def bundled_names() -> list[str]:
    """The shipped configs' names, without ``.yaml``, sorted."""
    return sorted(p.stem for p in bundled_dir().glob("*.yaml"))


def resolve_config_path(path: str | Path) -> Path:
    """``path`` if it is a file; else the shipped config it names (``"cartpole_masked"`` or
    ``"cartpole_masked.yaml"``, no folder part); else ``path`` unchanged, for the reader to
    report."""
    p = Path(path)
    if p.is_file() or p.parent != Path("."):
        return p
    stem = p.name.removesuffix(".yaml")
    shipped = bundled_dir() / f"{stem}.yaml"
    return shipped if stem in bundled_names() else p
