"""A European CSV (``;``-separated, decimal commas) through ``riskppo train --set data.path=``: what
cannot be read, or a bad ``data.sep``, is one line naming the ``--set`` options that fix it, no
traceback. Real processes, real files (reading such files: tests/unit/envs/test_european_files.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def train(*sets: str, run_dir: Path) -> str:
    """The one line of ``riskppo train --set ...`` refused as a user error (exit code 2)."""
    args = [x for kv in sets for x in ("--set", kv)]
    res = subprocess.run(
        [sys.executable, "-m", "riskppo.cli", "train", *args, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith("riskppo: warning:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.fixture
def european(tmp_path: Path) -> Path:
    path = tmp_path / "kurse.csv"
    rows = [f"0{d}.03.2021;101,{d}0;102,50;99,75;101,25;1.200" for d in range(1, 8)]
    path.write_text("Date;Open;High;Low;Close;Volume\n" + "\n".join(rows) + "\n")
    return path


def test_a_european_file_read_with_commas_names_the_settings(european, tmp_path) -> None:
    line = train(f"data.path={european}", "data.sep=,", run_dir=tmp_path / "run")
    assert line == (
        f"riskppo: data error: {european}: data row 1: more fields than the 1 header columns; "
        'add --set data.sep=";" --set data.decimal="," if the file separates fields with \';\' '
        "and writes decimal commas"
    )


def test_a_bad_separator_is_one_line(tmp_path) -> None:
    line = train("data.sep=x", run_dir=tmp_path / "run")
    assert line == (
        "riskppo: configuration error: invalid configuration: data.sep: unknown field separator "
        "'x': one of ',', ';', tab, pipe ('|'), or null to detect it from the header (got 'x')"
    )


def test_undecidable_decimal_marks_are_one_line_naming_the_settings(tmp_path) -> None:
    path = tmp_path / "mixed.csv"
    rows = [f"2021-03-0{d};101,{d}0;1.5" for d in range(1, 8)]
    path.write_text("Date;Close;Volume\n" + "\n".join(rows) + "\n")
    line = train(f"data.path={path}", run_dir=tmp_path / "run")
    assert line == (
        f"riskppo: data error: {path}: cannot tell the decimal mark: numbers with ',' ('101,10' "
        "in column 'Close') and with '.' ('1.5' in column 'Volume'); add --set data.sep=\";\" "
        "--set data.decimal=\",\" to read decimal commas ('.' only as thousands: 1.234,5)"
    )
