"""Run orchestration for the command line: train or resume a run, finish it with its
evaluation and (trading) backtest report, evaluate robustness. It sits above everything it drives
(``train``, ``evaluation``); the on-disk layout of a run is :mod:`riskppo.runs.rundir`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riskppo.agent import DistributionalPPO
from riskppo.config import Config, ConfigError, apply_overrides
from riskppo.envs.registration import env_kind
from riskppo.evaluation.backtest_result import SPLIT_NAMES
from riskppo.evaluation.kinds import backtest_report
from riskppo.evaluation.robustness import format_rows, robustness_table, write_robustness
from riskppo.evaluation.summary import (
    distinct_episodes,
    return_unit,
    run_label,
    single_asset,
    validation_summary,
)
from riskppo.evaluation.trials import TrialSpec
from riskppo.monitor.progress import ProgressBar, fmt, training_progress, whole_rollouts
from riskppo.persist.checkpoint import CheckpointError
from riskppo.runs.interrupt import StopRequest, signal_name, stop_on_signals
from riskppo.runs.lock import lock_run
from riskppo.runs.rundir import (
    checkpoint_dir,
    drop_metrics_after,
    latest_checkpoint,
    open_run,
    restart_command,
    run_checkpoint,
    save_run_checkpoint,
    start_clean,
)
from riskppo.safefs import write_text_atomic

DEFAULT_CHECKPOINT_EVERY = 10  # updates between the checkpoints of `riskppo train`


def with_periodic_checkpoints(cfg: Config) -> Config:
    """``cfg`` with ``checkpoint.every_updates`` set to :data:`DEFAULT_CHECKPOINT_EVERY`
    where it is unset (what ``riskppo train`` runs: a stopped run resumes exactly)."""
    if cfg.checkpoint.every_updates is not None:
        return cfg
    data = cfg.to_dict()
    data["checkpoint"]["every_updates"] = DEFAULT_CHECKPOINT_EVERY
    return Config.build(data)


class Interrupted(Exception):
    """Training stopped by a signal (:mod:`riskppo.runs.interrupt`); the message says what
    was saved and how to resume, ``exit_code`` is the shell's status for that signal."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class _Checkpointer:
    """The ``learn`` callback of a run: the run's progress bar (its whole run, also when
    resumed), a checkpoint every ``checkpoint.every_updates`` updates; once a stop is
    requested, training ends at the next one (or, without periodic checkpoints, after the
    current update, saved)."""

    run_dir: Path
    cfg: Config
    stop: StopRequest
    bar: ProgressBar
    saved_step: int | None = None

    def save(self, model: DistributionalPPO) -> None:
        save_run_checkpoint(model, self.run_dir, self.cfg.checkpoint.keep_last)
        self.saved_step = model.num_timesteps

    def __call__(self, model: DistributionalPPO, log: Any) -> bool:
        fps = None if model.monitor is None else model.monitor.latest.get("time/fps")
        self.bar.update(
            completed=model.num_timesteps, fps=fmt(fps, ",.0f"), ret=fmt(log.ep_rew_mean, ".2f")
        )
        every = self.cfg.checkpoint.every_updates
        if (every and model.n_updates % every == 0) or (self.stop.requested and not every):
            self.save(model)
        return not (self.stop.requested and self.saved_step == model.num_timesteps)


def _learn(model: DistributionalPPO, run_dir: Path, cfg: Config, *, progress_bar: bool) -> None:
    """Train ``model`` up to ``cfg.total_timesteps`` (its counters continue), checkpointing
    into ``run_dir``, with a progress bar over the whole run (a resumed one starts at the steps
    already trained). SIGINT/SIGTERM stop it at the next checkpoint (:class:`_Checkpointer`)
    and raise :class:`Interrupted`; a second signal stops at once, keeping the last one."""
    every = cfg.checkpoint.every_updates
    where = (
        f"the next checkpoint (every {every:,} updates)"
        if every
        else "the end of the current update"
    )
    notice = (
        f"riskppo: {{signal}}: training on to {where}, then saving it and stopping; "
        "press Ctrl-C again to stop at once without saving"
    )
    bar = training_progress(_final_step(model, cfg), progress_bar, start=model.num_timesteps)
    with stop_on_signals(notice) as stop, bar:
        ckpt = _Checkpointer(run_dir, cfg, stop, bar)
        try:
            model.learn(
                cfg.total_timesteps - model.num_timesteps,
                reset_num_timesteps=False,
                callback=ckpt,
            )
            if stop.requested and ckpt.saved_step != model.num_timesteps:
                ckpt.save(model)  # the run ended before the next periodic checkpoint
        except KeyboardInterrupt:
            model.close()
            raise Interrupted(_abandoned(run_dir), stop.exit_code) from None
    if stop.signum is not None:
        model.close()
        raise Interrupted(_saved(run_dir, cfg, model, stop.signum), stop.exit_code)


