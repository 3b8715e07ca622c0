"""The C kernels, built on first use into one cached library: the masked LSTM's recurrence
(``lstm.c``), the rollout's actor step (``actor_step.c``) and the optimizer step after the
backward (``adam.c``), with what they share in ``common.h``.

:func:`kernel` returns the loaded library, or ``None`` when it cannot be had — no C compiler,
a failed build or load, a cache that is not safely the user's, or ``RISKPPO_NATIVE=0`` — after
logging the reason once; callers then use the PyTorch kernel (:mod:`riskppo.nn.lstm_kernel`),
which gives the same results to float rounding. The build takes about a second (``cc -O3
-march=native``) and is cached under ``$RISKPPO_CACHE`` (default ``$XDG_CACHE_HOME/riskppo``,
``~/.cache/riskppo`` when that is unset or relative, as the XDG Base Directory specification
says), keyed by a hash of every source and header (their names and bytes), the flags, the
compiler (its real path, size and modification time) and this CPU's features, so a machine with
other instructions builds its own.

Trust model. Loading a library runs its code, so the cache holds only what the current user
wrote, and the loader checks that before anything is loaded (:mod:`riskppo.nn.native.cache`):

- Who may write where: the cache directory ``<cache>/native`` must be owned by the user and not
  writable by group or others; each parent up to ``/`` must be the user's or root's and not
  writable by others unless it has the sticky bit (``/tmp``: others may add entries but cannot
  rename or remove the user's). Symbolic links on the path must be the user's or root's, and the
  directories they lead to pass the same checks. Directories the loader creates get mode 0700
  whatever the umask. A cache that fails a check is refused — one logged line names the path and
  why (with the ``chmod`` that fixes a mode) — and the PyTorch kernel runs; nothing there is
  loaded, rebuilt or removed.
- What is verified: the build records ``lstm-<key>.sha256`` (``sha256sum`` format: the SHA-256
  of the library and its name, ``lstm-<key>-<first 16 hex of that hash>.so``). Both files are
  opened with ``O_NOFOLLOW`` (a link is refused) and checked with ``fstat`` on the open
  descriptor: a regular file, owned by the user, not writable by others. The library's bytes
  are read through that descriptor and hashed; only when the hash matches the record is it
  loaded, and from the same descriptor: ``dlopen("/proc/self/fd/N")`` opens the inode that was
  hashed, whatever the name points to by then, so there is no window between check and load in
  which a file could be swapped (where there is no ``/proc``, the verified bytes are copied into
  a fresh private temporary directory and loaded from there). The descriptor stays open for the
  life of the process, so its ``/proc`` name never names another file.
- Broken entries: a library that is missing, truncated or altered (hash mismatch), or a record
  that does not parse, is rebuilt. Every file is written into a private per-builder directory
  and renamed into place, so concurrent builders (PBT workers) never clash and a file another
  process has mapped is never written into (a rename leaves its inode as it was). A failed or
  timed-out build (:data:`BUILD_TIMEOUT_S`) is remembered in ``lstm-<key>.failed``, so later
  processes skip at once with the logged reason until the key changes (a new source or compiler)
  or :data:`FAILURE_RETRY_S` has passed. Build directories left by a killed builder are removed
  by the next build (their lock is free and their pid has exited).

Only the current user (and root) can write anything this trusts: a process running as the same
user could replace the cache, but could as well run its own code directly. Where there are no
POSIX user ids (Windows) the owner and mode checks are skipped; the hash is still verified.

``RISKPPO_NATIVE_CFLAGS`` (split like a shell line) is appended to the flags, e.g. a sanitizer
build (``tests/native/run_sanitizers.sh``); being part of the key, it never reuses a normal build.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from riskppo.nn.native import cache

__all__ = ["kernel", "unavailable_reason"]

log = logging.getLogger("riskppo")

_DIR = Path(__file__).parent
SOURCES = sorted(_DIR.glob("*.c"))  # compiled together into the one library
HEADERS = sorted(_DIR.glob("*.h"))
BUILD_TIMEOUT_S = 60.0  # the build takes about a second; past this it is killed and remembered
FAILURE_RETRY_S = 86400.0  # a remembered failure is retried after a day
_FLAGS = ["-O3", "-std=gnu99", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math"]
_NATIVE_ARCH = {"x86_64": "-march=native", "AMD64": "-march=native", "aarch64": "-mcpu=native"}
_SUFFIX = ".dll" if sys.platform == "win32" else ".so"
_RECORD = re.compile(r"([0-9a-f]{64})  (\S+)\n")

# set to the reason once the unavailable kernel has been reported in this process or its parent
_NOTICE = "_RISKPPO_NATIVE_REPORTED"

_state: dict[str, object] = {}  # "lib": ctypes.CDLL | None, "reason": str | None, "fd": int


class BuildFailed(Exception):
    """The compiler failed or timed out (now or, remembered, earlier)."""


def _cpu_features() -> str:
    """What identifies this CPU's instruction set: its flags line on Linux, else the platform."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler() -> str | None:
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc) or shutil.which("gcc") or shutil.which("clang")


