"""Module-level job functions for the job runner's tests: they travel by reference to local
worker processes and Ray tasks, so they live in an importable module, not in a test file."""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path


class Unpicklable(Exception):
    """An exception whose class cannot be rebuilt from its args (a required keyword)."""

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(f"{message} at {where}")


def square(x: int) -> int:
    return x * x


def fail(message: str) -> None:
    raise ValueError(message)


def fail_unpicklable(message: str) -> None:
    raise Unpicklable(message, where="the worker")


def die(_: object) -> None:
    """The worker process dies without answering, as an OOM kill ends it."""
    os.kill(os.getpid(), signal.SIGKILL)


def warn(x: int) -> int:
    warnings.warn("a job's warning", UserWarning, stacklevel=1)
    return x


def pid_then_sleep(path: str) -> None:
    """Write this process's pid to ``path``, then train for a long time."""
    Path(path).write_text(str(os.getpid()))
    time.sleep(600)


def stop_at_a_safe_point(path: str) -> str:
    """Write this process's pid to ``path``, then wait; a stop request writes ``path.stopped``
    before the job ends, as a training saves its checkpoint."""
    Path(path).write_text(str(os.getpid()))
    try:
        for _ in range(6000):  # short sleeps: Ray's stop request arrives between two bytecodes
            time.sleep(0.1)
    except KeyboardInterrupt:
        Path(path + ".stopped").write_text("saved")
        raise
    return "never stopped"