def _final_step(model: DistributionalPPO, cfg: Config) -> int:
    """The step count a run ends at: ``total_timesteps`` rounded up to whole rollouts."""
    return whole_rollouts(cfg.total_timesteps, cfg.ppo.n_steps * model.n_envs)


def _planned(model: DistributionalPPO, cfg: Config) -> str:
    """``200,704 steps (200,000 rounded up to whole rollouts of 8 envs × 128 steps)``."""
    final, total = _final_step(model, cfg), cfg.total_timesteps
    if final == total:
        return f"{total:,} steps"
    return (
        f"{final:,} steps ({total:,} rounded up to whole rollouts of {model.n_envs} envs × "
        f"{cfg.ppo.n_steps} steps)"
    )


def _resume_command(run_dir: Path) -> str:
    return f"riskppo train --resume {shlex.quote(str(run_dir))}"


def _saved(run_dir: Path, cfg: Config, model: DistributionalPPO, signum: int) -> str:
    done, total = model.num_timesteps, _final_step(model, cfg)
    saved = f"saved {checkpoint_dir(run_dir) / f'ckpt-{done:012d}'}"
    if done >= total:
        return (
            f"riskppo: stopped by {signal_name(signum)} after training ({done:,} steps; {saved}) "
            f"before the evaluation; write it with: {_resume_command(run_dir)}"
        )
    return (
        f"riskppo: stopped by {signal_name(signum)} at step {done:,} of {total:,}; {saved}; "
        f"continue with: {_resume_command(run_dir)}"
    )


def _abandoned(run_dir: Path) -> str:
    """The line of a run stopped at once (a second signal): what is on disk still counts."""
    try:
        path = latest_checkpoint(run_dir)
    except CheckpointError:
        return (
            "riskppo: stopped at once; no checkpoint was saved yet, nothing to resume; start "
            f"again with: {restart_command(run_dir)}"
        )
    return (
        f"riskppo: stopped at once; the steps after the last checkpoint ({path.name}) are lost; "
        f"continue from it with: {_resume_command(run_dir)}"
    )


def train_run(
    cfg: Config,
    run_dir: Path,
    *,
    progress_bar: bool = True,
    force: bool = False,
    ledger: Path | None = None,
) -> DistributionalPPO:
    """Train ``cfg`` into ``run_dir``; save a final checkpoint and an evaluation. A trading
    run's test backtest is recorded in the trial ledger ``ledger`` (None: none).

    Holds the run directory's lock throughout: another process on ``run_dir`` raises
    :class:`~riskppo.runs.lock.RunLockError` before anything in it is written. A
    ``run_dir`` that already holds a run raises :class:`~riskppo.runs.rundir.RunDirError`
    unless ``force``, which deletes that run's files first (:func:`start_clean`).
    """
    with lock_run(run_dir, "riskppo train"):
        removed = start_clean(run_dir, force=force)
        if removed:
            print(
                f"riskppo: --force: deleted the previous run in {run_dir} ({len(removed)} entries)"
            )
        return _train_run(cfg, run_dir, progress_bar=progress_bar, ledger=ledger)


def _train_run(
    cfg: Config, run_dir: Path, *, progress_bar: bool, ledger: Path | None
) -> DistributionalPPO:
    try:
        model = DistributionalPPO(config=cfg, run_dir=run_dir)
    except BaseException:  # a run that never started leaves nothing a retry would trip on
        start_clean(run_dir, force=True)
        raise
    cfg.to_yaml(run_dir / "config.yaml")
    print(f"riskppo: training {run_label(cfg)} for {_planned(model, cfg)} → {run_dir}")
    _learn(model, run_dir, cfg, progress_bar=progress_bar)
    return _finish(model, run_dir, cfg, ledger)


