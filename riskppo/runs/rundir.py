"""A run directory on disk, below the code that drives runs (:mod:`riskppo.cli.runner`).

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

A run directory may come from someone else, so it is trusted no further than this: files are
written through :mod:`riskppo.safefs` (never through a symlink); a ``ckpt-*`` entry that is a
symlink or not a directory is ignored with a warning; the checkpoint a run continues or is
evaluated from must have been written with the run's ``config.yaml`` (:func:`check_belongs`);
a new run starts only in an empty directory (:func:`start_clean`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from riskppo.agent import DistributionalPPO
from riskppo.config import Config
from riskppo.persist.checkpoint import (
    CheckpointError,
    read_checkpoint,
    resolve_latest,
    verify_checkpoint,
    write_error_reason,
)
from riskppo.runs.lock import LOCK_NAME
from riskppo.safefs import (
    fsync_dir,
    open_nofollow,
    remove_entry,
    write_text_atomic,
)

# Config keys that may differ between a run's config.yaml and its checkpoints: how long to
# train (raise total_timesteps to continue a finished run), where and how fast to compute, how
# often to save and what to log. Every other key defines the model or its training.
RUN_ONLY_KEYS = (
    "total_timesteps",
    "device",
    "num_threads",
    "compile",
    "cuda_graphs",
    "checkpoint",
    "monitor",
)
# What a run writes into its directory (--force deletes these and nothing else).
_RUN_ENTRY = re.compile(
    r"config\.yaml|metrics\.jsonl|alerts\.jsonl|eval\.json|evaluation(?:_\w+)?\.(?:json|txt)"
    r"|events\.out\.tfevents\..+|checkpoints|backtest_\w+|robustness|\..+\.tmp-[\w-]+"
)


class RunDirError(RuntimeError):
    """A run directory cannot be used as asked (it already holds a run, or foreign files)."""


def restart_command(run_dir: Path) -> str:
    """The command that trains ``run_dir`` again from the start, with its own config."""
    d = shlex.quote(str(run_dir))
    return (
        f"riskppo train --config {shlex.quote(str(run_dir / 'config.yaml'))} --run-dir {d} --force"
    )


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def checkpoint_dirs(ckpts: Path) -> list[Path]:
    """The ``ckpt-*`` directories in ``ckpts``, oldest first. An entry that is a symlink or not
    a directory is no checkpoint of this run: it is ignored, with a warning."""
    found: list[Path] = []
    for p in sorted(ckpts.glob("ckpt-*")):
        mode = os.lstat(p).st_mode
        if stat.S_ISDIR(mode):
            found.append(p)
        else:
            what = "a symlink" if stat.S_ISLNK(mode) else "not a directory"
            warnings.warn(f"ignoring {p}: {what}, not a checkpoint of this run", stacklevel=1)
    return found


def save_run_checkpoint(model: DistributionalPPO, run_dir: Path, keep_last: int) -> Path:
    """Save ``ckpt-<steps>``, then point ``latest`` at it (written last, atomically), then
    remove all but the newest ``keep_last`` checkpoints. A write error is one
    :class:`CheckpointError`; ``latest`` then still names the previous checkpoint."""
    ckpts = checkpoint_dir(run_dir)
    path = model.save(ckpts / f"ckpt-{model.num_timesteps:012d}")
    try:
        write_text_atomic(ckpts / "latest", path.name)
    except OSError as exc:
        raise CheckpointError(
            f"cannot write {ckpts / 'latest'}: {write_error_reason(exc)}; it still names the "
            "previous checkpoint"
        ) from exc
    for p in checkpoint_dirs(ckpts)[:-keep_last]:
        if p.name != path.name:
            shutil.rmtree(p, ignore_errors=True)
    return path


def _real_checkpoint_dir(run_dir: Path) -> Path:
    ckpts = checkpoint_dir(run_dir)
    if ckpts.is_symlink():
        raise CheckpointError(
            f"{ckpts} is a symlink; a run's checkpoints must be inside its directory"
        )
    return ckpts


def latest_checkpoint(run_dir: Path) -> Path:
    ckpts = _real_checkpoint_dir(run_dir)
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
    ckpts = _real_checkpoint_dir(run_dir)
    candidates: list[Path] = []
    if (ckpts / "latest").is_file():
        try:
            candidates.append(latest_checkpoint(run_dir))
        except CheckpointError as exc:
            warnings.warn(f"ignoring the latest pointer: {exc}", stacklevel=2)
    older = checkpoint_dirs(ckpts)[::-1] if ckpts.is_dir() else []
    candidates += [p for p in older if p not in candidates]
    for path in candidates:
        try:
            verify_checkpoint(path)
            return path
        except CheckpointError as exc:
            warnings.warn(f"skipping bad checkpoint: {exc}", stacklevel=2)
    raise CheckpointError(
        f"{run_dir}: no usable checkpoint in {ckpts}; pass a run directory written by "
        f"`riskppo train`, or start this one again with: {restart_command(run_dir)}"
    )


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_differences(written: Config, run: Config) -> list[tuple[str, Any, Any]]:
    """``(key, written value, run value)`` of every config key outside :data:`RUN_ONLY_KEYS`
    that differs, in the config's order."""
    a, b = _flat(written.to_dict()), _flat(run.to_dict())
    diffs = []
    for key in dict.fromkeys([*a, *b]):
        if key.split(".")[0] not in RUN_ONLY_KEYS and a.get(key) != b.get(key):
            diffs.append((key, a.get(key), b.get(key)))
    return diffs


