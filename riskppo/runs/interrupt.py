"""Stop training at a safe point on Ctrl-C (SIGINT) or SIGTERM.

:func:`stop_on_signals` replaces the two handlers while a run trains: the first signal only
records itself (:class:`StopRequest`) and writes one notice, so the training loop can finish
the current update, save a checkpoint and return; a second signal raises
``KeyboardInterrupt`` at once, as Python's default Ctrl-C does. The previous handlers come
back on exit. The notice is written with ``os.write`` on stderr: a handler may run while the
main code is inside ``print``, and a buffered write from the handler could then fail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

__all__ = [
    "HANDLED_SIGNALS",
    "StopRequest",
    "Terminated",
    "interrupt_signal",
    "signal_name",
    "sigterm_as_interrupt",
    "stop_on_signals",
]

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class StopRequest:
    """The first stop signal received, if any (``signum``: e.g. ``signal.SIGINT``)."""

    signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """The shell's status for a process stopped by the signal: 128 + its number."""
        return 128 + (self.signum if self.signum is not None else signal.SIGINT)


def signal_name(signum: int) -> str:
    """``SIGINT`` as a user presses it (``Ctrl-C``), other signals by name."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


@contextmanager
def stop_on_signals(notice: str) -> Iterator[StopRequest]:
    """Record the first SIGINT/SIGTERM in the yielded :class:`StopRequest` and write
    ``notice`` (``{signal}`` is replaced by the signal's name) as one line on stderr; a second
    one raises ``KeyboardInterrupt``. Outside the main thread (where Python delivers no
    signals) nothing is installed and the request never fires."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.signum = signum
        line = notice.replace("{signal}", signal_name(signum)) + "\n"
        with contextlib.suppress(OSError, ValueError):  # no usable stderr: it still counts
            os.write(sys.stderr.fileno(), line.encode())

    previous = {s: signal.signal(s, handler) for s in HANDLED_SIGNALS}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class Terminated(KeyboardInterrupt):
    """SIGTERM raised as Ctrl-C raises ``KeyboardInterrupt`` (:func:`sigterm_as_interrupt`)."""

    signum = signal.SIGTERM


def interrupt_signal(exc: KeyboardInterrupt) -> int:
    """The signal behind a ``KeyboardInterrupt``: SIGTERM for :class:`Terminated`, else SIGINT."""
    return int(getattr(exc, "signum", signal.SIGINT))


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM (a scheduler's stop, ``kill``, ``timeout``) raises
    :class:`Terminated` in the main thread, so code that stops its workers on Ctrl-C does the
    same on SIGTERM. Outside the main thread nothing is installed. The previous handler comes
    back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
