"""The ``riskppo`` command line as a user meets it, run as real processes or through ``main``."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import riskppo


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m riskppo.cli ARGS`` in a real process (text output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "riskppo.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_version_prints_the_installed_version() -> None:
    proc = cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"riskppo {riskppo.__version__}"
    assert riskppo.__version__ == importlib.metadata.version("riskppo")
