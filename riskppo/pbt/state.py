"""The scheduler's state after each completed round, and resuming from it (``--resume``).

``RUN_DIR/pbt/state.json`` is rewritten atomically (temp file, fsync, rename; never through a
symlink: :mod:`riskppo.safefs`) when a round is
complete: its results recorded *and* the exploits for the next round decided. It holds::

    round            rounds completed
    config_sha256    SHA-256 of RUN_DIR/config.yaml (the run's config; a changed file is refused)
    rng              the bit generator state of the exploit/explore decisions
    members          every member: hyperparameters, score, step, recorded checkpoint, history,
                     failures, frozen
    pending          the exploits decided for the next round (target → history line to be)
    recorded         per member, the checkpoint names the logs describe
    failures         every failed interval so far
    logs             the byte length of pbt_members.jsonl and pbt_history.jsonl at that point

A coordinator killed mid-round leaves its logs longer than ``logs`` says, member directories
with checkpoints nobody recorded, and exploit sources archived for a round that never finished.
:func:`prepare_resume` cuts the logs back, removes those archives; the scheduler rolls every
member directory back to its recorded checkpoint. From there the population runs the round again
with the same tasks and the same random decisions as a run that was never interrupted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from riskppo.config import Config, ConfigError
from riskppo.jsonable import jsonable
from riskppo.pbt.audit import SOURCES
from riskppo.pbt.member import PopulationMember
from riskppo.persist.checkpoint import CheckpointError, verify_checkpoint
from riskppo.persist.files import sha256
from riskppo.safefs import ensure_real_dir, open_nofollow, write_text_atomic

STATE = Path("pbt") / "state.json"
LOGS = ("pbt_members.jsonl", "pbt_history.jsonl")
STATE_VERSION = 1
_ARCHIVE = re.compile(r"r(\d+)-m\d+")


class ResumeError(RuntimeError):
    """A directory that cannot be resumed as a PBT run; the message is one line."""


@dataclasses.dataclass
class SchedulerState:
    """What :class:`riskppo.pbt.local.PBTRun` needs to go on after ``round`` completed rounds."""

    round: int
    rng: dict[str, Any]
    members: list[PopulationMember]
    pending: dict[int, dict[str, Any]]
    recorded: dict[int, set[str]]
    failures: list[dict[str, Any]]


def is_pbt_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` already holds (the start of) a PBT run."""
    return any((run_dir / p).exists() for p in (STATE, Path("members"), *LOGS))


def save_state(run_dir: Path, s: SchedulerState) -> None:
    """Write ``RUN_DIR/pbt/state.json`` atomically (see the module docstring)."""
    logs = {name: _size(run_dir / name) for name in LOGS}
    data = {
        "version": STATE_VERSION,
        "round": s.round,
        "config_sha256": sha256(run_dir / "config.yaml"),
        "rng": s.rng,
        "members": [dataclasses.asdict(m) for m in s.members],
        "pending": {str(k): v for k, v in s.pending.items()},
        "recorded": {str(k): sorted(v) for k, v in s.recorded.items()},
        "failures": s.failures,
        "logs": logs,
    }
    path = run_dir / STATE
    ensure_real_dir(path.parent)
    write_text_atomic(path, json.dumps(json_safe(data), indent=1))  # never through a link


def load_state(run_dir: Path) -> tuple[SchedulerState, dict[str, int]]:
    """The state of the last completed round and the log lengths it recorded; a directory that
    is not a resumable PBT run raises :class:`ResumeError`."""
    path = run_dir / STATE
    if not path.is_file():
        what = "was started by an older riskppo" if is_pbt_run(run_dir) else "is not a PBT run"
        raise ResumeError(f"{run_dir} {what}: no {STATE}; nothing to resume")
    try:
        data = json.loads(path.read_text())
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {STATE_VERSION}")
        if data["config_sha256"] != sha256(run_dir / "config.yaml"):
            raise ResumeError(
                f"{run_dir / 'config.yaml'} changed since the run started; restore it to resume"
            )
        state = SchedulerState(
            round=int(data["round"]),
            rng=data["rng"],
            members=[_member_from_json(m, run_dir) for m in data["members"]],
            pending={int(k): _in_run(v, run_dir) for k, v in data["pending"].items()},
            recorded={int(k): set(v) for k, v in data["recorded"].items()},
            failures=list(data["failures"]),
        )
        logs = {name: int(data["logs"][name]) for name in LOGS}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ResumeError(f"{path}: unreadable PBT state ({exc}); cannot resume") from exc
    check_round_files(run_dir, state)
    return state, logs


