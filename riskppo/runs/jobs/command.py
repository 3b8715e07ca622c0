"""A command line as a job: ``python -m riskppo.cli train …`` run by a worker, on either backend.

:func:`run_command` starts the command with the worker's own interpreter (the node's riskppo),
its output appended to a log file, in a session of its own (a terminal's Ctrl-C reaches only the
process that runs the jobs, which stops each job once) and dying with the worker (Linux), and
returns its exit code. A stop request to the job (``KeyboardInterrupt`` in the worker: the
runner's graceful stop) is passed on to the command as SIGTERM — a riskppo command then stops at
its next checkpoint — and waited for; the runner kills the worker, and with it the command, when
its grace period is over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from riskppo.runs.processes import child_env

__all__ = ["Command", "run_command"]

POLL_S = 0.2


@dataclass(frozen=True)
class Command:
    """``python ARGS…`` (``args`` after the interpreter, e.g. ``("-m", "riskppo.cli", …)``)
    with ``env`` added to the worker's environment, stdout and stderr appended to ``log``."""

    args: tuple[str, ...]
    log: Path
    env: Mapping[str, str] = field(default_factory=dict)


def run_command(cmd: Command) -> int:
    """Run ``cmd`` to its end; its exit code (negative: the signal that ended it)."""
    env = child_env({**os.environ, **cmd.env})  # the command dies with this worker
    with open(cmd.log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, *cmd.args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            # polled: Ray's stop request (an exception raised between two bytecodes) would wait
            # for a blocking wait() to return
            while (code := proc.poll()) is None:
                time.sleep(POLL_S)
            return code
        except KeyboardInterrupt:  # the runner's stop: the command stops at its own safe point
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            raise
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
