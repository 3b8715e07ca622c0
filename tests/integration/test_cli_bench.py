"""`riskppo bench`: lists the repository's benchmark scripts and runs one in a real process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from riskppo.cli import main


def test_bench_lists_the_scripts(capsys: pytest.CaptureFixture) -> None:
    assert main(["bench"]) == 0
    out = capsys.readouterr().out
    for name in ("throughput", "sample_efficiency", "robustness", "pbt_trading"):
        assert name in out


def test_bench_runs_a_script_and_rejects_unknown_names(capsys: pytest.CaptureFixture) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "riskppo.cli", "bench", "env_speed", "--steps", "2000",
         "--repeats", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "steps/s" in proc.stdout
    assert main(["bench", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err
