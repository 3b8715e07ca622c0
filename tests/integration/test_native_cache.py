"""The native kernel's cache (riskppo/nn/native, trust model in its docstring): what it refuses
to load (a planted library, links, files and directories others can write), how it recovers from
broken entries, remembers failed builds and removes what killed builders left. Real files,
links, modes, umask, compilers and processes; a planted library is a real one whose constructor
writes a marker file."""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riskppo.nn import native
from riskppo.nn.native import cache
from tests.compilers import needs_c_compiler

pytestmark = needs_c_compiler()
as_root = pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0,
    reason="a file of another user: needs root to chown one to uid 65534",
)
OTHER_UID = 65534

EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(getenv("RISKPPO_TEST_MARKER"), "w");
    if (f) { fputs("the planted constructor ran\n", f); fclose(f); }
}
"""

CHILD = """
import sys, time
from riskppo.nn import native
native.BUILD_TIMEOUT_S = float(sys.argv[1])
start = time.monotonic()
lib = native.kernel()
print(f"{time.monotonic() - start:.3f}", "loaded" if lib else native.unavailable_reason())
"""  # a new process: the loader's seconds and outcome (torch not imported: starts fast)


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> Path:
    """A shared library whose constructor writes ``$RISKPPO_TEST_MARKER``."""
    d = tmp_path_factory.mktemp("evil")
    (d / "evil.c").write_text(EVIL_C)
    cc = native._compiler()
    assert cc is not None
    subprocess.run(
        [cc, "-shared", "-fPIC", str(d / "evil.c"), "-o", str(d / "evil.so")], check=True
    )
    return d / "evil.so"


@pytest.fixture
def root(monkeypatch, tmp_path) -> Path:
    """``RISKPPO_CACHE`` (its ``native`` directory holds the files), a loader not yet run, and
    the marker path a planted constructor would write."""
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("RISKPPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RISKPPO_TEST_MARKER", str(tmp_path / "PLANTED_CODE_RAN"))
    monkeypatch.delenv("RISKPPO_NATIVE", raising=False)
    monkeypatch.setenv(native._NOTICE, "")  # nothing told yet; restored (unset) after the test
    return tmp_path / "cache"


def run_child(env: dict[str, str], timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env, "OMP_NUM_THREADS": "1"}
    env.pop("RISKPPO_NATIVE", None)
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(timeout_s)], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache directory with a good build (made once, by another process)."""
    root = tmp_path_factory.mktemp("built")
    assert run_child({"RISKPPO_CACHE": str(root)}).stdout.endswith(" loaded\n")
    return root / "native"


def copy_build(built: Path, root: Path) -> Path:
    """The good build copied into ``root``'s cache (modes kept); the library's path."""
    (root / "native").mkdir(parents=True, mode=0o700)
    for f in built.iterdir():
        shutil.copy2(f, root / "native")
    (lib,) = (root / "native").glob("*.so")
    return lib


def key() -> str:
    cc = native._compiler()
    assert cc is not None
    return native._key(cc)


def plant(directory: Path, evil: Path, link: bool = False) -> Path:
    """What an attacker who knows the format plants: the library and a record of its hash."""
    digest = hashlib.sha256(evil.read_bytes()).hexdigest()
    lib = directory / f"lstm-{key()}-{digest[:16]}.so"
    directory.mkdir(parents=True, exist_ok=True)
    lib.unlink(missing_ok=True)
    if link:
        lib.symlink_to(evil)
    else:
        shutil.copy(evil, lib)
    (directory / f"lstm-{key()}.sha256").write_text(f"{digest}  {lib.name}\n")
    return lib


def assert_refused(root: Path, caplog, *words: str) -> None:
    """Not loaded, the planted constructor never ran, one logged line naming why."""
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        assert native.kernel() is None
        assert native.kernel() is None
    assert not (root.parent / "PLANTED_CODE_RAN").exists()
    reason = native.unavailable_reason()
    assert reason is not None and reason.startswith("refusing the native kernel cache")
    assert all(w in reason for w in words), reason
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and reason in lines[0], lines


