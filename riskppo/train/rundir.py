"""A run directory on disk, below the code that drives runs (:mod:`riskppo.runner`).

::

    RUN_DIR/.lock                  flock held by the process writing the run (train.runlock)
    RUN_DIR/config.yaml            resolved config
    RUN_DIR/metrics.jsonl          one JSON object per logged update (+ TensorBoard events)
    RUN_DIR/alerts.jsonl           first occurrence of each alert
    RUN_DIR/checkpoints/ckpt-N/    checkpoint directories; checkpoints/latest names the newest
    RUN_DIR/eval.json              final evaluation (trading: the validation period)
    RUN_DIR/evaluation[_<split>].{json,txt}   the latest ``riskppo eval`` (trading: per split)
    RUN_DIR/backtest_test/         trading: the final backtest report (riskppo.evaluation)

On ``--resume`` the ``metrics.jsonl`` rows logged after the checkpoint it resumes from are
dropped (:func:`drop_metrics_after`): the resumed run logs those steps again.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from riskppo.config import Config
from riskppo.train.checkpoint import CheckpointError, resolve_latest, verify_checkpoint
from riskppo.train.trainer import DistributionalPPO


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def save_run_checkpoint(model: DistributionalPPO, run_dir: Path, keep_last: int) -> Path:
    """Save ``ckpt-<steps>``, then point ``latest`` at it (written last, atomically)."""
    ckpts = checkpoint_dir(run_dir)
    path = model.save(ckpts / f"ckpt-{model.num_timesteps:012d}")
    tmp = ckpts / ".latest.tmp"
    tmp.write_text(path.name)
    os.replace(tmp, ckpts / "latest")
    old = sorted(p for p in ckpts.glob("ckpt-*") if p.is_dir())
    for p in old[:-keep_last]:
        if p.name != path.name:
            shutil.rmtree(p, ignore_errors=True)
    return path


def latest_checkpoint(run_dir: Path) -> Path:
    ckpts = checkpoint_dir(run_dir)
    pointer = ckpts / "latest"
    if not pointer.is_file():
        raise CheckpointError(
            f"{run_dir}: no checkpoints/latest pointer (no completed checkpoint); pass a run "
            "directory written by `riskppo train`"
        )
    return resolve_latest(ckpts)  # R-REL-3: only a sibling checkpoint, never outside the run


def latest_good_checkpoint(run_dir: Path) -> Path:
    """The newest checkpoint that verifies (R-REL-3): ``latest`` first, then older ones, each
    fallback announced with a warning naming what was wrong (a ``latest`` pointer that names
    no sibling checkpoint included). Used by ``--resume``, eval and backtest."""
    if not run_dir.is_dir():
        raise CheckpointError(
            f"{run_dir}: no such run directory; pass a run directory written by `riskppo train`"
        )
    ckpts = checkpoint_dir(run_dir)
    candidates: list[Path] = []
    if (ckpts / "latest").is_file():
        try:
            candidates.append(latest_checkpoint(run_dir))
        except CheckpointError as exc:
            warnings.warn(f"ignoring the latest pointer: {exc}", stacklevel=2)
    older = sorted((p for p in ckpts.glob("ckpt-*") if p.is_dir()), reverse=True)
    candidates += [p for p in older if p not in candidates]
    for path in candidates:
        try:
            verify_checkpoint(path)
            return path
        except CheckpointError as exc:
            warnings.warn(f"skipping bad checkpoint: {exc}", stacklevel=2)
    raise CheckpointError(
        f"{run_dir}: no usable checkpoint in {ckpts}; pass a run directory written by "
        "`riskppo train`, or train this one again (without --resume)"
    )


def drop_metrics_after(path: Path, step: int) -> int:
    """Drop the rows of a ``metrics.jsonl`` whose ``time/total_timesteps`` is after ``step``,
    and a torn last line (a process killed mid-write); returns how many lines were dropped.

    Every other line is kept as it is, in order. The file is streamed line by line into a
    temporary sibling (memory: one line, whatever the file's size), fsynced, then renamed over
    it, so a crash leaves either the old or the new file; without a line to drop the file is
    left untouched.
    """
    if not path.is_file():
        return 0
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    dropped = 0
    try:
        with open(path, "rb") as src, open(tmp, "wb") as out:
            for line, last in _lines_with_last(src):
                if _after(line, step, last):
                    dropped += 1
                else:
                    out.write(line + b"\n")
            if dropped:
                out.flush()
                os.fsync(out.fileno())
        if dropped:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return dropped


def _lines_with_last(f: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """The lines of ``f`` without their newline, each with whether it is the last one."""
    previous: bytes | None = None
    for raw in f:
        if previous is not None:
            yield previous, False
        previous = raw.rstrip(b"\r\n")
    if previous is not None:
        yield previous, True


def _after(line: bytes, step: int, last: bool) -> bool:
    """Whether a metrics line goes: a row logged after ``step``, or a torn (unparsable) last
    line; any other unparsable line stays."""
    try:
        row = json.loads(line)
    except ValueError:
        return last
    logged = row.get("time/total_timesteps") if isinstance(row, dict) else None
    return isinstance(logged, int | float) and logged > step


@contextmanager
def open_run(
    run_dir: Path, checkpoint: Path | None = None
) -> Iterator[tuple[Config, DistributionalPPO]]:
    """The run's config and ``checkpoint`` (default: its newest good one,
    :func:`latest_good_checkpoint`), loaded; closed on exit."""
    path = checkpoint if checkpoint is not None else latest_good_checkpoint(run_dir)
    cfg = Config.from_yaml(run_dir / "config.yaml")
    model = DistributionalPPO.load(path, env=cfg.env.id)
    try:
        yield cfg, model
    finally:
        model.close()
