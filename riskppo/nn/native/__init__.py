"""The C recurrence of the masked LSTM (``lstm.c``), built on first use and cached.

:func:`kernel` returns the loaded library, or ``None`` when it cannot be had — no C compiler,
a failed build or load, or ``RISKPPO_NATIVE=0`` — after logging the reason once; callers then
use the PyTorch kernel (:mod:`riskppo.nn.lstm_kernel`), which gives the same results to float
rounding. The build takes about a second (``cc -O3 -march=native``) and is cached under
``$RISKPPO_CACHE`` (default ``~/.cache/riskppo``) in a file named by a hash of the source, the
flags, the compiler and this CPU's features, so a machine with other instructions builds its own.
``RISKPPO_NATIVE_CFLAGS`` (split like a shell line) is appended to the flags, e.g. a sanitizer
build (``tests/native/run_sanitizers.sh``); being part of the key, it never reuses a normal build.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["kernel", "unavailable_reason"]

log = logging.getLogger("riskppo")

SOURCE = Path(__file__).with_name("lstm.c")
_FLAGS = ["-O3", "-std=gnu99", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math"]
_NATIVE_ARCH = {"x86_64": "-march=native", "AMD64": "-march=native", "aarch64": "-mcpu=native"}

_state: dict[str, object] = {}  # "lib": ctypes.CDLL | None, "reason": str | None


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
    root = os.environ.get("RISKPPO_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "riskppo"
    )
    return Path(root) / "native"


def _build(cc: str) -> Path:
    """Compile ``lstm.c`` into the cache (atomically: concurrent builders cannot clash)."""
    source = SOURCE.read_bytes()
    flags = [*_FLAGS, *([_NATIVE_ARCH[m]] if (m := platform.machine()) in _NATIVE_ARCH else [])]
    flags += shlex.split(os.environ.get("RISKPPO_NATIVE_CFLAGS", ""))
    key = hashlib.sha256(
        b"\0".join([source, " ".join(flags).encode(), cc.encode(), _cpu_features().encode()])
    ).hexdigest()[:16]
    suffix = ".dll" if sys.platform == "win32" else ".so"
    target = _cache_dir() / f"lstm-{key}{suffix}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=target.parent)
    os.close(fd)
    try:
        cmd = [cc, *flags, str(SOURCE), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise RuntimeError(f"{' '.join(cmd)} failed: {first}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _load() -> tuple[ctypes.CDLL | None, str | None]:
    if os.environ.get("RISKPPO_NATIVE", "1") == "0":
        return None, "RISKPPO_NATIVE=0"
    cc = _compiler()
    if cc is None:
        return None, "no C compiler found (set CC, or install gcc or clang)"
    try:
        lib = ctypes.CDLL(str(_build(cc)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]
    sizes: list[Any] = [ctypes.c_int] * 4  # T, K, B, H
    strided: list[Any] = [ctypes.c_void_p] + [ctypes.c_ssize_t] * 3  # data, 3 element strides
    pointers: list[Any] = [ctypes.c_void_p]
    lib.riskppo_lstm_forward.argtypes = sizes + strided + pointers * 8 + [ctypes.c_int]
    lib.riskppo_lstm_forward.restype = ctypes.c_int  # 0, or -1: out of memory
    lib.riskppo_lstm_backward.argtypes = sizes + pointers * 8 + strided + pointers * 2
    lib.riskppo_lstm_backward.restype = None
    lib.riskppo_actor_step.argtypes = (
        [ctypes.c_int] * 3
        + pointers * 7
        + [ctypes.c_int]
        + (pointers * 3 + [ctypes.c_int] + pointers * 3)
    )
    lib.riskppo_actor_step.restype = ctypes.c_int  # 0, or -1: out of memory
    lib.riskppo_clip_adam.argtypes = [ctypes.c_int] + pointers * 7 + [ctypes.c_int, ctypes.c_float]
    lib.riskppo_clip_adam.argtypes += [ctypes.c_double] * 6 + [ctypes.c_int, ctypes.c_void_p]
    lib.riskppo_clip_adam.restype = ctypes.c_int  # 1: stepped, 0: not finite (skipped)
    return lib, None


def kernel() -> ctypes.CDLL | None:
    """The loaded C kernel, built on first call; ``None`` (reason logged once) if unavailable."""
    if "lib" not in _state:
        lib, reason = _load()
        _state.update(lib=lib, reason=reason)
        if reason is not None:
            log.warning(
                "native LSTM kernel unavailable (%s); using the PyTorch kernel (slower)", reason
            )
    return _state["lib"]  # type: ignore[return-value]


def unavailable_reason() -> str | None:
    """Why :func:`kernel` returned ``None`` (None: it is available or not yet asked for)."""
    return _state.get("reason")  # type: ignore[return-value]
