"""Writing into a directory that may have been prepared by someone else (a run directory that was
downloaded, shared or unpacked from an archive): nothing is written *through* a symlink.

- :func:`write_bytes_atomic` / :func:`write_text_atomic`: a new temporary sibling (created with
  ``O_EXCL | O_NOFOLLOW``), fsynced, renamed over the target, then the directory fsynced. The
  rename replaces a symlink or hard link at the target instead of writing into what it points
  to; a crash leaves the old file or the new one, never half of one.
- :func:`open_nofollow`: ``os.open`` that refuses a symlink and anything but a regular file with a
  single link (for files written in place: the lock file, appended logs).
- :func:`ensure_real_dir`: create a directory, or check that the existing one is a directory and
  not a symlink to one.
- :func:`remove_entry`: delete a file, a symlink (the link, not its target) or a directory tree
  (:func:`shutil.rmtree` does not follow symlinks inside the tree).

Only the last component of a path is checked: the directory the user names (``--run-dir``) may
itself be a symlink; what is inside it may not. Nothing here imports riskppo.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from io import TextIOWrapper
from pathlib import Path

__all__ = [
    "UnsafePathError",
    "append_text",
    "ensure_real_dir",
    "fsync_dir",
    "open_nofollow",
    "read_text_nofollow",
    "remove_entry",
    "write_bytes_atomic",
    "write_text_atomic",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class UnsafePathError(RuntimeError):
    """A path to be written is a symlink, a hard link or not the kind of file expected."""


def _refuse(path: Path, what: str) -> UnsafePathError:
    return UnsafePathError(
        f"{path} is {what}; riskppo does not write through links in a run directory: remove "
        "it or use another directory"
    )


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (renames, new files) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(
    path: Path, data: bytes, mode: int = 0o644, before_rename: Callable[[], None] | None = None
) -> Path:
    """Replace ``path`` by a regular file holding ``data`` (temp sibling, fsync, rename, fsync
    of the directory). On any error the temporary file is removed and ``path`` is untouched.
    ``before_rename`` is called with the temporary file written (a test's crash point)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> Path:
    """:func:`write_bytes_atomic` of ``text`` encoded as UTF-8."""
    return write_bytes_atomic(path, text.encode("utf-8"), mode)


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags)`` that refuses (:class:`UnsafePathError`) a symlink, a FIFO, a
    device, a directory and a regular file with more than one hard link; returns the fd."""
    path = Path(path)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK, mode)
    except OSError as exc:
        if path.is_symlink():
            raise _refuse(path, "a symlink") from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            raise _refuse(path, "not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "not a regular file")
        if st.st_nlink > 1:
            raise _refuse(path, f"a hard link ({st.st_nlink} names for one file)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append_text(path: Path) -> TextIOWrapper:
    """``path`` opened for appending text (created if missing), through :func:`open_nofollow`."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    return os.fdopen(fd, "a", encoding="utf-8")


def read_text_nofollow(path: Path) -> str:
    """The UTF-8 text of the regular file ``path``, refusing links like :func:`open_nofollow`."""
    with os.fdopen(open_nofollow(path, os.O_RDONLY), "r", encoding="utf-8") as f:
        return f.read()


def ensure_real_dir(path: Path) -> Path:
    """Create directory ``path`` (and missing parents), or check that it is a real directory;
    :class:`UnsafePathError` if it is a symlink or not a directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(path, "a symlink, not a directory") from None
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(path, "not a directory") from None
    return path


def remove_entry(path: Path) -> None:
    """Delete ``path``: a directory tree without following any symlink, else the entry itself
    (a symlink is unlinked, its target untouched)."""
    if stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)
