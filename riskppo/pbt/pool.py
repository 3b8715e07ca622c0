"""The local PBT backend's rounds on the shared job runner (:mod:`riskppo.runs.jobs`), members
that survive each other's workers (R-PBT-5).

Each member's interval is one job on a local worker process. A worker that dies (OOM kill,
segfault, SIGKILL) costs only the interval it held: that member's :class:`MemberFailure` names
the signal or exit code, the worker is replaced, every other member keeps its result. A member
whose interval fails on a storage fault (see :mod:`riskppo.pbt.storage`) answers with that fault
(kind ``io``), so the scheduler can stop the population instead of blaming the member. Workers
die with the scheduler (Linux): a SIGKILLed scheduler leaves no worker writing into the run
directory that ``riskppo pbt --resume`` is about to continue.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal

from riskppo.pbt.member import IntervalResult, IntervalTask
from riskppo.pbt.storage import StorageFault, storage_fault
from riskppo.runs.jobs import Backend, Failed, Finished, JobRunner, open_runner, run_all


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


def run_checked(fn: TaskFn, task: IntervalTask) -> IntervalResult | StorageFault:
    """``fn(task)`` in a worker; a storage fault is the answer, not an error of the member's."""
    try:
        return fn(task)
    except Exception as exc:
        fault = storage_fault(exc)
        if fault is None:
            raise
        return fault


class WorkerPool:
    """At most ``workers`` local worker processes running ``fn`` (``run_interval``), on the
    shared runner: leaving the ``with`` block early ends every worker (its one stop path)."""

    def __init__(self, workers: int, fn: TaskFn) -> None:
        self.workers = max(1, workers)
        self.fn = fn
        self._opened: contextlib.AbstractContextManager[JobRunner] | None = None
        self._runner: JobRunner | None = None

    def __enter__(self) -> WorkerPool:
        self._opened = open_runner(Backend("local"), self.workers)
        self._runner = self._opened.__enter__()
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        assert self._opened is not None
        self._runner = None
        return self._opened.__exit__(*exc)

    def run(self, tasks: list[IntervalTask]) -> list[IntervalResult | MemberFailure]:
        """Run every task; a task's slot holds its result or its :class:`MemberFailure`."""
        assert self._runner is not None, "use the pool in a with block"
        outcomes = run_all(self._runner, functools.partial(run_checked, self.fn), tasks)
        return [_result(o, t) for o, t in zip(outcomes, tasks, strict=True)]


def _result(outcome: Finished | Failed, task: IntervalTask) -> IntervalResult | MemberFailure:
    """A member's interval as the scheduler records it."""
    if isinstance(outcome, Failed):
        return MemberFailure(task.member, outcome.kind, outcome.reason)
    if isinstance(outcome.value, StorageFault):
        fault = outcome.value
        return MemberFailure(task.member, "io", fault.describe(task.member_dir), fault)
    result: IntervalResult = outcome.value
    return result