def check_belongs(checkpoint: Path, run_cfg: Config) -> None:
    """Refuse (:class:`CheckpointError`) a checkpoint whose config differs from the run's
    ``config.yaml`` in a key that defines the model or its training (all but
    :data:`RUN_ONLY_KEYS`): it was copied in from another run."""
    diffs = config_differences(read_checkpoint(checkpoint).config, run_cfg)
    if not diffs:
        return
    key, written, says = diffs[0]
    more = f" (and {', '.join(k for k, _, _ in diffs[1:4])}{', …' if len(diffs) > 4 else ''})"
    raise CheckpointError(
        f"checkpoint {checkpoint.name} was written with {key}={written} but config.yaml says "
        f"{says}{more if len(diffs) > 1 else ''}; this checkpoint does not belong to this run"
    )


def run_checkpoint(run_dir: Path) -> tuple[Config, Path]:
    """The run's ``config.yaml`` and its newest good checkpoint that belongs to it
    (:func:`latest_good_checkpoint`, :func:`check_belongs`)."""
    path = latest_good_checkpoint(run_dir)
    cfg = Config.from_yaml(run_dir / "config.yaml")
    check_belongs(path, cfg)
    return cfg, path


def load_for_evaluation(run_dir: Path) -> tuple[Path, DistributionalPPO]:
    """The run's newest good checkpoint (:func:`latest_good_checkpoint`; checked to belong to
    the run when it has a ``config.yaml``) loaded without its training env: a backtest makes
    its own evaluation env."""
    ckpt = latest_good_checkpoint(run_dir)
    if (run_dir / "config.yaml").exists():  # a run's own checkpoint, not one copied in
        check_belongs(ckpt, Config.from_yaml(run_dir / "config.yaml"))
    return ckpt, DistributionalPPO.load(ckpt, rebuild_env=False)


def start_clean(run_dir: Path, *, force: bool) -> list[str]:
    """Make sure a new run starts in an empty ``run_dir`` (its ``.lock`` aside).

    A directory that holds a run is refused unless ``force``, which deletes the files and
    folders a run writes (symlinks are unlinked, never followed) and returns their names.
    Anything else in it is never deleted: :class:`RunDirError`.
    """
    entries = sorted(e for e in os.listdir(run_dir) if e != LOCK_NAME)
    foreign = [e for e in entries if not _RUN_ENTRY.fullmatch(e)]
    if foreign:
        names = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
        raise RunDirError(
            f"{run_dir} is not empty and holds files a run does not write ({names}); choose "
            "a new or empty --run-dir"
        )
    if entries and not force:
        raise RunDirError(
            f"{run_dir} already holds a run; use --resume {run_dir} to continue it, or --force "
            "to delete its contents and start clean, or another --run-dir"
        )
    for name in entries:
        remove_entry(run_dir / name)
    return entries


def drop_metrics_after(path: Path, step: int) -> int:
    """Drop the rows of a ``metrics.jsonl`` whose ``time/total_timesteps`` is after ``step``,
    and a torn last line (a process killed mid-write); returns how many lines were dropped.

    Every other line is kept as it is, in order. The file is streamed line by line into a
    temporary sibling (memory: one line, whatever the file's size), fsynced, then renamed over
    it, so a crash leaves either the old or the new file; without a line to drop the file is
    left untouched.
    """
    if not os.path.lexists(path):
        return 0
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    dropped = 0
    try:  # streamed: a long log costs one line of memory; links are refused, never followed
        with (
            os.fdopen(open_nofollow(path, os.O_RDONLY), "rb") as src,
            os.fdopen(open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as out,
        ):
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
            fsync_dir(path.parent)
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
    :func:`latest_good_checkpoint`), checked to belong to the run (:func:`check_belongs`) and
    loaded; closed on exit."""
    if checkpoint is None:
        cfg, path = run_checkpoint(run_dir)
    else:
        path, cfg = checkpoint, Config.from_yaml(run_dir / "config.yaml")
        check_belongs(path, cfg)
    model = DistributionalPPO.load(path, env=cfg.env.id)
    try:
        yield cfg, model
    finally:
        model.close()
