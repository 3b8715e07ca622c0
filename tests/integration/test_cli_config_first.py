"""A mistyped config key is answered before torch, pandas or matplotlib load (seconds of
imports): each command reads and checks its config first. A fresh interpreter runs the CLI's
``main`` with the bad arguments and reports the error line and which heavy modules it loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "pandas", "matplotlib")

SCRIPT = """
import contextlib, io, json, sys
from riskppo.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:  # --help
        code = exc.code
print(json.dumps({"code": code, "err": err.getvalue(),
                  "loaded": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


def run_cli(*argv: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "command",
    [
        ["train"],
        ["record", "demos.safetensors"],
        ["walkforward"],
        ["universe"],
        ["pbt"],
    ],
    ids=lambda command: command[0],
)
def test_a_mistyped_key_is_one_line_before_torch_loads(command: list[str]) -> None:
    """Mutation check: importing :mod:`riskppo.cli.runner` before the config is read in
    ``cmd_train`` (or at the top of ``riskppo/cli/main.py``) makes this fail."""
    result = run_cli(*command, "--set", "ppo.learnig_rate=1")
    assert result["code"] == 2
    assert result["err"] == (
        "riskppo: configuration error: invalid configuration: ppo.learnig_rate: unknown key; "
        "did you mean ppo.learning_rate? (got 1)\n"
    )
    assert result["loaded"] == []


@pytest.mark.parametrize(
    "argv", [["--help"], ["train", "--help"], ["eval", "--help"]], ids=" ".join
)
def test_help_loads_no_heavy_library(argv: list[str]) -> None:
    result = run_cli(*argv)
    assert result["code"] == 0
    assert result["loaded"] == []