@pytest.mark.parametrize("which", ["cache", "native"])
def test_a_library_planted_in_a_world_writable_cache_never_runs(root, evil, caplog, which):
    """A shared cache (or one an old version created under umask 000): anyone could have put
    the library there, so nothing in it is loaded, however well it is made."""
    plant(root / "native", evil)
    opened = root if which == "cache" else root / "native"
    opened.chmod(0o777)
    assert_refused(root, caplog, str(opened), "writable by group and others", "chmod go-w")


@pytest.mark.parametrize("what", ["library", "record"])
def test_a_symbolic_link_under_the_expected_name_is_not_followed(root, evil, caplog, what):
    lib = plant(root / "native", evil, link=what == "library")
    if what == "record":
        record = root / "native" / f"lstm-{key()}.sha256"
        record.rename(root / "elsewhere")
        record.symlink_to(root / "elsewhere")
    path = lib if what == "library" else root / "native" / f"lstm-{key()}.sha256"
    assert_refused(root, caplog, str(path), "is a symbolic link")


@as_root
@pytest.mark.parametrize("owned", ["library", "record", "native", "cache"])
def test_a_file_or_directory_of_another_user_is_refused(root, evil, caplog, owned):
    """Root plays the second local user: a file, the cache directory or a parent chowned to
    uid 65534, with modes that would otherwise pass."""
    paths = {"library": plant(root / "native", evil), "native": root / "native", "cache": root}
    paths["record"] = root / "native" / f"lstm-{key()}.sha256"
    os.chown(paths[owned], OTHER_UID, OTHER_UID)
    assert_refused(root, caplog, str(paths[owned]), f"owned by uid {OTHER_UID}")


@as_root
def test_a_symbolic_link_of_another_user_on_the_path_is_refused(monkeypatch, root, caplog):
    (root / "real").mkdir(parents=True)
    (root / "link").symlink_to(root / "real")
    os.lchown(root / "link", OTHER_UID, OTHER_UID)
    monkeypatch.setenv("RISKPPO_CACHE", str(root / "link"))
    assert_refused(root, caplog, str(root / "link"), "symbolic link owned by uid")


def test_a_sticky_world_writable_parent_is_accepted_and_a_plain_one_refused(
    monkeypatch, root, caplog
):
    """Like ``/tmp``: with the sticky bit others may add entries but not move the user's."""
    shared = root.parent / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    monkeypatch.setenv("RISKPPO_CACHE", str(shared / "mine"))
    assert native.kernel() is not None
    shared.chmod(0o777)
    monkeypatch.setattr(native, "_state", {})
    assert_refused(root, caplog, f"{shared} is writable by group and others")


def test_a_link_to_the_cache_is_judged_by_where_it_leads(monkeypatch, root, caplog):
    (root / "open").mkdir(parents=True, mode=0o777)
    (root / "open").chmod(0o777)
    (root / "via").symlink_to(root / "open")
    monkeypatch.setenv("RISKPPO_CACHE", str(root / "via"))
    assert_refused(root, caplog, f"{root / 'open'} is writable by group and others")


