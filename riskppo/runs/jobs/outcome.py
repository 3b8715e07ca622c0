"""What a job is and what comes back from one, on either backend.

A job is a named call ``fn(arg)`` of a module-level function (it travels by reference, so the
machine that runs it must have riskppo installed). :func:`execute` runs it where it runs (a
local worker process or a Ray task) and answers with a :class:`Reply`: the value, or the error
(its one line, its traceback and, where it travels, the exception itself), with the warnings the
call raised — the runner shows those once, in the process that submitted the job. The runner
turns a reply into the job's :class:`Outcome`: :class:`Finished` or :class:`Failed` (the call
raised, or the process running it died: a SIGKILL, an OOM kill, a lost node).
"""

from __future__ import annotations

import signal
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from riskppo.runs.processes import CaughtWarning, catching_warnings

__all__ = [
    "Failed",
    "Finished",
    "Job",
    "JobFailed",
    "Outcome",
    "QueuedJobs",
    "RemoteTraceback",
    "Reply",
    "describe_exit",
    "execute",
    "execute_split",
]


@dataclass(frozen=True)
class Job:
    """``fn(arg)``, known to the runner by ``name`` (unique among its pending jobs)."""

    name: str
    fn: Callable[[Any], Any]
    arg: Any


@dataclass(frozen=True)
class Finished:
    """A job that returned ``value``."""

    name: str
    value: Any


class JobFailed(RuntimeError):
    """A failed job whose own exception did not come back (its worker died, or the exception
    does not travel between processes)."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in another process, as its ``__cause__``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Failed:
    """A job that did not return: it ``raised`` (``reason``: the exception's one line) or the
    process running it ``died`` (``reason``: how, e.g. ``worker process died (killed by
    SIGKILL)``). ``error``: the job's own exception where it came back; ``trace``: its
    traceback in the worker."""

    name: str
    kind: Literal["raised", "died"]
    reason: str
    error: BaseException | None = None
    trace: str = ""

    def exception(self) -> BaseException:
        """The exception to raise for this failure in the submitting process: the job's own
        (its worker's traceback as the cause) or a :class:`JobFailed` naming the job."""
        exc = self.error if self.error is not None else JobFailed(f"{self.name}: {self.reason}")
        if self.trace:
            exc.__cause__ = RemoteTraceback(self.trace)
        return exc


Outcome = Finished | Failed


class QueuedJobs:
    """What both backends share: jobs queue here until a worker is free (``_fill``), outcomes
    wait in ``_done`` until taken; a backend keeps its running jobs and says how many
    (``_in_flight``) and blocks until one finishes (``_wait``)."""

    def __init__(self) -> None:
        self._queue: deque[Job] = deque()
        self._done: deque[Outcome] = deque()

    def _in_flight(self) -> int:
        raise NotImplementedError

    def _fill(self) -> None:
        raise NotImplementedError

    def _wait(self) -> None:
        raise NotImplementedError

    @property
    def pending(self) -> int:
        """Jobs submitted whose outcome has not been taken yet."""
        return len(self._queue) + self._in_flight() + len(self._done)

    def submit(self, name: str, fn: Callable[[Any], Any], arg: Any) -> None:
        """Queue ``fn(arg)`` as job ``name``; it starts as soon as a worker is free."""
        self._queue.append(Job(name, fn, arg))
        self._fill()

    def results(self) -> Iterator[Outcome]:
        """Each pending job's outcome as it completes, until none is pending (jobs submitted
        meanwhile included)."""
        while self.pending:
            if not self._done:
                self._wait()
            yield self._done.popleft()


@dataclass(frozen=True)
class Reply:
    """A worker's answer for one job: ``ok`` with ``value``, or not with ``error`` (None when
    it cannot travel), ``reason`` and ``trace``; ``caught``: the call's warnings."""

    ok: bool
    value: Any = None
    error: BaseException | None = None
    reason: str = ""
    trace: str = ""
    caught: list[CaughtWarning] = field(default_factory=list)

    def outcome(self, name: str) -> Outcome:
        if self.ok:
            return Finished(name, self.value)
        return Failed(name, "raised", self.reason, self.error, self.trace)

    def split(self) -> tuple[Reply, BaseException | None]:
        """This reply without its exception, and the exception: they travel back apart, so
        that an exception which does not rebuild in the other process (a class whose
        constructor takes other arguments) loses only itself, not the reply."""
        return Reply(self.ok, self.value, None, self.reason, self.trace, self.caught), self.error

    def with_error(self, error: BaseException | None) -> Reply:
        return Reply(self.ok, self.value, error, self.reason, self.trace, self.caught)


def execute(fn: Callable[[Any], Any], arg: Any) -> Reply:
    """Run ``fn(arg)`` here, in a worker: its value or its error, and its warnings (after this
    process's own filters). An ``Exception`` becomes the reply; ``KeyboardInterrupt`` (the
    runner's stop) passes."""
    error: Exception | None = None
    with catching_warnings() as caught:
        try:
            value = fn(arg)
        except Exception as exc:  # a failing job must not end its worker
            error = exc
            trace = traceback.format_exc(limit=12)
    if error is None:
        return Reply(True, value, caught=caught)
    reason = (repr(error).splitlines() or [type(error).__name__])[0]
    return Reply(False, None, error, reason, trace, caught)


def execute_split(fn: Callable[[Any], Any], arg: Any) -> tuple[Reply, BaseException | None]:
    """:func:`execute`, its reply and its exception apart (:meth:`Reply.split`)."""
    return execute(fn, arg).split()


def describe_exit(exitcode: int | None) -> str:
    """``killed by SIGKILL`` for a negative exit code, ``exit code N`` otherwise."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"
