"""Processes as Linux's /proc shows them, for the tests that stop or kill a command and check
what it leaves running."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def children(pid: int) -> list[int]:
    """Pids whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def descendants(pid: int) -> list[int]:
    """Pids of ``pid``'s children, their children, and so on."""
    out = []
    for child in children(pid):
        out += [child, *descendants(child)]
    return out


def commands(pid: int, *words: str) -> list[int]:
    """``pid``'s descendants whose command line holds each of ``words`` (e.g. the
    ``riskppo.cli train`` processes a job runner's workers started)."""
    out = []
    for p in descendants(pid):
        try:
            argv = Path(f"/proc/{p}/cmdline").read_text().split("\0")
        except OSError:
            continue
        if all(w in argv for w in words):
            out.append(p)
    return out


def spawned_workers(pid: int) -> list[int]:
    """``pid``'s children that are multiprocessing ``spawn`` workers."""
    out = []
    for child in children(pid):
        try:
            if "spawn_main" in Path(f"/proc/{child}/cmdline").read_text():
                out.append(child)
        except OSError:
            continue
    return out


def alive(pid: int) -> bool:
    """Running: neither gone nor a zombie waiting for its parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def stop_as_users_do(proc: subprocess.Popen[str], sig: int, timeout: float) -> tuple[str, str]:
    """SIGTERM to ``proc`` alone (a scheduler's stop, ``kill``) or SIGINT to its process group
    (a terminal's Ctrl-C; ``proc`` must lead a session of its own), then wait for it. Returns
    its stderr and the signal's name as riskppo prints it."""
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=timeout)
    return err, "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name


def as_a_terminal_starts_it() -> None:
    """``preexec_fn``: the child takes Ctrl-C as a command started in a terminal does. A test
    run started in the background (``cmd &`` in a script, as CI may be) has SIGINT ignored,
    and an ignored signal stays ignored across ``exec``: the child would never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``proc`` (leading a session of its own), SIGKILLed with its process group if it is still
    running when the block is left: a failing test must leave no command training on."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
