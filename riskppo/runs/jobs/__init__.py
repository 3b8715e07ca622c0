"""One job runner for the commands that run many independent jobs — walk-forward cells,
universe cells, PBT members' intervals — on local worker processes or on a Ray cluster.

::

    with open_runner(Backend("ray", address="auto"), workers=None) as runner:
        for job in jobs:
            runner.submit(job.name, run_cell, job)  # a module-level function and its argument
        for outcome in runner.results():            # as they complete; submit more meanwhile
            ...                                     # Finished(name, value) | Failed(name, …)

A job is ``fn(arg)``; its value comes back, or its error (the job's own exception where it
travels, with its traceback), or word that the process running it died — per job: one dead
worker costs its own job only. Warnings a job raises are shown once, by the submitting process.

**One stop path.** Whatever leaves the ``with`` block early — Ctrl-C, SIGTERM (raised as
:class:`~riskppo.runs.interrupt.Terminated` while the block runs), an error in the caller — ends
every job before it propagates (:meth:`JobRunner.stop`): killed at once, or with ``stop_grace``
asked to stop first (``KeyboardInterrupt`` in the job) and killed when the grace is over. Local
workers die with the process that started them, however it ends (Linux), so a SIGKILLed run
leaves no worker writing into a directory a ``--resume`` is about to use; a Ray cluster ends the
tasks of a driver that died.

Backends: :mod:`~riskppo.runs.jobs.local` (spawned processes, the default) and
:mod:`~riskppo.runs.jobs.ray_tasks` (Ray Core tasks). A job's result must not depend on where
it ran: jobs seed themselves and set their own thread counts.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from riskppo.config import ConfigError
from riskppo.runs.interrupt import sigterm_as_interrupt
from riskppo.runs.jobs.command import Command, run_command
from riskppo.runs.jobs.local import LocalRunner
from riskppo.runs.jobs.outcome import (
    Failed,
    Finished,
    JobFailed,
    Outcome,
    RemoteTraceback,
    describe_exit,
)
from riskppo.runs.jobs.ray_tasks import INSTALL_HINT, RayRunner, ray_connection

__all__ = [
    "BACKENDS",
    "LOCAL",
    "Backend",
    "Command",
    "Failed",
    "Finished",
    "JobFailed",
    "JobRunner",
    "LocalRunner",
    "Outcome",
    "RayRunner",
    "RemoteTraceback",
    "describe_exit",
    "open_runner",
    "ray_connection",
    "run_all",
    "run_command",
]

BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class Backend:
    """Where jobs run: ``local`` worker processes, or ``ray`` tasks — on a local Ray instance
    (``address`` None) or on the cluster at ``address`` (``auto``, ``host:port``,
    ``ray://host:10001``)."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in BACKENDS:
            raise ConfigError(f"backend {self.kind!r}: choose one of {', '.join(BACKENDS)}")
        if self.address is not None and self.kind != "ray":
            raise ConfigError("--ray-address needs --backend ray")
        if self.kind == "ray" and importlib.util.find_spec("ray") is None:
            raise ConfigError(f"the Ray backend needs Ray: {INSTALL_HINT}")  # before any file

    @property
    def label(self) -> str:
        """How the wall-time line names it: ``worker process(es)`` or ``Ray task(s)``."""
        return "Ray task" if self.kind == "ray" else "worker process"


LOCAL = Backend()  # the default: this machine's worker processes


class JobRunner(Protocol):
    """What both backends offer (see the module docstring)."""

    workers: int  # jobs run at a time
    cpus: int  # CPUs of the machine or cluster the jobs run on

    @property
    def pending(self) -> int: ...

    def submit(self, name: str, fn: Callable[[Any], Any], arg: Any) -> None: ...

    def results(self) -> Iterator[Outcome]: ...

    def cancel(self, name: str) -> None: ...

    def stop(self, grace: float = 0.0) -> None: ...

    def close(self) -> None: ...


@contextlib.contextmanager
def open_runner(
    backend: Backend = LOCAL, workers: int | None = None, *, stop_grace: float = 0.0
) -> Iterator[JobRunner]:
    """A runner on ``backend`` running at most ``workers`` jobs at a time (None: every CPU of
    this machine, or of the Ray cluster). Leaving the block early stops every job (the one stop
    path, ``stop_grace`` seconds for each to stop at a safe point); leaving it normally ends
    the idle workers. SIGTERM raises :class:`~riskppo.runs.interrupt.Terminated` inside."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None  # ray.init replaces it
    runner: JobRunner
    try:
        if backend.kind == "ray":
            runner = RayRunner.open(backend.address, workers)
        else:
            runner = LocalRunner(workers or os.cpu_count() or 1)
        with sigterm_as_interrupt():
            try:
                yield runner
            except BaseException:
                runner.stop(stop_grace)
                raise
        runner.close()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_all(runner: JobRunner, fn: Callable[[Any], Any], args: list[Any]) -> list[Outcome]:
    """``fn`` on each of ``args`` (jobs named by their index), the outcomes in ``args``' order."""
    for i, arg in enumerate(args):
        runner.submit(str(i), fn, arg)
    out: dict[str, Outcome] = {o.name: o for o in runner.results()}
    return [out[str(i)] for i in range(len(args))]
