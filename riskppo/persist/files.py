"""Checkpoint files that trust nothing (R-REL-2, R-REL-3): bounded, hashed reads of plain regular
files inside one directory; atomic writes (temp sibling + rename, fsync); the manifest; the
``latest`` pointer; temp directories left by killed saves.

What the files *mean* is :mod:`riskppo.persist.checkpoint`'s business.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from riskppo.config.yaml_io import short
from riskppo.safefs import fsync_dir
from riskppo.version import __version__

log = logging.getLogger("riskppo")

FORMAT_VERSION = 2


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, corrupted or does not fit the model."""


class _MissingFile(CheckpointError):
    """A file the manifest lists (or the manifest itself) is absent."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# The files of each format version; a manifest may list these and no others.
KNOWN_FILES = {
    1: ("config.json", "state.json", "model.safetensors", "optimizer.safetensors",
        "normalizer.safetensors", "rng.safetensors"),
    2: ("config.json", "state.json", "model.safetensors", "optimizer.safetensors",
        "normalizer.safetensors", "training.safetensors"),
}  # fmt: skip

# Limits of what the loader reads (R-REL-3): checked before a byte is read.
MAX_FILE_BYTES = 4 << 30  # a tensor file
MAX_JSON_BYTES = 64 << 20  # manifest.json, config.json, state.json
MAX_JSON_DEPTH = 64
_CHUNK = 1 << 20
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
# ``.<name>.tmp-<pid>`` / ``.old-<pid>`` (checkpoint saves), ``.<name>.tmp-<pid>-<hex>``
# (riskppo.safefs's atomic file writes, e.g. the ``latest`` pointer)
_LEFTOVER = re.compile(r"\..+\.(?:tmp|old)-(\d+)(?:-[0-9a-f]+)?")


def plain_name(name: object) -> bool:
    """A file name without separators, ``..`` or anything else that could leave the directory."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None and ".." not in name


