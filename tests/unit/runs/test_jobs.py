"""The job runner on both backends, with real worker processes and a real local Ray instance:
each job's outcome comes back (its value, its own exception, or its worker's death — which
costs that job alone), warnings are shown once, and the one stop path leaves no job running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from riskppo.config import ConfigError
from riskppo.runs.jobs import (
    Backend,
    Failed,
    Finished,
    JobFailed,
    RemoteTraceback,
    open_runner,
)
from tests import job_functions as jf
from tests.processes import alive


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend: local worker processes, or tasks on the session's local Ray instance."""
    if request.param == "ray":
        request.getfixturevalue("local_ray")
    return Backend(request.param)


def test_each_job_comes_back_and_a_dead_worker_costs_only_its_own(backend: Backend) -> None:
    with open_runner(backend, 2) as runner:
        for i in range(3):
            runner.submit(f"sq{i}", jf.square, i)
        runner.submit("bad", jf.fail, "no data")
        runner.submit("dead", jf.die, None)
        runner.submit("odd", jf.fail_unpicklable, "odd")
        runner.submit("after", jf.square, 7)
        got = {o.name: o for o in runner.results()}
        assert runner.pending == 0
    assert [got[f"sq{i}"] for i in range(3)] == [Finished(f"sq{i}", i * i) for i in range(3)]
    assert got["after"] == Finished("after", 49)  # the dead worker was replaced

    bad = got["bad"]
    assert isinstance(bad, Failed) and bad.kind == "raised"
    assert bad.reason == "ValueError('no data')"
    exc = bad.exception()  # the job's own exception, its traceback in the worker as the cause
    assert type(exc) is ValueError and str(exc) == "no data"
    assert isinstance(exc.__cause__, RemoteTraceback) and "in fail" in str(exc.__cause__)

    odd = got["odd"]  # an exception that does not rebuild here: its line still comes back
    assert isinstance(odd, Failed) and odd.kind == "raised" and odd.error is None
    assert odd.reason.startswith("Unpicklable(") and "odd at the worker" in odd.reason
    assert isinstance(odd.exception(), JobFailed)

    dead = got["dead"]
    assert isinstance(dead, Failed) and dead.kind == "died"
    if backend.kind == "local":
        assert dead.reason == "worker process died (killed by SIGKILL)"
    else:
        assert dead.reason.startswith("Ray task failed (")


def test_a_jobs_warnings_are_shown_once_by_the_submitting_process(backend: Backend) -> None:
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with open_runner(backend, 2) as runner:
            for i in range(4):
                runner.submit(f"w{i}", jf.warn, i)
            values = sorted(o.value for o in runner.results() if isinstance(o, Finished))
    assert values == [0, 1, 2, 3]
    assert [str(w.message) for w in shown] == ["a job's warning"]


def _pid_in(path: Path, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while not (path.is_file() and path.read_text()):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    return int(path.read_text())


def _gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_ctrl_c_ends_every_running_job_at_once(backend: Backend, tmp_path: Path) -> None:
    """The one stop path: ``KeyboardInterrupt`` in the block (Ctrl-C, or SIGTERM raised as it)
    kills the process of every running job and drops the queued ones; it propagates."""
    pid_files = [tmp_path / f"job{i}.pid" for i in range(2)]
    with pytest.raises(KeyboardInterrupt), open_runner(backend, 2) as runner:
        for path in pid_files:
            runner.submit(path.name, jf.pid_then_sleep, str(path))
        runner.submit("queued", jf.pid_then_sleep, str(tmp_path / "queued.pid"))
        pids = [_pid_in(p) for p in pid_files]
        raise KeyboardInterrupt
    assert all(_gone(pid) for pid in pids), "a job's process outlived the stop"
    assert pids[0] != os.getpid() and not (tmp_path / "queued.pid").exists()


def test_a_graceful_stop_lets_each_job_reach_a_safe_point(backend: Backend, tmp_path: Path) -> None:
    """With ``stop_grace`` a job is asked to stop (``KeyboardInterrupt`` in the job) and may
    save before it ends: what ``riskppo universe`` does with its cells' trainings."""
    path = tmp_path / "job.pid"
    with pytest.raises(KeyboardInterrupt), open_runner(backend, 1, stop_grace=60) as runner:
        runner.submit("job", jf.stop_at_a_safe_point, str(path))
        pid = _pid_in(path)
        raise KeyboardInterrupt
    assert (tmp_path / "job.pid.stopped").read_text() == "saved"
    if backend.kind == "local":  # a local worker ends with the stop; Ray keeps its idle workers
        assert _gone(pid)


STOP_IN_A_BACKGROUND_DRIVER = """
import sys, time
from pathlib import Path
from riskppo.runs.jobs import Backend, open_runner
from tests import job_functions as jf

path = Path(sys.argv[1])
try:
    with open_runner(Backend("ray"), 1, stop_grace=20) as runner:
        runner.submit("job", jf.stop_at_a_safe_point, str(path))
        while not (path.exists() and path.read_text()):
            time.sleep(0.05)
        raise KeyboardInterrupt
except KeyboardInterrupt:
    pass
print(Path(str(path) + ".stopped").read_text() if Path(str(path) + ".stopped").exists() else "lost")
"""


def test_a_graceful_stop_reaches_ray_jobs_of_a_driver_that_ignores_ctrl_c(tmp_path: Path) -> None:
    """A driver started in the background by a shell (``cmd &`` in a script) ignores SIGINT, and
    so do the Ray workers it starts; Ray's stop request to a task is a simulated SIGINT. The
    job must still be asked to stop, and save, within the grace."""
    pytest.importorskip("ray")
    root = str(Path(__file__).parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", STOP_IN_A_BACKGROUND_DRIVER, str(tmp_path / "job.pid")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "saved"


def test_cancel_drops_a_queued_job_and_kills_a_running_one(
    backend: Backend, tmp_path: Path
) -> None:
    """A cancelled job has no outcome; the next queued job takes its place."""
    path = tmp_path / "long.pid"
    with open_runner(backend, 1) as runner:
        runner.submit("long", jf.pid_then_sleep, str(path))
        runner.submit("queued", jf.square, 3)
        runner.submit("kept", jf.square, 4)
        pid = _pid_in(path)
        runner.cancel("queued")
        runner.cancel("long")
        assert [o for o in runner.results()] == [Finished("kept", 16)]
    assert _gone(pid)


def test_a_ray_address_needs_the_ray_backend() -> None:
    with pytest.raises(ConfigError, match="--ray-address needs --backend ray"):
        Backend("local", "auto")


def test_without_ray_the_ray_backend_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--backend ray`` where Ray is not installed: what to install, before anything is
    written, not a traceback."""
    import sys

    from riskppo.runs.jobs.ray_tasks import ray_connection

    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` finds without Ray
    says = r'the Ray backend needs Ray: pip install "riskppo\[ray\]"'
    with pytest.raises(ConfigError, match=says):
        Backend("ray")
    with pytest.raises(ConfigError, match=says), ray_connection(None, 1):
        pass
