"""Files of the native-kernel cache that only the current user can have written.

The trust model is stated in :mod:`riskppo.nn.native`. Here: the checks on the directory chain
and on each file (raising :class:`Untrusted`, whose message names the path and what is wrong),
private directory creation, atomic writes, and the private build directories (one per builder,
locked while it builds) that a later build removes once their builder is gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import NamedTuple

BUILD_PREFIX = "build-"  # + the builder's pid + "-" + a random tail: a private build directory
STALE_BUILD_S = 600.0  # a build directory this old is removed even if its pid looks alive

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_OPEN_FLAGS |= getattr(os, "O_NONBLOCK", 0)  # a planted FIFO must not block the open
_POSIX = hasattr(os, "getuid")


class Untrusted(Exception):
    """A cache path someone other than the current user (or root) could have written."""


class Opened(NamedTuple):
    """A cache file opened without following links and checked: its descriptor and status."""

    fd: int
    status: os.stat_result


def _writable_by_others(mode: int) -> str | None:
    """'group', 'others', 'group and others' for the write bits of ``mode``, or None."""
    who = [name for bit, name in ((0o020, "group"), (0o002, "others")) if mode & bit]
    return " and ".join(who) or None


def _check_dir(path: str, st: os.stat_result, last: bool) -> None:
    """``path`` (lstat ``st``) may be on the chain: owned by the user (the cache directory
    itself) or by the user or root (a parent), not writable by others unless sticky (others
    may then add entries but not rename or remove the user's)."""
    uid = os.getuid()
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid not in (uid, 0):
            raise Untrusted(f"{path} is a symbolic link owned by uid {st.st_uid}")
        return
    if not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"{path} is not a directory")
    if st.st_uid != uid and (last or st.st_uid != 0):
        whose = "you" if last else "you or root"
        raise Untrusted(f"{path} is owned by uid {st.st_uid}, not by {whose} (uid {uid})")
    who = _writable_by_others(st.st_mode)
    if who is not None and (last or not st.st_mode & stat.S_ISVTX):
        raise Untrusted(f"{path} is writable by {who} (chmod go-w {path})")


def _check_chain(path: str) -> None:
    """Every component of the absolute ``path``, from ``/`` down, passes :func:`_check_dir`."""
    parts = os.path.normpath(path).split(os.sep)[1:]
    for i in range(len(parts) + 1):
        here = os.sep + os.sep.join(parts[:i])
        _check_dir(here, os.lstat(here), last=i == len(parts))


def private_dir(path: str) -> str:
    """Create ``path`` and its missing parents with mode 0700 (whatever the umask), check the
    chain as written (symbolic links on it must be the user's or root's) and the real one;
    return the real path. Raises :class:`Untrusted` or ``OSError``."""
    path = os.path.abspath(path)
    missing = []
    here = path
    while not os.path.lexists(here):
        missing.append(here)
        here = os.path.dirname(here)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another builder's: judged below
            os.mkdir(directory, 0o700)
    real = os.path.realpath(path)
    if _POSIX:
        _check_chain(path)
        _check_chain(real)  # the directories the links lead to, and their parents
    return real


def open_trusted(path: str) -> Opened | None:
    """``path`` opened read-only without following a link, checked with ``fstat`` on the open
    descriptor: a regular file, the user's, not writable by others. None if it does not exist;
    :class:`Untrusted` if it is a link or fails a check. The caller closes the descriptor."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise Untrusted(f"{path} is a symbolic link") from None
        raise
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "is not a regular file"
    elif _POSIX and st.st_uid != os.getuid():
        problem = f"is owned by uid {st.st_uid}, not by you (uid {os.getuid()})"
    elif _POSIX and (who := _writable_by_others(st.st_mode)) is not None:
        problem = f"is writable by {who}"
    if problem is not None:
        os.close(fd)
        raise Untrusted(f"{path} {problem}")
    return Opened(fd, st)


def read_fd(fd: int) -> bytes:
    """The whole content of the open file ``fd``, from its start."""
    with os.fdopen(os.dup(fd), "rb") as f:
        f.seek(0)
        return f.read()


def read_trusted(path: str) -> tuple[bytes, os.stat_result] | None:
    """The content and status of ``path`` if :func:`open_trusted` accepts it (None: absent)."""
    opened = open_trusted(path)
    if opened is None:
        return None
    try:
        return read_fd(opened.fd), opened.status
    finally:
        os.close(opened.fd)


def publish(work: str, directory: str, name: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` as ``directory/name`` atomically: a file in the private build directory
    ``work`` (same file system), its mode set explicitly, then renamed into place. A reader
    sees the old file or the new one; an old file's inode (maybe mapped) is left as it was."""
    tmp = os.path.join(work, name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    with os.fdopen(fd, "wb") as f:
        if _POSIX:
            os.fchmod(f.fileno(), mode)  # not narrowed by the umask
        f.write(data)
    os.replace(tmp, os.path.join(directory, name))


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs here (assumed so where that cannot be asked)."""
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock(fd: int, wait: bool) -> bool:
    """An exclusive lock on the open directory ``fd`` (held until the process ends)."""
    if sys.platform == "win32":
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _stale(path: str, name: str) -> bool:
    """Whether the build directory ``path`` is left over: no live builder holds its lock, and
    its pid (from ``name``) has exited or it is older than :data:`STALE_BUILD_S` (the pid
    guards the moment between creating the directory and locking it)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _OPEN_FLAGS)
    except OSError:
        return False
    try:
        if not _lock(fd, wait=False):
            return False
        pid = name[len(BUILD_PREFIX) :].split("-")[0]
        old = time.time() - os.fstat(fd).st_mtime > STALE_BUILD_S
        return old or not pid.isdigit() or not _alive(int(pid))
    finally:
        os.close(fd)


def clean_stale_builds(directory: str) -> list[str]:
    """Remove the build directories of builders that died (SIGKILL, power loss); their names."""
    removed = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith(BUILD_PREFIX) and _stale(path, name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


@contextlib.contextmanager
def build_dir(directory: str) -> Iterator[str]:
    """A private directory in ``directory`` for one build, named with this pid and locked while
    it exists (so :func:`clean_stale_builds` leaves it alone); removed afterwards. Stale build
    directories are removed first."""
    clean_stale_builds(directory)
    work = tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{os.getpid()}-", dir=directory)
    fd = os.open(work, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _OPEN_FLAGS)
    try:
        _lock(fd, wait=True)
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.close(fd)