def read_file(dfd: int, path: Path, name: str, cap: int) -> bytes:
    """The bytes of the regular file ``name`` in the directory open as ``dfd``, at most ``cap``.

    Symlinks, devices, FIFOs and sockets are refused before they are opened (``lstat``) and
    again after (``O_NOFOLLOW | O_NONBLOCK``, ``fstat``), so a swap in between cannot slip
    through; the size is checked before reading, the file read in bounded chunks. A missing
    file and an unreadable one give the same message.
    """
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        raise _MissingFile(f"{path}: {name} listed in the manifest is missing") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{path}: {name} is not a regular file")
    if st.st_size > cap:
        raise CheckpointError(f"{path}: {name} is too large ({st.st_size} bytes > {cap})")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(name, flags | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
    except OSError:
        raise _MissingFile(f"{path}: {name} listed in the manifest is missing") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path}: {name} is not a regular file")
        if st.st_size > cap:
            raise CheckpointError(f"{path}: {name} is too large ({st.st_size} bytes > {cap})")
        buf = bytearray()
        while len(buf) <= st.st_size:  # one chunk past the size: a file still growing fails
            block = os.read(fd, min(_CHUNK, st.st_size + 1 - len(buf)))
            if not block:
                break
            buf += block
    except OSError as exc:
        raise CheckpointError(f"{path}: {name} unreadable: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(buf) != st.st_size:
        raise CheckpointError(f"{path}: {name} is corrupted (changed while being read)")
    return bytes(buf)


def _json_depth(data: bytes) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON text (string contents ignored)."""
    text = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', data)
    arr = np.frombuffer(text, dtype=np.uint8)
    step = np.isin(arr, (0x5B, 0x7B)).astype(np.int64) - np.isin(arr, (0x5D, 0x7D))
    return int(np.cumsum(step).max(initial=0))


def load_json(data: bytes, what: str) -> Any:
    """Parse bounded JSON (size and nesting depth capped); ``CheckpointError`` on any defect."""
    if len(data) > MAX_JSON_BYTES:
        raise CheckpointError(f"{what} is too large ({len(data)} bytes > {MAX_JSON_BYTES})")
    if _json_depth(data) > MAX_JSON_DEPTH:
        raise CheckpointError(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{what} unreadable: {exc}") from None


@dataclasses.dataclass
class VerifiedFiles:
    """The files of one checkpoint directory, open as ``dfd``, as its manifest lists them.

    Only the files the manifest's ``format_version`` knows (:data:`KNOWN_FILES`) may be listed,
    each with a SHA-256; :meth:`read` returns a file's bytes only if they hash to it.
    """

    path: Path
    dfd: int
    manifest: dict[str, Any]
    version: int
    digests: dict[str, str]

    def size(self, name: str) -> int:
        """The size in bytes of the listed regular file ``name`` (not read)."""
        try:
            st = os.stat(name, dir_fd=self.dfd, follow_symlinks=False)
        except OSError:
            raise _MissingFile(f"{self.path}: {name} listed in the manifest is missing") from None
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{self.path}: {name} is not a regular file")
        return st.st_size

    def read(self, name: str, cap: int) -> bytes:
        """The bytes of ``name`` (at most ``cap``), checked against the manifest's SHA-256."""
        data = read_file(self.dfd, self.path, name, cap)
        if hashlib.sha256(data).hexdigest() != self.digests[name]:
            raise CheckpointError(f"{self.path}: {name} is corrupted (SHA-256 mismatch)")
        return data


@contextlib.contextmanager
def open_verified(path: Path) -> Iterator[VerifiedFiles]:
    """Open a checkpoint directory and read its manifest (:class:`VerifiedFiles`).

    The bytes that are hashed are the bytes that get parsed, so a checkpoint that is being
    written or replaced meanwhile is never read half-way: any file from another version fails
    its hash, a missing manifest or file raises (R-PBT-1, R-REL-3). Nothing in the directory is
    trusted: the manifest may only name the format's own plain files (:func:`read_file`).
    """
    try:
        dfd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        raise CheckpointError(f"{path}: not a checkpoint directory") from None
    try:
        yield _manifest(dfd, path)
    finally:
        os.close(dfd)


def _manifest(dfd: int, path: Path) -> VerifiedFiles:
    try:
        raw = read_file(dfd, path, "manifest.json", MAX_JSON_BYTES)
    except _MissingFile:
        raise CheckpointError(
            f"{path}: manifest.json missing (incomplete or foreign checkpoint)"
        ) from None
    manifest = load_json(raw, f"{path}: manifest.json")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise CheckpointError(f"{path}: manifest.json unreadable: no 'files' mapping")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in KNOWN_FILES:
        raise CheckpointError(
            f"{path}: format_version {short(version)} is not one of {sorted(KNOWN_FILES)} "
            "(unknown format; written by a newer riskppo?)"
        )
    known = KNOWN_FILES[version]
    for name, digest in files.items():
        if not plain_name(name) or name == "manifest.json":
            raise CheckpointError(f"{path}: manifest entry {short(name)} is not a plain file name")
        if name not in known:
            raise CheckpointError(
                f"{path}: manifest lists {short(name)}, which is not a checkpoint file (format "
                f"{version} has only {', '.join(known)})"
            )
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise CheckpointError(f"{path}: manifest entry {name!r} has no valid SHA-256")
    for name in known:
        if name not in files:
            raise CheckpointError(f"{path}: manifest does not list required file {name}")
    return VerifiedFiles(path, dfd, dict(manifest), version, dict(files))


def read_verified(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and every file it lists, each checked against its SHA-256 (each file at
    most ``MAX_FILE_BYTES``, JSON ``MAX_JSON_BYTES``)."""
    with open_verified(path) as files:
        contents = {
            name: files.read(name, MAX_JSON_BYTES if name.endswith(".json") else MAX_FILE_BYTES)
            for name in files.digests
        }
        return files.manifest, contents


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Check presence and SHA-256 of every file; returns the manifest. Raises CheckpointError."""
    return read_verified(path)[0]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. EPERM: it exists
        return True
    return True


def remove_leftovers(directory: Path) -> list[Path]:
    """Remove the temp directories (``.<name>.tmp-<pid>``, ``.<name>.old-<pid>``) of saves and the
    temp files of atomic writes (``.<name>.tmp-<pid>-<hex>``) whose process is gone (killed
    mid-save); those of live processes are left alone. Returns them."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = _LEFTOVER.fullmatch(entry.name)
        if m is None or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:  # a file or a link: unlinked, never followed
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
        removed.append(Path(entry.path))
    if removed:
        log.warning("%s: removed %d temp file(s) left by killed saves", directory, len(removed))
    return removed


def resolve_latest(ckpts: Path) -> Path:
    """The checkpoint that ``ckpts/latest`` names; ``CheckpointError`` unless it is a regular
    file naming a plain sibling directory of ``ckpts`` (never a path outside the run)."""
    ckpts = Path(ckpts)
    try:
        dfd = os.open(ckpts, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        raise CheckpointError(f"{ckpts}: no checkpoint directory") from None
    try:
        name = read_file(dfd, ckpts, "latest", 4096).decode("utf-8", "replace").strip()
        if not plain_name(name) or name == "latest":
            raise CheckpointError(f"{ckpts}: latest names {name[:80]!r}, not a sibling checkpoint")
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            raise CheckpointError(f"{ckpts}: latest names {name!r}, which is missing") from None
    finally:
        os.close(dfd)
    if not stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{ckpts}: latest names {name!r}, not a sibling checkpoint")
    return ckpts / name


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to the file ``path``. An OS error names ``path`` even when the failing call
    was a ``write`` (which names no file): a full disk is reported with the file it hit."""
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def write_manifest(d: Path) -> None:
    """Write ``d/manifest.json`` (SHA-256 of every file in ``d``), then fsync every file and
    ``d`` itself, so that a rename of ``d`` never publishes data still in the page cache."""
    files = {p.name: sha256(p) for p in sorted(d.iterdir()) if p.is_file()}
    manifest = {
        "format_version": FORMAT_VERSION,
        "riskppo_version": __version__,
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "files": files,
    }
    write_file(d / "manifest.json", json.dumps(manifest, indent=1).encode())
    for p in d.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    fsync_dir(d)


def replace_dir(tmp: Path, path: Path) -> None:
    """Rename the finished directory ``tmp`` to ``path`` (an existing ``path`` is moved aside
    first and removed after; a symlink there is unlinked, never followed), then fsync the
    parent directory."""
    if os.path.islink(path):
        os.unlink(path)
    if os.path.lexists(path):
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
    fsync_dir(path.parent)


_OS_ERROR = re.compile(r"([^:]+?) \(os error \d+\)")


def write_error_reason(exc: BaseException) -> str:
    """Why a write failed, in the operating system's words (``No space left on device``): the
    ``strerror`` of an ``OSError``, the OS error inside a safetensors ``SafetensorError``."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    m = _OS_ERROR.search(str(exc))
    return m.group(1).strip() if m else str(exc)
