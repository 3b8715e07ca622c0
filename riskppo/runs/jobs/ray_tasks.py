"""The Ray backend: jobs as Ray Core tasks, on a local Ray instance or a Ray cluster.

Each job is one task (one CPU, no automatic retry: a job whose worker dies is reported like a
local worker's death, and the caller decides — walk-forward and universe resume it). The task
runs :func:`~riskppo.runs.jobs.outcome.execute` (through :func:`interruptible_job`, so that a
graceful stop reaches it), and a job's value, error and warnings come back as they do from a
local worker. Functions travel by reference: every node needs riskppo (and
its dependencies) installed, and the run directory must be on a file system every node sees
at the same path — jobs read and write their files there, not through Ray's object store.

:func:`ray_connection` connects: ``address`` None starts a local instance of ``num_cpus`` CPUs
(never someone else's: ``address="local"``), otherwise it joins that cluster (``"auto"``: the
one ``ray start --head`` started on this machine; ``"host:port"``; ``"ray://host:10001"``). A
Ray instance this process started is shut down when the connection closes. Without Ray
installed the error is one line (:class:`~riskppo.config.ConfigError`) saying what to install.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import logging
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from riskppo.config import ConfigError
from riskppo.runs.jobs.outcome import Failed, Job, Outcome, QueuedJobs, Reply, execute_split
from riskppo.runs.processes import reissue

__all__ = ["RayRunner", "import_ray", "interruptible_job", "ray_connection"]

INSTALL_HINT = 'pip install "riskppo[ray]" (on this machine and on every node of the cluster)'


def import_ray() -> Any:
    """The ``ray`` module; :class:`ConfigError` (one line) where it is not installed."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"the Ray backend needs Ray: {INSTALL_HINT}") from None
    return ray


@contextmanager
def ray_connection(address: str | None, num_cpus: int | None) -> Iterator[Any]:
    """Ray, connected (see the module docstring); this process's SIGTERM handler (which
    ``ray.init`` replaces) comes back on exit. Where Ray is already initialised in this
    process it is used as it is and left running."""
    ray = import_ray()
    started = not ray.is_initialized()
    previous = signal.getsignal(signal.SIGTERM)
    if started:
        local = address is None
        ray.init(
            address="local" if local else address,
            num_cpus=num_cpus if local else None,
            include_dashboard=False,
            log_to_driver=False,  # a job's errors and warnings come back with its outcome
            logging_level=logging.WARNING,
        )
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


