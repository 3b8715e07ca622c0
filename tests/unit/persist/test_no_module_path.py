"""What a checkpoint stores names no Python module, so a module that moves (the package split,
the command line's move into riskppo/cli/) never stops an old checkpoint from loading."""

from __future__ import annotations

import re
from pathlib import Path

FIXTURE = Path(__file__).parents[2] / "fixtures" / "checkpoint_v1"


def test_a_checkpoint_records_no_module_path():
    """tests/unit/algo/test_training_state.py loads this fixture, saved by version 1."""
    for path in FIXTURE.iterdir():
        data = path.read_bytes()
        assert not re.search(rb"riskppo\.[a-z_]", data), path.name
