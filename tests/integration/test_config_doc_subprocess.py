"""The documented command ``python -m riskppo.cli.config_doc`` writes the committed
docs/config.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from riskppo.cli.config_doc import render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "config.md"


def test_docs_config_md_is_what_the_generator_writes(tmp_path: Path):
    """Run the documented command; its page must be the committed one (regenerate with
    ``python -m riskppo.cli.config_doc docs/config.md`` after changing a config field)."""
    out = tmp_path / "config.md"
    cmd = [sys.executable, "-m", "riskppo.cli.config_doc", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, timeout=120)
    assert out.read_text(encoding="utf-8") == render()
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/config.md is out of date: run python -m riskppo.cli.config_doc docs/config.md"
    )
