"""The old module paths (riskppo._aliases) in a fresh interpreter over a copy of the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import riskppo


def test_a_leftover_directory_of_the_old_layout_does_not_hide_an_old_name(tmp_path):
    """An upgrade in place can leave ``riskppo/train/__pycache__`` behind: without the finder
    first on ``sys.meta_path`` that directory would be imported as an empty namespace package."""
    copy = tmp_path / "riskppo"
    shutil.copytree(Path(riskppo.__file__).parent, copy, ignore=shutil.ignore_patterns("*.so"))
    (copy / "train" / "__pycache__").mkdir(parents=True)
    script = "import riskppo.train.runlock as m; print(m.__name__)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "riskppo.runs.lock"
