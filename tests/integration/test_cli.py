"""The ``riskppo`` command line as a user meets it, run as real processes or through ``main``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    r"training: ([\d,]+)/1,024 steps \((\d+)%\)  elapsed \d+:\d\d:\d\d  ETA \d+:\d\d:\d\d  "
    r"fps [\d,]+  return (-|-?[\d.]+)"
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A CartPole run trained by ``riskppo train`` with its output piped (not a terminal)."""
    root = tmp_path_factory.mktemp("tiny")
    (root / "tiny.yaml").write_text(TINY)
    proc = cli("train", "--config", str(root / "tiny.yaml"), "--run-dir", str(root / "run"))
    assert proc.returncode == 0, proc.stderr
    return root / "run", proc.stdout


def test_progress_is_plain_lines_when_output_is_not_a_terminal(tiny_run) -> None:
    _, out = tiny_run
    assert "\r" not in out and "\x1b" not in out  # no redrawn bar, no colours
    lines = [m for m in map(PLAIN_LINE.fullmatch, out.splitlines()) if m]
    steps = [int(m[1].replace(",", "")) for m in lines]
    shares = [int(m[2]) for m in lines]
    assert [s * 10 // 1024 for s in steps[:-1]] == list(range(1, 10))  # one line per tenth
    assert steps[-1] == 1024 and shares[-1] == 100  # ends at its total, not past it
    assert "for 1,024 steps (1,000 rounded up to whole rollouts of 2 envs × 16 steps)" in out


def test_train_checkpoints_every_10_updates_by_default(tiny_run) -> None:
    run, _ = tiny_run  # TINY sets no checkpoint.every_updates: 32 updates of 32 steps
    assert "every_updates: 10" in (run / "config.yaml").read_text()
    names = sorted(p.name for p in (run / "checkpoints").glob("ckpt-*"))
    assert names == [f"ckpt-{s:012d}" for s in (640, 960, 1024)]  # keep_last: 3


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


def test_eval_prints_a_labelled_table_and_writes_it_to_the_run(tiny_run) -> None:
    run, _ = tiny_run
    proc = cli("eval", str(run), "--episodes", "3")
    assert proc.returncode == 0, proc.stderr
    table = (run / "evaluation.txt").read_text()
    written = f"riskppo eval: written to {run / 'evaluation.json'} and evaluation.txt\n"
    assert proc.stdout == table + written  # what is printed is what is written
    ckpt = (run / "checkpoints" / "latest").read_text().strip()
    rows = dict(line.strip().split("  ", 1) for line in table.splitlines()[1:])
    assert table.splitlines()[0] == "riskppo eval: CartPole-v1"
    assert rows["checkpoint"].strip().startswith(f"{ckpt} (") and "—" in rows["split"]
    assert rows["episodes"].strip() == "3, deterministic policy"
    ev = json.loads((run / "evaluation.json").read_text())
    assert ev["episodes"] == 3 and ev["split"] is None and ev["checkpoint"] == ckpt
    assert float(rows["mean return"]) == pytest.approx(ev["return"]["mean"], rel=1e-3)


@pytest.mark.parametrize("command", [["eval"], ["backtest"], ["train", "--resume"]])
def test_a_missing_run_directory_is_one_line_and_exit_code_2(command, tmp_path: Path) -> None:
    proc = cli(*command, str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert str(tmp_path / "nope") in proc.stderr and "riskppo train" in proc.stderr
