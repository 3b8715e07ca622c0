"""Every relative link of README.md and docs/*.md opens: the file exists and, for `page#anchor`,
the page has a heading with that GitHub anchor."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and anchor not in anchors(dest)):
            bad.append(target)
    return bad


def test_every_relative_link_opens():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert {p: broken_links(p) for p in pages if broken_links(p)} == {}


def test_a_broken_link_is_found(tmp_path: Path):
    (tmp_path / "a.md").write_text("# Top\n[ok](a.md#top) [gone](b.md) [no](a.md#nowhere)\n")
    assert broken_links(tmp_path / "a.md") == ["b.md", "a.md#nowhere"]
