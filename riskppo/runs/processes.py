"""Worker processes that do not outlive the process that started them.

A pool worker blocks on its task queue or trains a cell; if its parent is killed (SIGTERM from a
scheduler, SIGKILL, a closed terminal) nothing tells it to stop, and it would train on,
orphaned, writing into a run directory that a ``--resume`` may already be using.
:func:`die_with_parent`, run first in every worker, asks the kernel to end it with its parent.

:func:`worker_setup` (in the parent) and :func:`start_worker` (first thing in each worker) do that
and give the worker the parent's terminal logging, so that its log records read like the parent's.
A task's warnings are caught in the worker (:func:`catching_warnings`) and shown by the parent
(:func:`reissue`), once however many workers raise them, in the parent's format.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from riskppo import logs

__all__ = [
    "PARENT_ENV",
    "PR_SET_PDEATHSIG",
    "CaughtWarning",
    "WorkerSetup",
    "catching_warnings",
    "child_env",
    "die_with_parent",
    "die_with_parent_if_asked",
    "reissue",
    "start_worker",
    "worker_setup",
]

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies; exit at once if the
    parent (pid ``parent``) is already gone. Elsewhere: nothing."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


# Set by a process for the riskppo commands it starts (riskppo universe's cells): the pid they
# die with. The command's CLI reads and removes it first thing (die_with_parent_if_asked).
PARENT_ENV = "RISKPPO_DIE_WITH_PARENT"


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a riskppo command this process starts as a subprocess: the command dies with
    this process (Linux), so a killed coordinator leaves no command training on, orphaned."""
    return {**env, PARENT_ENV: str(os.getpid())}


def die_with_parent_if_asked() -> None:
    """First thing in a riskppo command: die with the process that started it, where that
    process asked (:func:`child_env`). The variable is removed, so what this command starts in
    turn does not inherit it."""
    parent = os.environ.pop(PARENT_ENV, "")
    if parent.isdigit():
        die_with_parent(int(parent))


@dataclass(frozen=True)
class WorkerSetup:
    """What a spawned worker takes from the process that starts it: that process's pid (the
    worker dies with it) and its terminal logging (None: Python's defaults)."""

    parent: int
    logging: logs.LogSetup | None


def worker_setup() -> WorkerSetup:
    """This process's :class:`WorkerSetup`, for the workers it is about to spawn.

    The native kernel is loaded here first: where it is unavailable, its notice is then shown
    once, by this process, rather than once by every worker."""
    from riskppo.nn import native

    native.kernel()
    return WorkerSetup(parent=os.getpid(), logging=logs.current_setup())


def start_worker(setup: WorkerSetup) -> None:
    """First thing in a spawned worker: die with the parent, log as the parent does, and leave
    Ctrl-C to the parent (a terminal sends it to the whole process group; the parent ends its
    workers itself, and a worker's ``KeyboardInterrupt`` would only print a traceback)."""
    die_with_parent(setup.parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logs.apply(setup.logging)


@dataclass(frozen=True)
class CaughtWarning:
    """A warning raised in a worker, as the parent shows it: text, category (by module and
    qualified name: a class the parent has not imported, or a local one, must not break the
    pipe), where it was raised."""

    text: str
    module: str
    qualname: str
    filename: str
    lineno: int

    def category(self) -> type[Warning]:
        """The warning's class in this process, where its module is already imported here
        (nothing is imported for it); else ``UserWarning``."""
        found: Any = sys.modules.get(self.module)
        for part in self.qualname.split("."):
            found = getattr(found, part, None)
        return found if isinstance(found, type) and issubclass(found, Warning) else UserWarning


@contextlib.contextmanager
def catching_warnings() -> Iterator[list[CaughtWarning]]:
    """In a worker: collect the block's warnings (after the worker's own filters, which its
    parent's ``-W`` options reach) into the list it yields, filled when the block ends, however
    it ends."""
    caught: list[CaughtWarning] = []
    with warnings.catch_warnings(record=True) as records:
        try:
            yield caught
        finally:
            caught += [
                CaughtWarning(
                    str(r.message),
                    r.category.__module__,
                    r.category.__qualname__,
                    r.filename,
                    r.lineno,
                )
                for r in records
            ]


def reissue(caught: list[CaughtWarning], shown: set[tuple[str, str, str]]) -> None:
    """In the parent: show a worker's warnings through this process's filters and display, each
    text once: ``shown`` (one per pool) holds the texts and categories already shown, raised by
    another worker, an earlier task or another line."""
    for w in caught:
        key = (w.text, w.module, w.qualname)
        if key not in shown:
            shown.add(key)
            warnings.warn_explicit(w.text, w.category(), w.filename, w.lineno)
