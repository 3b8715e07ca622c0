"""Exploit sources that stay verifiable after the run (R-PBT-5), and the audit that checks them.

A member's checkpoints are pruned to ``checkpoint.keep_last`` while it trains, so the checkpoint
an exploit copied from is usually gone by the end of the run. When the scheduler decides an
exploit it therefore first copies the source checkpoint into the PBT run directory::

    RUN_DIR/pbt/exploit_sources/r<round>-m<source>/   a verified copy, never pruned
                                                      (Ray: <target>-from-<source>-<ckpt>/)

and records that copy as the history line's ``source_checkpoint`` (the member's own path as
``source_original``) together with ``source_manifest_sha256``, the SHA-256 of its
``manifest.json`` (which lists every file's SHA-256, so one digest pins the whole checkpoint).
The worker exploits from that copy and refuses it if its manifest hash differs, so the recorded
digest is the digest of exactly what was loaded. :func:`verify_history` re-checks every line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from riskppo.pbt.member import manifest_sha256
from riskppo.persist.checkpoint import CheckpointError, verify_checkpoint

SOURCES = Path("pbt") / "exploit_sources"


def archive_source(run_dir: Path, checkpoint: Path, name: str) -> tuple[Path, str]:
    """Copy the exploit source ``checkpoint`` to ``RUN_DIR/pbt/exploit_sources/<name>`` (once
    per name: the local backend uses ``r<round>-m<source>``, Ray
    ``<target>-from-<source>-<checkpoint>``), verify the copy; returns it and its manifest
    SHA-256.

    Raises :class:`CheckpointError` when the source does not verify (the exploit is then not
    made). The copy goes through a temporary sibling renamed into place, so a half-written copy
    is never taken for a finished one."""
    dest = run_dir / SOURCES / name
    if not dest.is_dir():
        verify_checkpoint(checkpoint)
        tmp = dest.with_name(f".{dest.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(checkpoint, tmp)
        tmp.rename(dest)
    verify_checkpoint(dest)
    return dest, manifest_sha256(dest)


def verify_history(run_dir: Path) -> list[dict[str, Any]]:
    """Check every line of ``RUN_DIR/pbt_history.jsonl``: its ``source_checkpoint`` exists,
    every file matches the checkpoint's manifest, and the manifest's SHA-256 equals the line's
    ``source_manifest_sha256`` (likewise ``checkpoint_after`` when the line records its hash).

    Returns one ``{"line", "member", "round", "source_checkpoint", "ok", "problems"}`` per line;
    :func:`assert_history_verifies` raises on any problem."""
    path = run_dir / "pbt_history.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    report = []
    for i, text in enumerate(lines, 1):
        if not text.strip():
            continue
        line = json.loads(text)
        problems = _check(line, "source_checkpoint", "source_manifest_sha256", required=True)
        problems += _check(line, "checkpoint_after", "checkpoint_after_sha256", required=False)
        report.append(
            {
                "line": i,
                "member": line.get("member"),
                "round": line.get("round"),
                "source_checkpoint": line.get("source_checkpoint"),
                "ok": not problems,
                "problems": problems,
            }
        )
    return report


def _check(line: dict[str, Any], path_key: str, hash_key: str, *, required: bool) -> list[str]:
    recorded, path = line.get(hash_key), line.get(path_key)
    if recorded is None:
        return [f"no {hash_key} recorded"] if required else []
    if not isinstance(path, str):
        return [f"no {path_key} recorded"]
    try:
        verify_checkpoint(Path(path))
        actual = manifest_sha256(path)
    except (CheckpointError, OSError) as exc:
        return [f"{path_key}: {exc}"]
    if actual != recorded:
        return [f"{path_key}: manifest SHA-256 {actual[:12]}… ≠ recorded {str(recorded)[:12]}…"]
    return []


def assert_history_verifies(run_dir: Path) -> int:
    """Raise :class:`CheckpointError` listing every history line that does not verify; returns
    the number of lines checked."""
    report = verify_history(run_dir)
    bad = [r for r in report if not r["ok"]]
    if bad:
        detail = "; ".join(f"line {r['line']} (m{r['member']}): {r['problems']}" for r in bad)
        raise CheckpointError(f"{run_dir}: {len(bad)} exploit(s) do not verify: {detail}")
    return len(report)
