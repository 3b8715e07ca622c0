"""The command line's one-line log records, and warnings raised in workers shown once by their
parent (``riskppo.logs``, ``riskppo.runs.processes``)."""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
import warnings

import pytest

from riskppo.logs import TerminalFormatter, current_setup
from riskppo.runs.processes import CaughtWarning, catching_warnings, reissue
from tests.compilers import without_kernel_notice


def record(name: str, level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


@pytest.mark.parametrize(
    ("name", "level", "line"),
    [
        ("riskppo", logging.WARNING, "riskppo: warning: a b c"),
        ("riskppo.pbt", logging.ERROR, "riskppo: error: a b c"),
        ("riskppo", logging.CRITICAL, "riskppo: error: a b c"),
        ("riskppo", logging.INFO, "riskppo: a b c"),
        ("matplotlib", logging.WARNING, "WARNING matplotlib: a\n  b c"),
        ("riskppoish", logging.WARNING, "WARNING riskppoish: a\n  b c"),
    ],
)
def test_riskppo_records_are_one_riskppo_line_others_keep_level_and_name(
    name: str, level: int, line: str
) -> None:
    assert TerminalFormatter().format(record(name, level, "a\n  b c")) == line


def test_a_logged_exception_keeps_its_traceback_below_the_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("riskppo", logging.ERROR, __file__, 1, "failed", None, None)
        rec.exc_info = sys.exc_info()
    text = TerminalFormatter().format(rec)
    assert text.startswith("riskppo: error: failed\nTraceback") and "ValueError: boom" in text


def test_a_library_users_process_passes_no_terminal_setup_to_its_workers() -> None:
    assert current_setup() is None  # pytest's handlers are not the command line's


def _worker_task(tag: str) -> list[CaughtWarning]:
    with catching_warnings() as caught:
        warnings.warn("same text", UserWarning, stacklevel=1)
        warnings.warn("same text", UserWarning, stacklevel=2)  # another line
        warnings.warn(f"own text {tag}", RuntimeWarning, stacklevel=1)
    return caught


def test_warnings_from_many_workers_are_shown_once_each_through_the_parents_filters() -> None:
    shown: set[tuple[str, str, str]] = set()
    a, b = _worker_task("a"), _worker_task("b")
    assert len(a) == 3 and a[0].filename == __file__
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        reissue(a, shown)
        reissue(b, shown)
        reissue(a, shown)  # a worker's next task: nothing new
    assert [(str(w.message), w.category) for w in seen] == [
        ("same text", UserWarning),
        ("own text a", RuntimeWarning),
        ("own text b", RuntimeWarning),
    ]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("ignore", RuntimeWarning)  # the parent's filters decide
        warnings.simplefilter("always", UserWarning)
        reissue(_worker_task("c"), set())
    assert [str(w.message) for w in seen] == ["same text"]


def test_a_warning_class_the_parent_lacks_crosses_the_pipe_and_shows_as_a_userwarning() -> None:
    """A local class (it cannot be pickled) and one of a module the parent never imported (its
    unpickling would fail there) would break the worker's answer; they arrive by name."""

    class LocalWarning(UserWarning):
        pass

    Foreign = type("ForeignWarning", (RuntimeWarning,), {"__module__": "a_users_env_module"})
    with catching_warnings() as caught:
        warnings.warn("local", LocalWarning, stacklevel=1)
        warnings.warn("foreign", Foreign, stacklevel=1)
        warnings.warn("known", DeprecationWarning, stacklevel=1)
    arrived = pickle.loads(pickle.dumps(caught))
    assert [w.category() for w in arrived] == [UserWarning, UserWarning, DeprecationWarning]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        reissue(arrived, set())
    assert [(str(w.message), w.category) for w in seen] == [
        ("local", UserWarning),
        ("foreign", UserWarning),
        ("known", DeprecationWarning),
    ]


def test_a_worker_tasks_warnings_are_kept_when_it_fails() -> None:
    with pytest.raises(KeyError), catching_warnings() as caught:
        warnings.warn("before the failure", UserWarning, stacklevel=1)
        raise KeyError("x")
    assert [w.text for w in caught] == ["before the failure"]


CHILD = """
import logging
import multiprocessing

from riskppo import logs
from riskppo.runs.processes import start_worker, worker_setup


def child(setup):
    start_worker(setup)
    logging.getLogger("riskppo.pbt").warning("from the\\n worker")
    logging.getLogger("riskppo").info("its information")
    logging.getLogger("elsewhere").info("not shown")


if __name__ == "__main__":
    logs.configure_terminal(verbose=False)
    proc = multiprocessing.get_context("spawn").Process(target=child, args=(worker_setup(),))
    proc.start()
    proc.join()
"""


def test_a_spawned_worker_logs_like_the_command_line_that_started_it(tmp_path) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "child.py")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert without_kernel_notice(proc.stderr) == [
        "riskppo: warning: from the worker",
        "riskppo: its information",
    ]
