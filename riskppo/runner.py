"""Run orchestration for the command line: train or resume a run, finish it with its
evaluation and (trading) backtest report, evaluate robustness. It sits above everything it drives
(``train``, ``evaluation``); the on-disk layout of a run is :mod:`riskppo.train.rundir`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from riskppo.config import Config
from riskppo.envs.registration import TRADING_ID
from riskppo.evaluation.backtest import backtest_run
from riskppo.evaluation.robustness import format_rows, robustness_table, write_robustness
from riskppo.evaluation.summary import (
    distinct_episodes,
    return_unit,
    run_label,
    validation_summary,
)
from riskppo.safefs import write_text_atomic
from riskppo.train.rundir import (
    drop_metrics_after,
    open_run,
    run_checkpoint,
    save_run_checkpoint,
    start_clean,
)
from riskppo.train.runlock import lock_run
from riskppo.train.trainer import DistributionalPPO


def _periodic(run_dir: Path, cfg: Config) -> Any:
    every = cfg.checkpoint.every_updates

    def callback(model: DistributionalPPO, _metrics: Any) -> bool:
        if every and model.n_updates % every == 0:
            save_run_checkpoint(model, run_dir, cfg.checkpoint.keep_last)
        return True

    return callback


def train_run(
    cfg: Config, run_dir: Path, *, progress_bar: bool = True, force: bool = False
) -> DistributionalPPO:
    """Train ``cfg`` into ``run_dir``; save a final checkpoint and an evaluation.

    Holds the run directory's lock throughout: another process on ``run_dir`` raises
    :class:`~riskppo.train.runlock.RunLockError` before anything in it is written. A
    ``run_dir`` that already holds a run raises :class:`~riskppo.train.rundir.RunDirError`
    unless ``force``, which deletes that run's files first (:func:`start_clean`).
    """
    with lock_run(run_dir, "riskppo train"):
        removed = start_clean(run_dir, force=force)
        if removed:
            print(
                f"riskppo: --force: deleted the previous run in {run_dir} ({len(removed)} entries)"
            )
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
    cfg, path = run_checkpoint(run_dir)
    model = DistributionalPPO.load(path, env=cfg.env.id, run_dir=run_dir)
    done, total = model.num_timesteps, cfg.total_timesteps
    if done >= total:
        print(f"riskppo: {run_dir} is complete ({done:,} of {total:,} steps trained, {path.name})")
        if run_finished(run_dir, cfg):
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


def run_finished(run_dir: Path, cfg: Config) -> bool:
    """Whether :func:`_finish` has written the run's evaluation (and, for trading, report)."""
    if not (run_dir / "eval.json").is_file():
        return False
    return cfg.env.id != TRADING_ID or (run_dir / "backtest_test" / "report.html").is_file()


def _finish(model: DistributionalPPO, run_dir: Path, cfg: Config) -> DistributionalPPO:
    save_run_checkpoint(model, run_dir, cfg.checkpoint.keep_last)
    trading = cfg.env.id == TRADING_ID
    n = distinct_episodes(cfg, "val", 10)  # trading: every deterministic episode is the same
    stats = model.evaluate(n_episodes=n, deterministic=True, part="val")
    write_text_atomic(run_dir / "eval.json", json.dumps(stats, indent=2))
    if model.monitor is not None:
        print(model.monitor.summary())
    if trading:
        print(validation_summary(model))
    else:
        print(
            f"riskppo: evaluation over {n} episodes: mean {stats['mean']:.2f} ± "
            f"{stats['std']:.2f}, CVaR_{cfg.risk.cvar_alpha} {stats['cvar']:.2f} "
            f"({return_unit(cfg)})"
        )
    model.close()
    if trading:  # the main job ends with the backtest report (design §1.3)
        artifacts = backtest_run(run_dir, split="test")
        print(f"riskppo: backtest report → {artifacts.report}")
    return model


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
    with open_run(run_dir) as (cfg, model):
        rows = robustness_table(
            model, attacks, eps_values, n_episodes=n_episodes, steps=steps, part=split
        )
    title = f"{run_label(cfg)} — {run_dir.name}"
    png = write_robustness(rows, run_dir / "robustness", title=title)
    print(format_rows(rows))
    print(f"riskppo: robustness table and plot → {png.parent}")
    return rows
