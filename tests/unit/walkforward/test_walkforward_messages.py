"""A walk-forward's line while it runs goes to its ``on_message`` (riskppo/logs.py): the
command line passes ``print``; a Python caller gets an INFO record of the ``riskppo`` logger.
The run itself prints nothing (tests/unit/test_library_prints_nothing.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from riskppo.config import Config
from riskppo.walkforward.cells import CELL_DONE
from riskppo.walkforward.plan import Segment, WalkForwardSettings
from riskppo.walkforward.run import WalkForwardRun

SEGMENT = Segment(index=0, train_start=0, test_start=100, test_end=150, settle_end=151)


def _damaged_run(tmp_path: Path) -> WalkForwardRun:
    """A run of one segment and seed whose cell has a truncated ``cell.json``."""
    cell = tmp_path / "cells" / "seg00-s0"
    cell.mkdir(parents=True)
    (cell / CELL_DONE).write_text('{"segment": 0, "met')
    return WalkForwardRun(Config(), WalkForwardSettings(seeds=(0,)), tmp_path, [SEGMENT])


def test_a_damaged_cell_is_named_to_on_message_and_nothing_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _damaged_run(tmp_path)
    lines: list[str] = []
    run.on_message = lines.append
    assert [job.name for job in run.pending()] == ["seg00-s0"]
    (line,) = lines
    assert line.startswith("riskppo walkforward: cells/seg00-s0/cell.json does not read back (")
    assert line.endswith("; training that cell again")
    assert not (tmp_path / "cells" / "seg00-s0" / CELL_DONE).exists()
    assert capsys.readouterr() == ("", "")


def test_by_default_the_line_is_a_log_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _damaged_run(tmp_path)
    with caplog.at_level(logging.INFO, logger="riskppo"):
        run.pending()
    (record,) = caplog.records
    assert record.name == "riskppo" and record.levelno == logging.INFO
    assert record.getMessage().endswith("; training that cell again")
    assert capsys.readouterr() == ("", "")