def test_directories_and_files_are_private_under_umask_000(monkeypatch, root, tmp_path):
    monkeypatch.delenv("RISKPPO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    old = os.umask(0)
    try:
        assert native.kernel() is not None
    finally:
        os.umask(old)
    made = [tmp_path / "xdg", tmp_path / "xdg" / "riskppo", tmp_path / "xdg" / "riskppo" / "native"]
    made += sorted(made[-1].iterdir())
    assert [oct(p.stat().st_mode & 0o7777) for p in made] == ["0o700"] * 4 + ["0o600"]


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, root, tmp_path):
    """The XDG Base Directory specification: a relative path is invalid and must be ignored."""
    monkeypatch.delenv("RISKPPO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert native._cache_dir() == tmp_path / "home" / ".cache" / "riskppo" / "native"
    assert native.kernel() is not None
    assert not (tmp_path / "relative").exists()


def test_a_library_that_is_not_what_its_record_says_is_rebuilt_not_loaded(
    root, built, evil, caplog
):
    """The recorded name with other bytes in it (an altered file): rebuilt, never loaded."""
    lib = copy_build(built, root)
    os.replace(shutil.copy(evil, root / "swap"), lib)
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        assert native.kernel() is not None
    assert not (root.parent / "PLANTED_CODE_RAN").exists()
    assert any(f"{lib} is missing or not as" in r.getMessage() for r in caplog.records)


def test_a_record_naming_a_file_outside_the_cache_is_not_followed(root, evil, caplog):
    """Only ``lstm-<key>-<hash>.so`` in the cache directory is ever opened."""
    shutil.copy(evil, root.parent / "evil.so")
    digest = hashlib.sha256(evil.read_bytes()).hexdigest()
    (root / "native").mkdir(parents=True, mode=0o700)
    record = root / "native" / f"lstm-{key()}.sha256"
    record.write_text(f"{digest}  ../../evil.so\n")
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        assert native.kernel() is not None
    assert not (root.parent / "PLANTED_CODE_RAN").exists()
    assert any(f"{record} does not parse" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("broken", ["truncated", "garbage"])
def test_a_broken_cached_library_is_rebuilt_by_the_next_process(root, built, broken):
    """A truncated library made dlopen die of SIGBUS, and an 8-byte one disabled the kernel for
    good; the next process (a subprocess, so a crash fails the test) rebuilds and loads it, and
    the one after uses that build."""
    lib = copy_build(built, root)
    good = lib.read_bytes()
    (root / "bad").write_bytes(good[: len(good) // 2] if broken == "truncated" else b"garbage!")
    os.replace(root / "bad", lib)
    for run in ("rebuilds", "reuses"):
        proc = run_child({"RISKPPO_CACHE": str(root)})
        assert proc.returncode == 0, proc.stderr[-2000:]  # -7: SIGBUS
        assert proc.stdout.endswith(" loaded\n"), proc.stdout
        assert ("rebuilding" in proc.stderr) == (run == "rebuilds"), proc.stderr


def alive(pid: int) -> bool:
    """Running (not a zombie that a container's init has not reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_hanging_compiler_is_killed_and_remembered_by_later_processes(root, tmp_path):
    """The first process kills the whole compiler (a shell and its child) at the timeout; the
    next skips at once, saying why and where it is remembered."""
    hang = tmp_path / "hangcc"
    hang.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {tmp_path / 'pid'}\nwait\n")
    hang.chmod(0o755)
    env = {"RISKPPO_CACHE": str(root), "CC": str(hang)}
    first = run_child(env, timeout_s=1.0)
    assert "did not finish within 1 s" in first.stdout, first.stdout + first.stderr
    assert not alive(int((tmp_path / "pid").read_text()))
    second = run_child(env)
    seconds, reason = second.stdout.split(" ", 1)
    assert float(seconds) < 1.0, second.stdout
    assert reason.startswith("BuildFailed: an earlier build failed") and ".failed" in reason


def test_a_failed_build_is_retried_after_a_day_or_when_the_compiler_changes(
    monkeypatch, root, tmp_path
):
    calls = tmp_path / "calls"
    bad = tmp_path / "badcc"
    bad.write_text(f"#!/bin/sh\necho x >> {calls}\necho 'badcc: broken' >&2\nexit 1\n")
    bad.chmod(0o755)
    monkeypatch.setenv("CC", str(bad))

    def attempts() -> int:
        native._state.clear()
        assert native.kernel() is None
        return len(calls.read_text().splitlines())

    assert attempts() == 1 and attempts() == 1
    assert "an earlier build failed" in str(native.unavailable_reason())
    (marker,) = (root / "native").glob("*.failed")
    past = time.time() - native.FAILURE_RETRY_S - 60
    os.utime(marker, (past, past))
    assert attempts() == 2
    bad.write_text(bad.read_text() + "# upgraded\n")  # a new compiler: a new key
    assert attempts() == 3


def test_a_killed_builders_directory_is_removed_by_the_next_build(monkeypatch, root, tmp_path):
    slow = tmp_path / "slowcc"  # writes part of its output (the last argument), then hangs
    started = tmp_path / "started"  # its pid, once the output is there
    slow.write_text(
        f'#!/bin/sh\nfor a; do out=$a; done\necho partial > "$out"\necho $$ > {started}\n'
        "exec sleep 60\n"
    )
    slow.chmod(0o755)
    env = {**os.environ, "RISKPPO_CACHE": str(root), "CC": str(slow), "OMP_NUM_THREADS": "1"}
    builder = subprocess.Popen(
        [sys.executable, "-c", CHILD, "60"], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not started.read_text(errors="ignore").strip() if started.exists() else True:
        assert time.monotonic() < deadline and builder.poll() is None
        time.sleep(0.05)
    builder.kill()  # SIGKILL: no cleanup runs
    builder.wait()
    os.kill(int(started.read_text()), signal.SIGKILL)  # the compiler it started
    (left,) = (root / "native").glob(cache.BUILD_PREFIX + "*")
    assert left.name.startswith(f"{cache.BUILD_PREFIX}{builder.pid}-")
    assert native.kernel() is not None  # builds with the real compiler (CC unset)
    assert not left.exists()


def test_only_build_directories_of_gone_builders_count_as_stale(tmp_path):
    """Held (its lock) or just made by a live pid: kept. Unlocked with an exited pid, or older
    than the limit: removed."""
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    past = time.time() - cache.STALE_BUILD_S - 60
    with cache.build_dir(str(tmp_path)) as held:
        os.utime(held, (past, past))
        gone = tmp_path / f"{cache.BUILD_PREFIX}{exited.pid}-a"
        young = tmp_path / f"{cache.BUILD_PREFIX}{os.getpid()}-b"
        old = tmp_path / f"{cache.BUILD_PREFIX}{os.getpid()}-c"
        for d in (gone, young, old):
            d.mkdir()
        os.utime(old, (past, past))
        assert sorted(cache.clean_stale_builds(str(tmp_path))) == sorted([gone.name, old.name])
        assert Path(held).exists() and young.exists()
    assert not Path(held).exists()


def test_an_edited_header_or_source_is_rebuilt_not_served_stale(monkeypatch, root, tmp_path):
    """The library is keyed by every source and header: a copy of the sources whose shared
    header (then one source) is edited gives a new build, never the cached one."""
    src = tmp_path / "src"
    src.mkdir()
    for f in [*native.SOURCES, *native.HEADERS]:
        shutil.copy(f, src / f.name)
    header, adam = src / "common.h", src / "adam.c"
    header.write_text(header.read_text().replace("#endif", "#define RISKPPO_MARK 7\n#endif"))
    mark_c = '#include "common.h"\nint mark(void) { return RISKPPO_MARK; }\n'
    adam.write_text(adam.read_text() + mark_c)
    monkeypatch.setattr(native, "SOURCES", sorted(src.glob("*.c")))
    monkeypatch.setattr(native, "HEADERS", sorted(src.glob("*.h")))

    def mark() -> int:
        native._state.clear()
        lib = native.kernel()
        assert lib is not None, native.unavailable_reason()
        return int(lib.mark())

    assert mark() == 7
    header.write_text(header.read_text().replace("RISKPPO_MARK 7", "RISKPPO_MARK 8"))
    assert mark() == 8
    adam.write_text(adam.read_text().replace("return RISKPPO_MARK;", "return -RISKPPO_MARK;"))
    assert mark() == -8
    assert len(list((root / "native").glob("*.so"))) == 3


def test_every_c_source_and_header_is_compiled_keyed_and_shipped():
    """What the package directory holds is what the build compiles and hashes, and what the
    wheel ships (pyproject's package-data)."""
    here = Path(native.__file__).parent
    assert {f.name for f in native.SOURCES} == {f.name for f in here.glob("*.c")} >= {
        "lstm.c", "actor_step.c", "adam.c"
    }  # fmt: skip
    assert {f.name for f in native.HEADERS} == {"common.h"}
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((here.parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["riskppo"]
    package = here.parents[1]
    for f in [*native.SOURCES, *native.HEADERS]:
        rel = f.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, p) for p in patterns), rel