def check_round_files(run_dir: Path, state: SchedulerState) -> None:
    """Refuse (:class:`ResumeError`, one line naming it) a last completed round whose files do
    not read back: a member's recorded checkpoint or a decided exploit's archived source that
    fails its checks (a truncated write, a damaged copy). The round before it is not kept, so
    it cannot be trained again."""
    paths = [m.checkpoint for m in state.members if m.checkpoint is not None]
    paths += [Path(ex["source_checkpoint"]) for ex in state.pending.values()]
    for path in paths:
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            raise ResumeError(
                f"{run_dir}: round {state.round} does not read back ({exc}); it cannot be "
                f"resumed: start a new run with `riskppo pbt --config "
                f"{run_dir / 'config.yaml'} --run-dir DIR`"
            ) from None


def check_resume_config(run_dir: Path, cfg: Config) -> None:
    """Refuse to resume ``run_dir`` with a config other than its own ``config.yaml`` (only
    ``pbt.workers``, which does not change results, may differ)."""
    stored = Config.from_yaml(run_dir / "config.yaml").to_dict()
    given = cfg.to_dict()
    for d in (stored, given):
        d["pbt"].pop("workers", None)
    diff = sorted(_diff(stored, given))
    if diff:
        shown = ", ".join(diff[:3]) + (f" and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise ConfigError(
            f"the config differs from the one {run_dir} was started with at {shown}; resume "
            "with the run's own config (drop --config/--set)"
        )


def prepare_resume(run_dir: Path, state: SchedulerState, logs: dict[str, int]) -> None:
    """Undo what a round that never completed left behind: log lines past the recorded
    lengths and exploit sources archived at or after round ``state.round`` (still-pending
    exploits of the resumed round keep theirs). Member directories: see
    :func:`riskppo.pbt.local.rollback_member_dir`."""
    for name, size in logs.items():
        path = run_dir / name
        if path.is_file() and path.stat().st_size > size:
            fd = open_nofollow(path, os.O_WRONLY)  # a link is refused, its target untouched
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
    keep = {Path(ex["source_checkpoint"]).name for ex in state.pending.values()}
    sources = run_dir / SOURCES
    for p in sorted(sources.iterdir()) if sources.is_dir() else []:
        m = _ARCHIVE.fullmatch(p.name)
        stale = p.name.startswith(".") or (m is not None and int(m.group(1)) >= state.round)
        if stale and p.name not in keep:
            shutil.rmtree(p, ignore_errors=True)


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted paths where the nested dicts ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in a.keys() | b.keys():
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _member_from_json(d: dict[str, Any], run_dir: Path) -> PopulationMember:
    """A member as :func:`save_state` wrote it; a -inf score comes back as None, which every
    ranking takes as -inf too. Its checkpoint is the one of that name in its directory of
    ``run_dir`` (the state names it as the run was called then: a copied or moved run, or one
    resumed from another working directory, reads its own files, not the original's)."""
    m = PopulationMember(**d)
    if d["checkpoint"] is not None:
        name = Path(d["checkpoint"]).name
        m.checkpoint = run_dir / "members" / f"m{m.id}" / "checkpoints" / name
    return m


def _in_run(exploit: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """A decided exploit whose archived source is the one of that name in ``run_dir`` (see
    :func:`_member_from_json`)."""
    source = run_dir / SOURCES / Path(exploit["source_checkpoint"]).name
    return {**exploit, "source_checkpoint": str(source)}


json_safe = jsonable  # the name the PBT modules use