def resume_run(
    run_dir: Path,
    *,
    progress_bar: bool = True,
    overrides: Sequence[str] = (),
    ledger: Path | None = None,
) -> DistributionalPPO:
    """Continue ``run_dir`` from its latest checkpoint up to the config's total_timesteps.

    The ``metrics.jsonl`` rows logged after that checkpoint (by the run that was stopped) are
    dropped first, since the resumed run logs those steps again. A run that is already complete
    is not trained further; its evaluation (and report) is written only if it is missing.
    ``overrides``: ``--set`` items that may only set ``total_timesteps``: the run trains on to
    that many steps, finished or not (:func:`_extend`). Holds the run directory's lock
    throughout, like :func:`train_run`, and records the backtest in ``ledger`` like it.
    """
    if not run_dir.is_dir():
        raise FileNotFoundError(
            f"{run_dir}: no such run directory; pass a run directory written by `riskppo train`"
        )
    with lock_run(run_dir, "riskppo train --resume"):
        return _resume_run(run_dir, progress_bar=progress_bar, overrides=overrides, ledger=ledger)


def _resume_run(
    run_dir: Path, *, progress_bar: bool, overrides: Sequence[str], ledger: Path | None
) -> DistributionalPPO:
    cfg, path = run_checkpoint(run_dir)
    wanted = _total_wanted(cfg, overrides)
    model = DistributionalPPO.load(path, env=cfg.env.id, run_dir=run_dir)
    if wanted != cfg.total_timesteps:
        try:
            cfg = _extend(run_dir, cfg, wanted, model.num_timesteps)
        except ConfigError:
            model.close()
            raise
    done, total = model.num_timesteps, cfg.total_timesteps
    if done >= total:
        print(f"riskppo: {run_dir} is complete ({done:,} of {total:,} steps trained, {path.name})")
        if run_finished(run_dir, cfg):
            print(f"riskppo: nothing to do; its evaluation is in {run_dir / 'eval.json'}")
            model.close()
            return model
        damage = evaluation_damage(run_dir, cfg)
        print(
            f"riskppo: {damage}; writing it again"
            if damage
            else "riskppo: writing its missing evaluation"
        )
        return _finish(model, run_dir, cfg, ledger)
    dropped = drop_metrics_after(run_dir / "metrics.jsonl", done)
    final = _final_step(model, cfg)
    print(f"riskppo: resuming {run_dir} at step {done:,} of {final:,} ({final - done:,} to go)")
    if dropped:
        print(
            f"riskppo: dropped {dropped} metrics.jsonl row(s) logged after {path.name} by the "
            "stopped run; the resumed run logs those steps again"
        )
    _learn(model, run_dir, cfg, progress_bar=progress_bar)
    return _finish(model, run_dir, cfg, ledger)


def _total_wanted(cfg: Config, overrides: Sequence[str]) -> int:
    """The ``total_timesteps`` that ``overrides`` (``--set`` items) set on the run's ``cfg``
    (its own without any); ``ConfigError`` for an override of any other setting."""
    if not overrides:
        return cfg.total_timesteps
    new = apply_overrides(cfg, list(overrides))
    if {**new.to_dict(), "total_timesteps": cfg.total_timesteps} != cfg.to_dict():
        raise ConfigError(
            "--resume continues a run with its own config; drop --config/--set/--force "
            "(only --set total_timesteps=N may go with it: it trains the run on to N steps)"
        )
    return new.total_timesteps


