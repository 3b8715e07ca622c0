"""The local backend: jobs on spawned worker processes of this machine that survive each other's
death.

A :class:`concurrent.futures.ProcessPoolExecutor` breaks as a whole when one worker dies (OOM
kill, segfault, SIGKILL): every pending future fails and the executor takes no more work, and it
offers no public way to end its workers at once. Here each worker is a spawned process with its
own pipe and runs one job at a time, so the runner always knows whose job a dead worker held:
that job alone fails (:class:`~riskppo.runs.jobs.outcome.Failed`, ``died``, naming the signal or
exit code), the dead worker is replaced on demand, and every other worker keeps its job. Workers
are reused between jobs (torch is imported once per worker, not once per job).

A worker dies with the runner's process (``PR_SET_PDEATHSIG``, :mod:`riskppo.runs.processes`),
ignores Ctrl-C (the runner ends it) and takes SIGTERM as the runner's request to stop the job it
runs at a safe point: the job sees ``KeyboardInterrupt`` (a job that cannot stop cleanly is
simply killed; see :meth:`LocalRunner.stop`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from riskppo.runs.interrupt import Terminated
from riskppo.runs.jobs.outcome import (
    Failed,
    Job,
    Outcome,
    QueuedJobs,
    Reply,
    describe_exit,
    execute_split,
)
from riskppo.runs.processes import WorkerSetup, reissue, start_worker, worker_setup

__all__ = ["LocalRunner"]


def _terminated(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated


def _worker_main(conn: Connection, setup: WorkerSetup) -> None:
    """Serve jobs until told to stop (``None``), the runner goes away or SIGTERM stops it."""
    start_worker(setup)
    signal.signal(signal.SIGTERM, _terminated)  # the runner's stop: the job stops at a safe point
    try:
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                return
            if job is None:
                return
            reply, error = execute_split(*job)
            conn.send(reply)
            try:
                conn.send(error)
            except Exception:  # the job's exception does not pickle: its text has travelled
                conn.send(None)
    except KeyboardInterrupt:  # stopped by the runner: nobody waits for an answer
        return


class _Worker:
    def __init__(self, ctx: Any, setup: WorkerSetup) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc: BaseProcess = ctx.Process(target=_worker_main, args=(child, setup), daemon=True)
        self.proc.start()
        child.close()  # only the worker holds its end: its death shows as EOF here
        self.job: Job | None = None

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(timeout=10)
        self.kill()


class LocalRunner(QueuedJobs):
    """At most ``workers`` spawned worker processes; jobs queue until one is free."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self.cpus = os.cpu_count() or 1
        self._ctx = multiprocessing.get_context("spawn")  # fork is unsafe with torch threads
        self._setup = worker_setup()
        super().__init__()
        self._idle: list[_Worker] = []
        self._busy: list[_Worker] = []
        self._started: list[_Worker] = []  # every live worker this runner started
        self.warned: set[tuple[str, str, str]] = set()  # the workers' warnings shown
        self.replaced = 0  # dead workers replaced so far

    def _in_flight(self) -> int:
        return len(self._busy)

    def cancel(self, name: str) -> None:
        """Drop job ``name``: unqueued, or its worker killed; it has no outcome."""
        self._queue = deque(j for j in self._queue if j.name != name)
        for worker in [w for w in self._busy if w.job is not None and w.job.name == name]:
            self._busy.remove(worker)
            self._reap(worker)
        self._fill()  # its worker's place goes to the next queued job

    def stop(self, grace: float = 0.0) -> None:
        """End every job now: the queue is dropped; with ``grace`` each running job is asked to
        stop (SIGTERM to its worker) and given that many seconds, then killed."""
        self._queue.clear()
        running = [w for w in self._started if w not in self._idle]
        try:
            if grace > 0:
                for worker in running:
                    with contextlib.suppress(OSError):
                        os.kill(worker.proc.pid or 0, signal.SIGTERM)
                deadline = time.monotonic() + grace
                for worker in running:
                    worker.proc.join(max(0.0, deadline - time.monotonic()))
        finally:  # also on a second Ctrl-C while the jobs stop: they are killed now
            for worker in running:
                self._reap(worker)
            self._busy.clear()
            self._done.clear()
            self.close()

    def close(self) -> None:
        """End the idle workers (after the last job)."""
        while self._idle:
            worker = self._idle.pop()
            worker.stop()
            self._started.remove(worker)

    def _fill(self) -> None:
        while self._queue and len(self._busy) < self.workers:
            if self._idle:
                worker = self._idle.pop()
            else:
                worker = _Worker(self._ctx, self._setup)
                self._started.append(worker)
            job = self._queue.popleft()
            worker.job = job
            worker.conn.send((job.fn, job.arg))
            self._busy.append(worker)

    def _wait(self) -> None:
        """Block until a running job ends; its outcome goes to ``_done``."""
        busy = self._busy
        ready = set(wait([w.conn for w in busy] + [w.proc.sentinel for w in busy]))
        for worker in [w for w in busy if w.conn in ready or w.proc.sentinel in ready]:
            busy.remove(worker)
            self._done.append(self._collect(worker))
        self._fill()

    def _collect(self, worker: _Worker) -> Outcome:
        """The worker's answer; a dead worker is reaped (and replaced at the next job)."""
        assert worker.job is not None
        name = worker.job.name
        try:
            reply: Reply = worker.conn.recv()
            try:
                error = worker.conn.recv()
            except (EOFError, OSError):
                raise
            except Exception:  # the exception does not rebuild here: its text came with the reply
                error = None
        except (EOFError, OSError):  # the worker died without answering
            self._reap(worker)
            self.replaced += 1
            reason = f"worker process died ({describe_exit(worker.proc.exitcode)})"
            return Failed(name, "died", reason)
        self._idle.append(worker)
        reissue(reply.caught, self.warned)
        return reply.with_error(error).outcome(name)

    def _reap(self, worker: _Worker) -> None:
        worker.kill()
        if worker in self._started:
            self._started.remove(worker)
