"""Runs on disk: a run directory with its config, checkpoints, metrics and final evaluation.

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
from typing import Any

from riskppo.config import Config
from riskppo.envs.registration import TRADING_ID
from riskppo.evaluation.summary import run_label
from riskppo.train.checkpoint import CheckpointError, resolve_latest, verify_checkpoint
from riskppo.train.runlock import lock_run
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
    fallback announced with a warning naming what was wrong."""
    ckpts = checkpoint_dir(run_dir)
    candidates: list[Path] = []
    if (ckpts / "latest").is_file():
        candidates.append(latest_checkpoint(run_dir))
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
        "`riskppo train`, or start the run again without --resume"
    )


def _periodic(run_dir: Path, cfg: Config) -> Any:
    every = cfg.checkpoint.every_updates

    def callback(model: DistributionalPPO, _metrics: Any) -> bool:
        if every and model.n_updates % every == 0:
            save_run_checkpoint(model, run_dir, cfg.checkpoint.keep_last)
        return True

    return callback


def train_run(cfg: Config, run_dir: Path, *, progress_bar: bool = True) -> DistributionalPPO:
    """Train ``cfg`` into ``run_dir``; save a final checkpoint and an evaluation.

    Holds the run directory's lock throughout: another process on ``run_dir`` raises
    :class:`~riskppo.train.runlock.RunLockError` before anything in it is written.
    """
    with lock_run(run_dir, "riskppo train"):
        return _train_run(cfg, run_dir, progress_bar=progress_bar)


def _train_run(cfg: Config, run_dir: Path, *, progress_bar: bool) -> DistributionalPPO:
    cfg.to_yaml(run_dir / "config.yaml")
    model = DistributionalPPO(config=cfg, run_dir=run_dir)
    print(f"riskppo: training {run_label(cfg)} for {cfg.total_timesteps:,} steps → {run_dir}")
    model.learn(cfg.total_timesteps, progress_bar=progress_bar, callback=_periodic(run_dir, cfg))
    return _finish(model, run_dir, cfg)


def resume_run(run_dir: Path, *, progress_bar: bool = True) -> DistributionalPPO:
    """Continue ``run_dir`` from its latest checkpoint up to the config's total_timesteps.

    The ``metrics.jsonl`` rows logged after that checkpoint (by the run that was stopped) are
    dropped first, since the resumed run logs those steps again. A run that is already complete
    is not trained further; its evaluation (and report) is written only if it is missing.
    Holds the run directory's lock throughout, like :func:`train_run`.
    """
    if not run_dir.is_dir():
        raise FileNotFoundError(
            f"{run_dir}: no such run directory; pass a run directory written by `riskppo train`"
        )
    with lock_run(run_dir, "riskppo train --resume"):
        return _resume_run(run_dir, progress_bar=progress_bar)


def _resume_run(run_dir: Path, *, progress_bar: bool) -> DistributionalPPO:
    path = latest_good_checkpoint(run_dir)
    cfg = Config.from_yaml(run_dir / "config.yaml")
    model = DistributionalPPO.load(path, env=cfg.env.id, run_dir=run_dir)
    done, total = model.num_timesteps, cfg.total_timesteps
    if done >= total:
        print(f"riskppo: {run_dir} is complete ({done:,} of {total:,} steps trained, {path.name})")
        if _finished(run_dir, cfg):
            print(f"riskppo: nothing to do; its evaluation is in {run_dir / 'eval.json'}")
            model.close()
            return model
        print("riskppo: writing its missing evaluation")
        return _finish(model, run_dir, cfg)
    dropped = drop_metrics_after(run_dir / "metrics.jsonl", done)
    print(f"riskppo: resuming {run_dir} at step {done:,} of {total:,} ({total - done:,} to go)")
    if dropped:
        print(
            f"riskppo: dropped {dropped} metrics.jsonl row(s) logged after {path.name} by the "
            "stopped run; the resumed run logs those steps again"
        )
    model.learn(
        total - done,
        progress_bar=progress_bar,
        reset_num_timesteps=False,
        callback=_periodic(run_dir, cfg),
    )
    return _finish(model, run_dir, cfg)