def _extend(run_dir: Path, cfg: Config, total: int, done: int) -> Config:
    """``cfg`` with ``total_timesteps=total``, written to the run's ``config.yaml`` (so that a
    stop and a plain ``--resume`` go on to ``total``); ``ConfigError`` when ``total`` is below
    the ``done`` steps already trained.

    With a constant learning rate, and the run stopped on a checkpoint, it continues exactly
    as a run of ``total`` steps from the start would (docs/checkpoints.md); with
    ``ppo.lr_schedule: linear`` the rate decays to 0 at ``total`` from here on, which no run of
    ``total`` steps did (said in a line)."""
    if total < done:
        raise ConfigError(
            f"--set total_timesteps={total}: {run_dir} has already trained {done:,} steps; pass "
            "more to train it on, or resume without --set"
        )
    new = Config.build({**cfg.to_dict(), "total_timesteps": total})
    new.to_yaml(run_dir / "config.yaml")
    print(
        f"riskppo: --set total_timesteps={total}: {run_dir} trains on to {total:,} steps (was "
        f"{cfg.total_timesteps:,}; config.yaml updated)"
    )
    if cfg.ppo.lr_schedule == "linear":
        rate = cfg.ppo.learning_rate * max(1.0 - done / total, 0.0)
        print(
            f"riskppo: ppo.lr_schedule=linear now decays to 0 at step {total:,} (from {rate:.3g} "
            f"at step {done:,}); the steps trained so far followed the decay to "
            f"{cfg.total_timesteps:,}, so the result differs from a {total:,}-step run"
        )
    return new


def run_finished(run_dir: Path, cfg: Config) -> bool:
    """Whether :func:`_finish` has written the run's evaluation (and, for trading and
    portfolios, report), and its files read back (:func:`evaluation_damage`)."""
    written = all(p.is_file() for p in _evaluation_files(run_dir, cfg))
    return written and evaluation_damage(run_dir, cfg) is None


def _evaluation_files(run_dir: Path, cfg: Config) -> list[Path]:
    """What :func:`_finish` writes: ``eval.json`` and, for trading and portfolios, the test
    backtest's ``metrics.json`` (trading: and ``run_info.json``) and ``report.html``."""
    files = [run_dir / "eval.json"]
    out = run_dir / "backtest_test"
    kind = env_kind(cfg.env.id)
    if kind is not None and kind.single_asset:
        files.append(out / "run_info.json")
    if kind is not None:
        files += [out / "metrics.json", out / "report.html"]
    return files


def evaluation_damage(run_dir: Path, cfg: Config) -> str | None:
    """Why the written evaluation of ``run_dir`` does not read back (a truncated write, a
    damaged copy): ``"eval.json does not read back (…)"`` for the first of its JSON files that
    is there but is no JSON object; None when they all read back (or are not written yet)."""
    for path in _evaluation_files(run_dir, cfg):
        if path.suffix != ".json" or not path.is_file():
            continue
        try:
            if not isinstance(json.loads(path.read_text()), dict):
                raise ValueError("not a JSON object")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return f"{path.relative_to(run_dir)} does not read back ({exc})"
    return None


def _finish(
    model: DistributionalPPO, run_dir: Path, cfg: Config, ledger: Path | None = None
) -> DistributionalPPO:
    save_run_checkpoint(model, run_dir, cfg.checkpoint.keep_last)
    trading = single_asset(cfg)
    n = distinct_episodes(cfg, "val", 10)  # trading: every deterministic episode is the same
    stats = model.evaluate(n_episodes=n, deterministic=True, part="val")
    write_text_atomic(run_dir / "eval.json", json.dumps(stats, indent=2))
    if model.monitor is not None and not cfg.monitor.verbose:  # verbose: learn() printed it
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
    # the main job ends with the backtest report (design §1.3): trading and portfolios
    artifacts = backtest_report(cfg.env.id, run_dir, "test", TrialSpec(ledger, cfg, "train"))
    if artifacts is not None:
        print(artifacts.verdict())
        print(f"riskppo: backtest report → {artifacts.report}")
    return model


def robustness_run(
    run_dir: Path,
    attacks: list[str],
    eps_values: list[float],
    *,
    n_episodes: int = 10,
    steps: int = 10,
    split: str = "val",
) -> list[dict[str, Any]]:
    """R-ADV: evaluate the run's latest checkpoint under each attack and ε; write
    ``RUN_DIR/robustness/robustness.{json,png}`` and print the table (trading: on ``split``,
    which it names)."""
    with open_run(run_dir) as (cfg, model):
        rows = robustness_table(
            model, attacks, eps_values, n_episodes=n_episodes, steps=steps, part=split
        )
    title = f"{run_label(cfg)} — {run_dir.name}"
    png = write_robustness(rows, run_dir / "robustness", title=title)
    print(format_rows(rows))
    where = f" ({SPLIT_NAMES[split]} split)" if single_asset(cfg) else ""
    print(f"riskppo: robustness table and plot{where} → {png.parent}")
    return rows
