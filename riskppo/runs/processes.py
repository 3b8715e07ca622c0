"""Worker processes that do not outlive the process that started them.

A pool worker blocks on its task queue or trains a cell; if its parent is killed (SIGTERM from a
scheduler, SIGKILL, a closed terminal) nothing tells it to stop, and it would train on,
orphaned, writing into a run directory that a ``--resume`` may already be using.
:func:`die_with_parent`, run first in every worker, asks the kernel to end it with its parent.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["PR_SET_PDEATHSIG", "die_with_parent"]

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
