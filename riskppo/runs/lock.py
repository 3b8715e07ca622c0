"""One writer per run directory (R-REL-9).

A process that writes into a run directory holds an exclusive ``fcntl.flock`` on
``RUN_DIR/.lock`` for as long as it writes: ``riskppo train`` (new runs and ``--resume``),
``riskppo eval`` and ``riskppo backtest`` (they write their reports into the run) and
``riskppo pbt`` (on the population's directory). A second process on the same directory is
refused at once with a :class:`RunLockError` naming the directory and the holder; nothing in
the directory is touched. The operating system drops the lock when the holder's process ends,
however it ends (SIGKILL included), so ``riskppo train --resume`` works right after a crash. The
``.lock`` file itself stays; its content (the holder's pid and command) is only informative.
A ``.lock`` that is a symlink, a hard link or not a regular file is refused
(:class:`~riskppo.safefs.UnsafePathError`) before anything is written: the run directory may
come from someone else.

The lock is re-entrant within a process (training a trading run writes its backtest report
while it holds the lock). ``flock`` locks are advisory and local: they do not guard against a
process that ignores them, nor across machines on some network file systems.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from riskppo.safefs import open_nofollow

LOCK_NAME = ".lock"

_held: dict[Path, tuple[int, int]] = {}  # resolved run dir → (fd, depth)
_mutex = threading.Lock()


class RunLockError(RuntimeError):
    """The run directory is locked by another process."""


@contextmanager
def lock_run(run_dir: Path, what: str = "riskppo") -> Iterator[Path]:
    """Hold the exclusive lock on ``run_dir`` (created if missing) for the ``with`` block.

    ``what`` describes the holder (e.g. ``"riskppo train"``) in the message a refused process
    prints. Raises :class:`RunLockError` at once if another process holds the lock.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    key = run_dir.resolve()
    with _mutex:
        if key in _held:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
        else:
            _held[key] = (_acquire(run_dir, what), 1)
    try:
        yield run_dir
    finally:
        with _mutex:
            fd, depth = _held[key]
            if depth > 1:
                _held[key] = (fd, depth - 1)
            else:
                del _held[key]
                os.close(fd)  # releases the flock


def _acquire(run_dir: Path, what: str) -> int:
    path = run_dir / LOCK_NAME
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise RunLockError(
            f"{run_dir} is in use by another process ({holder}); wait for it to finish or stop "
            "it, or use another run directory"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    args = " ".join(sys.argv[1:])
    holder = f"pid {os.getpid()}: {what}" + (f" (arguments: {args})" if args else "")
    os.pwrite(fd, holder.encode(), 0)
    return fd


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return " ".join(text.split()) or "holder unknown"
