"""Worker processes of the local PBT backend that survive each other's death (R-PBT-5).

A :class:`concurrent.futures.ProcessPoolExecutor` breaks as a whole when one worker dies (OOM
kill, segfault, SIGKILL): every pending future fails with ``BrokenProcessPool`` and the executor
takes no more work. Here each worker is a spawned process with its own pipe and runs one task at
a time, so the parent always knows whose task a dead worker held: that task alone fails (a
:class:`MemberFailure` naming the signal or exit code), the dead worker is replaced by a fresh
one on demand (the pool is rebuilt), and every other worker keeps its task and its result.
Workers are reused between rounds (torch is imported once per worker, not once per task).

A worker whose task fails on a storage fault (see :mod:`riskppo.pbt.storage`) answers with that
fault (kind ``io``), so the scheduler can stop the population instead of blaming the member. On
Linux a worker dies with the scheduler (``PR_SET_PDEATHSIG``): a SIGKILLed scheduler leaves no
worker writing into the run directory that ``riskppo pbt --resume`` is about to continue.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from riskppo.pbt.member import IntervalResult, IntervalTask
from riskppo.pbt.storage import StorageFault, storage_fault
from riskppo.runs.processes import (
    WorkerSetup,
    catching_warnings,
    reissue,
    start_worker,
    worker_setup,
)


@dataclasses.dataclass(frozen=True)
class MemberFailure:
    """A member's interval that did not produce a result: ``died`` (its worker process ended
    without answering), ``raised`` (an exception in the worker) or ``io`` (a storage fault,
    ``fault``: not the member's failure)."""

    member: int
    kind: Literal["died", "raised", "io"]
    reason: str
    fault: StorageFault | None = None


TaskFn = Callable[[IntervalTask], IntervalResult]


def describe_exit(exitcode: int | None) -> str:
    """``killed by SIGKILL`` for a negative exit code, ``exit code N`` otherwise."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _worker_main(conn: Connection, fn: TaskFn, setup: WorkerSetup) -> None:
    """Serve tasks until told to stop (``None``) or the parent goes away."""
    start_worker(setup)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        with catching_warnings() as caught:  # shown by the parent, once for all workers
            try:
                reply: tuple[str, Any] = ("ok", fn(task))
            except Exception as exc:  # a failing member must not end the worker or the population
                fault = storage_fault(exc)
                if fault is not None:
                    reply = ("io", fault)
                else:
                    reply = ("error", f"{exc!r}\n{traceback.format_exc(limit=8)}")
        conn.send((*reply, caught))


class _Worker:
    def __init__(self, ctx: Any, fn: TaskFn, setup: WorkerSetup) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc: BaseProcess = ctx.Process(
            target=_worker_main, args=(child, fn, setup), daemon=True
        )
        self.proc.start()
        child.close()  # only the worker holds its end: its death shows as EOF here
        self.slot: int | None = None  # index of the task it is running

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


class WorkerPool:
    """At most ``workers`` spawned worker processes running ``fn`` (``run_interval``)."""

    def __init__(self, workers: int, fn: TaskFn) -> None:
        self.workers = max(1, workers)
        self.fn = fn
        self.ctx = multiprocessing.get_context("spawn")  # fork is unsafe with torch threads
        self.setup = worker_setup()
        self.warned: set[tuple[str, str, str]] = set()  # the workers' warnings shown
        self.idle: list[_Worker] = []
        self.started: list[_Worker] = []  # every worker this pool started
        self.replaced = 0  # dead workers replaced so far

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        while self.idle:
            self.idle.pop().stop()

    def run(self, tasks: list[IntervalTask]) -> list[IntervalResult | MemberFailure]:
        """Run every task; a task's slot holds its result or its :class:`MemberFailure`."""
        out: list[IntervalResult | MemberFailure | None] = [None] * len(tasks)
        queue = list(range(len(tasks)))
        busy: list[_Worker] = []
        try:
            while queue or busy:
                while queue and len(busy) < self.workers:
                    slot = queue.pop(0)
                    busy.append(self._start(slot, tasks[slot]))
                ready = set(wait([w.conn for w in busy] + [w.proc.sentinel for w in busy]))
                for worker in [w for w in busy if w.conn in ready or w.proc.sentinel in ready]:
                    busy.remove(worker)
                    assert worker.slot is not None
                    out[worker.slot] = self._collect(worker, tasks[worker.slot])
        except BaseException:  # Ctrl-C, SIGTERM: what the workers train is not collected
            # every worker not idle, also one started or collected as the signal came
            for worker in self.started:
                if worker not in self.idle and worker.proc.is_alive():
                    worker.kill()
            raise
        return [r for r in out if r is not None]

    def _start(self, slot: int, task: IntervalTask) -> _Worker:
        """An idle worker (or a new one) running ``task``, the ``slot``-th of this batch."""
        if self.idle:
            worker = self.idle.pop()
        else:
            worker = _Worker(self.ctx, self.fn, self.setup)
            self.started.append(worker)
        worker.slot = slot
        worker.conn.send(task)
        return worker

    def _collect(self, worker: _Worker, task: IntervalTask) -> IntervalResult | MemberFailure:
        """The worker's answer; a dead worker is reaped (and replaced at the next task)."""
        try:
            status, payload, caught = worker.conn.recv()
        except (EOFError, OSError):  # the worker died without answering
            worker.proc.join()
            worker.conn.close()
            self.replaced += 1
            reason = f"worker process died ({describe_exit(worker.proc.exitcode)})"
            return MemberFailure(task.member, "died", reason)
        self.idle.append(worker)
        reissue(caught, self.warned)
        if status == "ok":
            return payload
        if status == "io":
            return MemberFailure(task.member, "io", payload.describe(task.member_dir), payload)
        return MemberFailure(task.member, "raised", str(payload).splitlines()[0])
