"""`riskppo bench`: lists the repository's benchmark scripts and runs one in a real process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from riskppo.cli import main
from riskppo.cli.bench import BENCHMARKS, bench_description, benchmarks_dir


def test_bench_lists_the_scripts_in_a_users_words(capsys: pytest.CaptureFixture) -> None:
    assert main(["bench"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    root = benchmarks_dir()
    assert root is not None
    names = sorted(p.stem for p in root.glob("*.py") if not p.stem.startswith("_"))
    assert [line.split()[0] for line in lines] == names
    for name, line in zip(names, lines):
        assert line.split(None, 1)[1] == BENCHMARKS[name], name
        assert not re.search(r"\bR-[A-Z]+|SPEC|§|issue", line), line  # no internal ids


def test_a_script_without_a_description_gets_its_docstring_without_ids(tmp_path: Path) -> None:
    script = tmp_path / "new_bench.py"
    script.write_text('"""Peak memory of ``TradingEnv`` (R-TRADE-2; issue: RSS), design §10.\n"""')
    assert bench_description(script) == "Peak memory of TradingEnv"


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
