"""The ``riskppo`` command line as a user meets it, run as real processes or through ``main``."""

from __future__ import annotations

import importlib.metadata
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

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


TINY = """\
seed: 0
total_timesteps: 1000
env: {id: CartPole-v1, n_envs: 2}
ppo: {n_steps: 16, batch_size: 32, bptt_len: 8, n_epochs: 1}
policy: {lstm_hidden_size: 16}
"""
PLAIN_LINE = re.compile(
    r"training: ([\d,]+)/1,000 steps \((\d+)%\)  elapsed \d+:\d\d:\d\d  ETA \d+:\d\d:\d\d  "
    r"fps [\d,]+  return (-|-?[\d.]+)"
)


def test_progress_is_plain_lines_when_output_is_not_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = cli("train", "--config", str(tmp_path / "tiny.yaml"), "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stdout and "\x1b" not in proc.stdout  # no redrawn bar, no colours
    lines = [m for m in map(PLAIN_LINE.fullmatch, proc.stdout.splitlines()) if m]
    steps = [int(m[1].replace(",", "")) for m in lines]
    shares = [int(m[2]) for m in lines]
    assert [s * 10 // 1000 for s in steps[:-1]] == list(range(1, 10))  # one line per tenth
    assert steps[-1] >= 1000 and shares[-1] == 100


def test_progress_is_a_live_bar_on_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY)
    controller, terminal = pty.openpty()
    args = ["train", "--config", str(tmp_path / "tiny.yaml"), "--run-dir", str(tmp_path / "r")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "riskppo.cli", *args],
        stdout=terminal, stderr=terminal, env={**os.environ, "TERM": "xterm", "COLUMNS": "120"},
    )  # fmt: skip
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=120) == 0
    os.close(controller)
    out = b"".join(chunks).decode(errors="replace")
    assert "━" in out and "ETA" in out  # rich's bar
    assert not any(PLAIN_LINE.search(line) for line in out.splitlines())