class StopFlag:
    """The runner's request to its running jobs to stop at a safe point: one flag, set once
    (:meth:`RayRunner.stop`), that each job's watcher thread waits on. A Ray actor (async,
    no CPU), so that it reaches jobs on every node.

    Not ``ray.cancel(force=False)``: that simulates SIGINT in the task too, but its
    cancellation can race the task's own reply in the submitting process, and Ray then
    aborts that process ("Tried to complete task that was not pending", seen with Ray 2.60 on
    two cores): the driver, mid-stop, and with it the Ray instance it started, whose jobs are
    then killed before they have saved."""

    def __init__(self) -> None:
        self._asked = asyncio.Event()

    async def set(self) -> None:
        self._asked.set()

    async def wait(self, timeout: float) -> bool:
        """True once the stop is asked; False after ``timeout`` seconds without it."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._asked.wait(), timeout)
        return self._asked.is_set()


def _watch(ray: Any, stop: Any, done: threading.Event, lock: threading.Lock) -> None:
    """Until the job is done: wait for the stop request, then raise ``KeyboardInterrupt`` in
    the job (the main thread, as Ctrl-C would). Ends quietly when the runner is gone."""
    while not done.is_set():
        try:
            asked = ray.get(stop.wait.remote(5.0))
        except Exception:  # the runner closed (its actor is gone): nobody can ask any more
            return
        if asked:
            with lock:
                if not done.is_set():
                    _thread.interrupt_main()
            return


def interruptible_job(
    fn: Callable[[Any], Any], arg: Any, stop: Any
) -> tuple[Reply, BaseException | None]:
    """:func:`~riskppo.runs.jobs.outcome.execute_split` in a Ray worker, with a thread that
    turns the runner's :class:`StopFlag` into ``KeyboardInterrupt`` in the job, which may
    save before it ends (a job that is stopped replies "stopped"; nobody reads it).

    Python's ``KeyboardInterrupt`` handler is put in place for the job: a worker inherits an
    ignored SIGINT from the process that started Ray — a driver started in the background by a
    shell (``riskppo universe ... &`` in a script) — and the request (a simulated SIGINT) would
    then never reach the job, which would lose its work when the grace ends."""
    import ray

    main = threading.current_thread() is threading.main_thread()
    ignored = main and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    done, lock = threading.Event(), threading.Lock()
    if main:
        threading.Thread(target=_watch, args=(ray, stop, done, lock), daemon=True).start()
    try:
        try:
            return execute_split(fn, arg)
        finally:
            with lock:
                done.set()
    except KeyboardInterrupt:
        return Reply(False, reason="stopped by the runner"), None
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _cluster_cpus(ray: Any) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class RayRunner(QueuedJobs):
    """At most ``workers`` jobs in flight as Ray tasks (default: the cluster's CPUs); the rest
    queue here. Open with :meth:`open`, or on an existing connection."""

    def __init__(self, ray: Any, workers: int | None) -> None:
        self._ray = ray
        self.cpus = _cluster_cpus(ray)
        self.workers = max(1, workers or self.cpus)
        self._task = ray.remote(num_cpus=1, max_retries=0, num_returns=2)(interruptible_job)
        self._stop_flag = ray.remote(num_cpus=0)(StopFlag).remote()
        super().__init__()
        self._running: dict[Any, tuple[Job, Any]] = {}  # reply's ObjectRef → job, error's ref
        self.warned: set[tuple[str, str, str]] = set()
        self._close: Callable[[], None] = lambda: None

    @classmethod
    def open(cls, address: str | None, workers: int | None) -> RayRunner:
        """A runner on a fresh connection (:func:`ray_connection`), closed by :meth:`close`."""
        conn = ray_connection(address, workers)
        ray = conn.__enter__()
        try:
            runner = cls(ray, workers)
        except BaseException:
            conn.__exit__(None, None, None)
            raise

        def close() -> None:
            conn.__exit__(None, None, None)

        runner._close = close
        return runner

    def _in_flight(self) -> int:
        return len(self._running)

    def cancel(self, name: str) -> None:
        self._queue = deque(j for j in self._queue if j.name != name)
        for ref, (job, _) in list(self._running.items()):
            if job.name == name:
                del self._running[ref]
                self._ray.cancel(ref, force=True)
        self._fill()

    def stop(self, grace: float = 0.0) -> None:
        """End every job: the queue is dropped; with ``grace`` each running task is asked to
        stop (``KeyboardInterrupt`` in the task) and given that many seconds, then its worker
        is killed."""
        self._queue.clear()
        refs = late = list(self._running)
        try:
            if grace > 0 and refs:
                self._stop_flag.set.remote()
                _, late = self._ray.wait(refs, num_returns=len(refs), timeout=grace)
        finally:  # also on a second Ctrl-C while the jobs stop: they are killed now
            for ref in late:
                self._ray.cancel(ref, force=True)
            self._running.clear()
            self._done.clear()
            self.close()

    def close(self) -> None:
        close, self._close = self._close, lambda: None
        with contextlib.suppress(Exception):  # Ray may be shut down already
            self._ray.kill(self._stop_flag)
        close()

    def _fill(self) -> None:
        while self._queue and len(self._running) < self.workers:
            job = self._queue.popleft()
            reply, error = self._task.remote(job.fn, job.arg, self._stop_flag)
            self._running[reply] = (job, error)

    def _wait(self) -> None:
        ready, _ = self._ray.wait(list(self._running), num_returns=1)
        for ref in ready:
            job, error = self._running.pop(ref)
            self._done.append(self._collect(job, ref, error))
        self._fill()

    def _collect(self, job: Job, ref: Any, error_ref: Any) -> Outcome:
        try:
            reply: Reply = self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:  # its worker or node died, or it was cancelled
            line = (str(exc).strip().splitlines() or [""])[0]
            return Failed(job.name, "died", f"Ray task failed ({type(exc).__name__}: {line})")
        try:
            error = self._ray.get(error_ref)
        except Exception:  # the exception does not rebuild here: its text came with the reply
            error = None
        reissue(reply.caught, self.warned)
        return reply.with_error(error).outcome(job.name)