def _cache_dir() -> Path:
    """``$RISKPPO_CACHE/native``; else under ``$XDG_CACHE_HOME`` if absolute, or ``~/.cache``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.expanduser("~/.cache")
    return Path(os.environ.get("RISKPPO_CACHE") or os.path.join(base, "riskppo")) / "native"


def _flags() -> list[str]:
    arch = [_NATIVE_ARCH[m]] if (m := platform.machine()) in _NATIVE_ARCH else []
    return [*_FLAGS, *arch, *shlex.split(os.environ.get("RISKPPO_NATIVE_CFLAGS", ""))]


def _key(cc: str) -> str:
    """16 hex digits naming a build: the sources and headers (each file's name and bytes), the
    flags, the compiler (path, size, mtime), the CPU."""
    st = os.stat(cc)
    compiler = f"{os.path.realpath(cc)} {st.st_size} {st.st_mtime_ns}"
    files = [part for f in [*SOURCES, *HEADERS] for part in (f.name.encode(), f.read_bytes())]
    parts = [*files, " ".join(_flags()).encode(), compiler.encode()]
    return hashlib.sha256(b"\0".join([*parts, _cpu_features().encode()])).hexdigest()[:16]


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the compiler's process group (the driver and cc1, as, ld under it) and reap it."""
    if hasattr(os, "killpg"):
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _compile(cmd: list[str]) -> None:
    """Run the compiler in its own process group, killed whole after :data:`BUILD_TIMEOUT_S`
    (or when this process is interrupted meanwhile)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=BUILD_TIMEOUT_S)
    except BaseException as exc:
        _kill_group(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise BuildFailed(f"{cmd[0]} did not finish within {BUILD_TIMEOUT_S:g} s") from None
        raise
    if proc.returncode != 0:
        first = (err.strip().splitlines() or ["no output"])[0]
        raise BuildFailed(f"{' '.join(cmd)} failed: {first}")


def _build(cc: str, directory: str, key: str) -> None:
    """Compile the sources in a private build directory and publish the library, then its
    record; or remember the failure (``lstm-<key>.failed``) and raise :class:`BuildFailed`."""
    with cache.build_dir(directory) as work:
        out = os.path.join(work, "out" + _SUFFIX)
        try:
            _compile([cc, *_flags(), *map(str, SOURCES), "-o", out])
        except BuildFailed as exc:
            cache.publish(work, directory, f"lstm-{key}.failed", f"{exc}\n".encode())
            raise
        data = Path(out).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        name = f"lstm-{key}-{digest[:16]}{_SUFFIX}"
        cache.publish(work, directory, name, data, mode=0o700)
        cache.publish(work, directory, f"lstm-{key}.sha256", f"{digest}  {name}\n".encode())
    Path(directory, f"lstm-{key}.failed").unlink(missing_ok=True)


def _verified(directory: str, key: str) -> int | None:
    """A descriptor of the recorded library whose bytes match the recorded SHA-256; None if
    there is none yet, or it is missing, truncated or altered (then logged: it is rebuilt)."""
    record = os.path.join(directory, f"lstm-{key}.sha256")
    found = cache.read_trusted(record)
    if found is None:
        return None
    match = _RECORD.fullmatch(found[0].decode("ascii", "replace"))
    if match is None or match[2] != f"lstm-{key}-{match[1][:16]}{_SUFFIX}":
        log.warning("native kernel cache: %s does not parse; rebuilding", record)
        return None
    path = os.path.join(directory, match[2])
    opened = cache.open_trusted(path)
    if opened is not None and hashlib.sha256(cache.read_fd(opened.fd)).hexdigest() == match[1]:
        return opened.fd
    if opened is not None:
        os.close(opened.fd)
    log.warning("native kernel cache: %s is missing or not as %s records; rebuilding", path, record)
    return None


def _remembered_failure(directory: str, key: str) -> str | None:
    """The reason of a failed build of ``key`` in the last :data:`FAILURE_RETRY_S`, if any."""
    marker = os.path.join(directory, f"lstm-{key}.failed")
    found = cache.read_trusted(marker)
    if found is None or time.time() - found[1].st_mtime > FAILURE_RETRY_S:
        return None
    reason = found[0].decode("utf-8", "replace").strip()
    return f"an earlier build failed: {reason} (remembered in {marker}; delete it to retry)"


def _library_fd(cc: str) -> int:
    """A descriptor of the verified library for this source, compiler and CPU, built if need be."""
    directory = cache.private_dir(str(_cache_dir()))
    key = _key(cc)
    fd = _verified(directory, key)
    if fd is None:
        failed = _remembered_failure(directory, key)
        if failed is not None:
            raise BuildFailed(failed)
        _build(cc, directory, key)
        fd = _verified(directory, key)
    if fd is None:
        raise BuildFailed(f"the library just built in {directory} does not verify")
    return fd


def _dlopen(fd: int) -> ctypes.CDLL:
    """Load the verified library open as ``fd`` (see the trust model above)."""
    proc = f"/proc/self/fd/{fd}"
    if os.path.exists(proc):
        return ctypes.CDLL(proc)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as private:
        copy = os.path.join(private, "lstm" + _SUFFIX)
        Path(copy).write_bytes(cache.read_fd(fd))
        return ctypes.CDLL(copy)


def _load() -> tuple[ctypes.CDLL | None, str | None]:
    if os.environ.get("RISKPPO_NATIVE", "1") == "0":
        return None, "RISKPPO_NATIVE=0"
    cc = _compiler()
    if cc is None:
        return None, "no C compiler found (set CC, or install gcc or clang)"
    try:
        fd = _library_fd(cc)
    except cache.Untrusted as exc:
        return None, f"refusing the native kernel cache: {exc}"
    except (OSError, BuildFailed, subprocess.SubprocessError) as exc:
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]
    try:
        lib = _dlopen(fd)
    except OSError as exc:
        os.close(fd)
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]
    _state["fd"] = fd  # keeps /proc/self/fd/<fd> naming the loaded file
    sizes: list[Any] = [ctypes.c_int] * 4  # T, K, B, H
    strided: list[Any] = [ctypes.c_void_p] + [ctypes.c_ssize_t] * 3  # data, 3 element strides
    pointers: list[Any] = [ctypes.c_void_p]
    lib.riskppo_lstm_forward.argtypes = sizes + strided + pointers * 8 + [ctypes.c_int]
    lib.riskppo_lstm_forward.restype = ctypes.c_int  # 0, or -1: out of memory
    lib.riskppo_lstm_backward.argtypes = sizes + pointers * 10 + strided + pointers * 3
    lib.riskppo_lstm_backward.restype = ctypes.c_int  # 0; -1: out of memory; -2: dz's strides
    # T, K, B, H, D; x, w_ih, bias, w_hh, h0, c0, keep, hs, cs, acts, tanh_c
    lib.riskppo_lstm_layer_forward.argtypes = [ctypes.c_int] * 5 + pointers * 11
    lib.riskppo_lstm_layer_forward.restype = ctypes.c_int  # 0, or -1: out of memory
    # T, K, B, H, D; x, dz, dz's strides of k and b; dw_ih, db
    lib.riskppo_lstm_input_grad.argtypes = [ctypes.c_int] * 5 + pointers * 2
    lib.riskppo_lstm_input_grad.argtypes += [ctypes.c_ssize_t] * 2 + pointers * 2
    lib.riskppo_lstm_input_grad.restype = ctypes.c_int  # 0, or -1: out of memory
    # B, H -> (B - 1) * 4H + 4H - 1 in the kernels' index type (a test of its width)
    lib.riskppo_lstm_last_gate_offset.argtypes = [ctypes.c_int] * 2
    lib.riskppo_lstm_last_gate_offset.restype = ctypes.c_ssize_t
    # B, D, H; x, the LSTM step's weights, h0, c0, keep, hc; the MLP: n_layers, dims, ws, bs, act
    actor: list[Any] = [ctypes.c_int] * 3 + pointers * 8 + [ctypes.c_int] + pointers * 3
    actor += [ctypes.c_int]
    lib.riskppo_actor_step.argtypes = actor + pointers * 3  # u, actions, log_probs
    lib.riskppo_actor_step.restype = ctypes.c_int  # 0, or -1: out of memory
    # log_std, w_std, b_std, eps, actions, log_probs
    lib.riskppo_actor_step_gauss.argtypes = actor + pointers * 6
    lib.riskppo_actor_step_gauss.restype = ctypes.c_int  # 0, or -1: out of memory
    lib.riskppo_clip_adam.argtypes = [ctypes.c_int] + pointers * 7 + [ctypes.c_int]
    lib.riskppo_clip_adam.argtypes += [*pointers, ctypes.c_int, ctypes.c_int, ctypes.c_float]
    lib.riskppo_clip_adam.argtypes += [ctypes.c_double] * 6 + [ctypes.c_int, ctypes.c_void_p]
    lib.riskppo_clip_adam.restype = ctypes.c_int  # 1: stepped, 0: not finite, -1: bad n_clip
    return lib, None


def kernel() -> ctypes.CDLL | None:
    """The loaded C kernel, built on first call; ``None`` (reason logged once) if unavailable."""
    if "lib" not in _state:
        lib, reason = _load()
        _state.update(lib=lib, reason=reason)
        # told once per process tree: the workers a process spawns inherit its environment
        if reason is not None and os.environ.get(_NOTICE) != reason:
            os.environ[_NOTICE] = reason
            log.warning(
                "native LSTM kernel unavailable (%s); using the PyTorch kernel (slower)", reason
            )
    return _state["lib"]  # type: ignore[return-value]


def unavailable_reason() -> str | None:
    """Why :func:`kernel` returned ``None`` (None: it is available or not yet asked for)."""
    return _state.get("reason")  # type: ignore[return-value]