def _finished(run_dir: Path, cfg: Config) -> bool:
    """Whether :func:`_finish` has written the run's evaluation (and, for trading, report)."""
    if not (run_dir / "eval.json").is_file():
        return False
    return cfg.env.id != TRADING_ID or (run_dir / "backtest_test" / "report.html").is_file()


def drop_metrics_after(path: Path, step: int) -> int:
    """Drop the rows of a ``metrics.jsonl`` whose ``time/total_timesteps`` is after ``step``,
    and a torn last line (a process killed mid-write); returns how many lines were dropped.

    Every other line is kept as it is, in order. The file is replaced atomically (a temporary
    sibling, fsynced, then renamed), so a crash leaves either the old or the new file.
    """
    if not path.is_file():
        return 0
    lines = path.read_text().splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:
                continue  # torn last line
            keep.append(line)
            continue
        logged = row.get("time/total_timesteps") if isinstance(row, dict) else None
        if isinstance(logged, int | float) and logged > step:
            continue
        keep.append(line)
    dropped = len(lines) - len(keep)
    if dropped:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(tmp, "w") as f:
            f.write("".join(line + "\n" for line in keep))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return dropped


def _finish(model: DistributionalPPO, run_dir: Path, cfg: Config) -> DistributionalPPO:
    save_run_checkpoint(model, run_dir, cfg.checkpoint.keep_last)
    stats = model.evaluate(n_episodes=10, deterministic=True)
    (run_dir / "eval.json").write_text(json.dumps(stats, indent=2))
    print(
        f"riskppo: evaluation over 10 episodes: mean {stats['mean']:.2f} ± {stats['std']:.2f}, "
        f"CVaR_{cfg.risk.cvar_alpha} {stats['cvar']:.2f}"
    )
    if model.monitor is not None:
        print(model.monitor.summary())
    model.close()
    if cfg.env.id == TRADING_ID:  # the main job ends with the backtest report (SPEC §1.3)
        from riskppo.evaluation.backtest import backtest_run

        artifacts = backtest_run(run_dir, split="test")
        print(f"riskppo: backtest report → {artifacts.report}")
    return model


@contextmanager
def open_run(run_dir: Path) -> Iterator[tuple[Config, DistributionalPPO]]:
    """The run's config and its latest checkpoint, loaded; closed on exit."""
    cfg = Config.from_yaml(run_dir / "config.yaml")
    model = DistributionalPPO.load(latest_checkpoint(run_dir), env=cfg.env.id)
    try:
        yield cfg, model
    finally:
        model.close()


def evaluate_run(run_dir: Path, n_episodes: int = 10, split: str = "val") -> dict[str, float]:
    """``model.evaluate`` of the run's latest checkpoint (trading: on the ``split`` period).
    ``riskppo eval`` uses :func:`riskppo.evaluation.summary.evaluation_summary`."""
    with open_run(run_dir) as (_, model):
        return model.evaluate(n_episodes=n_episodes, deterministic=True, part=split)


def robustness_run(
    run_dir: Path,
    attacks: list[str],
    eps_values: list[float],
    *,
    n_episodes: int = 10,
    steps: int = 10,
    split: str = "test",
) -> list[dict[str, Any]]:
    """R-ADV: evaluate the run's latest checkpoint under each attack and ε; write
    ``RUN_DIR/robustness/robustness.{json,png}`` and print the table."""
    from riskppo.adversarial.robustness import format_rows, robustness_table, write_robustness

    with open_run(run_dir) as (cfg, model):
        rows = robustness_table(
            model, attacks, eps_values, n_episodes=n_episodes, steps=steps, part=split
        )
    title = f"{run_label(cfg)} — {run_dir.name}"
    png = write_robustness(rows, run_dir / "robustness", title=title)
    print(format_rows(rows))
    print(f"riskppo: robustness table and plot → {png.parent}")
    return rows
