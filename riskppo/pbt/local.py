"""Local PBT backend (R-PBT-2, the embedded default): synchronous rounds on the local cores.

Every round each member trains ``pbt.ready_updates`` updates in a worker process (spawned, one
torch thread each, ``pbt.workers`` at a time), checkpoints and is scored; then truncation
selection decides who exploits whom, and the next round starts with those exploits. All member
state lives on disk, so a worker is stateless and a member is the same whether it ran in this
process, another one or a Ray trial.

Run directory::

    RUN_DIR/config.yaml          the PBT config (base hyperparameters, pbt section)
    RUN_DIR/members/mK/          one run directory per member (config.yaml, checkpoints/, metrics)
    RUN_DIR/pbt_history.jsonl    one line per exploit (design §1.4 fields): the audit trail
    RUN_DIR/pbt_members.jsonl    one line per member and round: step, score, hyperparameters
    RUN_DIR/pbt_summary.json     the best member and everyone's final score
    RUN_DIR/pbt_summary.png      hyperparameters and scores over time
    RUN_DIR/pbt/state.json       the scheduler after the last completed round (--resume)

``run_pbt_local(..., resume=True)`` (``riskppo pbt --resume RUN_DIR``) continues from the last
completed round (see :mod:`riskppo.pbt.state`). A storage fault (full disk, quota, read-only or
failing file system, file size limit) in the scheduler or in a member stops the population at
once with :class:`riskppo.pbt.storage.PopulationStopped`, instead of counting as that member's
failure; the summary is written if the disk still allows it.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from riskppo.config import Config
from riskppo.logs import OnMessage, log_message
from riskppo.monitor.progress import ProgressBar, fmt
from riskppo.pbt.audit import archive_source
from riskppo.pbt.member import (
    IntervalResult,
    IntervalTask,
    PopulationMember,
    explore,
    member_config,
    resolve_metric,
    run_interval,
    sample_hyperparams,
    truncation_selection,
)
from riskppo.pbt.pool import MemberFailure, WorkerPool
from riskppo.pbt.state import (
    ResumeError,
    SchedulerState,
    check_resume_config,
    is_pbt_run,
    json_safe,
    load_state,
    prepare_resume,
    save_state,
)
from riskppo.pbt.storage import PopulationStopped, StorageFault, storage_fault
from riskppo.persist.checkpoint import CheckpointError
from riskppo.runs.interrupt import sigterm_as_interrupt
from riskppo.safefs import append_text, write_text_atomic

__all__ = [
    "PBTRun",
    "append_jsonl",
    "initial_members",
    "json_safe",
    "n_rounds",
    "run_pbt_local",
    "summary_lines",
]


def initial_members(cfg: Config) -> list[PopulationMember]:
    """The population: hyperparameters drawn within bounds from the PBT seed (deterministic)."""
    rng = np.random.default_rng([cfg.seed, 7])
    return [
        PopulationMember(i, sample_hyperparams(cfg.pbt.hyperparams, rng))
        for i in range(cfg.pbt.population)
    ]


def n_rounds(cfg: Config) -> int:
    per_round = cfg.pbt.ready_updates * cfg.ppo.n_steps * cfg.env.n_envs
    return max(1, math.ceil(cfg.total_timesteps / per_round))


class PBTRun:
    """The scheduler: rounds of training, scoring, selection, exploit/explore, logging.

    A member's hyperparameters change only in :meth:`record`, together with the history line of
    the exploit that brought them (R-PBT-5): :meth:`select` decides exploits but leaves the
    members as they are, and an exploit whose interval fails is dropped whole.
    """

    def __init__(self, cfg: Config, run_dir: Path) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.metric = resolve_metric(cfg)
        self.members = initial_members(cfg)
        self.rng = np.random.default_rng([cfg.seed, 11])
        self.pending: dict[int, dict[str, Any]] = {}  # target → exploit decided last round
        self.failures: list[dict[str, Any]] = []  # one record per failed interval
        self.recorded: dict[int, set[str]] = {m.id: set() for m in self.members}  # ckpt names
        self.round = 0
        self.saved_round = 0  # the round the saved state (pbt/state.json) continues from

    def member_dir(self, m: PopulationMember) -> Path:
        return self.run_dir / "members" / f"m{m.id}"

    def active(self) -> list[PopulationMember]:
        """The members still training (not frozen after too many failures)."""
        return [m for m in self.members if not m.frozen]

    def tasks(self) -> list[IntervalTask]:
        """This round's interval of every active member: from its recorded checkpoint, with the
        exploit decided for it (and that exploit's hyperparameters), if any."""
        out = []
        for m in self.active():
            ex = self.pending.get(m.id)
            hyperparams = m.hyperparams if ex is None else ex["new_hyperparams"]
            out.append(
                IntervalTask(
                    member=m.id,
                    member_dir=str(self.member_dir(m)),
                    config=member_config(self.cfg, m.id, hyperparams).to_dict(),
                    updates=self.cfg.pbt.ready_updates,
                    exploit_from=None if ex is None else ex["source_checkpoint"],
                    strategy=self.cfg.pbt.optimizer_strategy,
                    round=self.round,
                    resume_from=None if m.checkpoint is None else str(m.checkpoint),
                    exploit_sha256=None if ex is None else ex["source_manifest_sha256"],
                )
            )
        return out

    def record(self, results: Iterable[IntervalResult | MemberFailure]) -> None:
        """Take a round's results: update members, write the audit trail and member log."""
        for res in results:
            m = self.members[res.member]
            ex = self.pending.pop(m.id, None)
            if isinstance(res, MemberFailure):
                entry = self._failed(m, res, ex)
            else:
                entry = self._succeeded(m, res, ex)
            append_jsonl(self.run_dir / "pbt_members.jsonl", entry)
        self.pending.clear()  # exploits of members that did not run (none: all active ran)
        self.round += 1

    def _succeeded(
        self, m: PopulationMember, res: IntervalResult, ex: dict[str, Any] | None
    ) -> dict[str, Any]:
        if ex is not None:  # the history line first, then the hyperparameters it records
            ex.update(
                applied_lr=res.applied_lr,
                checkpoint_after=res.checkpoint_after,
                checkpoint_after_sha256=res.checkpoint_after_sha256,
            )
            append_jsonl(self.run_dir / "pbt_history.jsonl", ex)
            m.history.append(ex)
            m.hyperparams = dict(ex["new_hyperparams"])
            if res.checkpoint_after is not None:
                self.recorded[m.id].add(Path(res.checkpoint_after).name)
        m.step, m.checkpoint, m.performance = res.step, Path(res.checkpoint), res.score
        m.checkpoint_score = res.score
        self.recorded[m.id].add(m.checkpoint.name)
        return {
            "round": self.round,
            "member": m.id,
            "step": res.step,
            "score": res.score,
            "hyperparams": m.hyperparams,
            "applied_lr": res.applied_lr,
            "checkpoint": res.checkpoint,
            "started_from": res.started_from,
            "seconds": round(res.seconds, 2),
            **res.details,
        }

    def _failed(
        self, m: PopulationMember, res: MemberFailure, ex: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Score the round as failed, drop its exploit (the hyperparameters stay), roll the
        member's directory back to its last recorded checkpoint; freeze it after too many."""
        m.failures += 1
        m.performance = -math.inf
        m.frozen = m.failures > self.cfg.pbt.max_failures
        record: dict[str, Any] = {
            "round": self.round,
            "member": m.id,
            "kind": res.kind,
            "reason": res.reason,
            "failures": m.failures,
            "action": "frozen" if m.frozen else "restart",
            "restart_from": None if m.checkpoint is None else str(m.checkpoint),
            "at_step": m.step,
        }
        if ex is not None:
            keep = ("source", "new_hyperparams", "source_checkpoint", "source_manifest_sha256")
            record["dropped_exploit"] = {k: ex[k] for k in keep}
        record["discarded"] = rollback_member_dir(
            self.member_dir(m), m.checkpoint, self.recorded[m.id]
        )
        self.failures.append(record)
        what = (
            "is frozen (pbt.max_failures reached)"
            if m.frozen
            else ("restarts from its last recorded checkpoint")
        )
        warnings.warn(
            f"PBT member {m.id} failed in round {self.round}: {res.reason}; it scores -inf "
            f"and {what}",
            stacklevel=3,
        )
        return {**record, "error": res.reason, "hyperparams": m.hyperparams}

    def select(self) -> None:
        """Truncation selection among the active members + explore. The exploits run at the
        start of the next round; each source is first archived and hashed (see
        :mod:`riskppo.pbt.audit`). No member's hyperparameters change here."""
        p = self.cfg.pbt
        scores = {
            m.id: (m.performance if m.performance is not None else -math.inf) for m in self.active()
        }
        for target_id, source_id in truncation_selection(scores, p.quantile, self.rng):
            target, source = self.members[target_id], self.members[source_id]
            if source.checkpoint is None:
                continue
            try:
                name = f"r{self.round:03d}-m{source.id}"
                archived, digest = archive_source(self.run_dir, source.checkpoint, name)
            except (CheckpointError, OSError) as exc:
                if storage_fault(exc) is not None:
                    raise  # a full disk is not a reason to skip an exploit: stop
                warnings.warn(f"PBT: no exploit of m{source.id}: {exc}", stacklevel=2)
                continue
            new = explore(
                source.hyperparams,
                p.hyperparams,
                self.rng,
                factors=p.perturb_factors,
                resample_prob=p.resample_prob,
            )
            self.pending[target_id] = {
                "member": target_id,
                "step": target.step,
                "round": self.round,
                "source": source_id,
                "target_score": scores[target_id],
                "source_score": scores[source_id],
                "old_hyperparams": dict(target.hyperparams),
                "new_hyperparams": new,
                "strategy": p.optimizer_strategy,
                "source_checkpoint": str(archived),
                "source_original": str(source.checkpoint),
                "source_manifest_sha256": digest,
            }

    def state(self) -> SchedulerState:
        """Everything needed to go on from here (see :mod:`riskppo.pbt.state`)."""
        return SchedulerState(
            self.round,
            dict(self.rng.bit_generator.state),
            self.members,
            self.pending,
            self.recorded,
            self.failures,
        )

    def restore(self, s: SchedulerState) -> None:
        """Continue from a saved state: members, decisions, random state; every member
        directory rolled back to the checkpoint the logs record."""
        self.round, self.members, self.pending = s.round, s.members, s.pending
        self.recorded, self.failures = s.recorded, s.failures
        self.rng.bit_generator.state = s.rng
        self.saved_round = s.round
        for m in self.members:
            rollback_member_dir(self.member_dir(m), m.checkpoint, self.recorded[m.id])

    def save(self) -> None:
        """Save the scheduler's state: ``--resume`` continues from here."""
        save_state(self.run_dir, self.state())
        self.saved_round = self.round

    def stop(self, fault: StorageFault, where: Path | None = None) -> PopulationStopped:
        """The error that stops the population on ``fault`` (``where``: the member directory,
        when the fault names no file), after writing what summary the disk allows."""
        what = fault.describe(None if where is None else str(where))
        try:
            self.write_summary(stopped=what)
            kept = f"summary in {self.run_dir / 'pbt_summary.json'}"
        except OSError as exc:
            kept = f"no summary written ({exc.strerror or exc})"
        return PopulationStopped(
            f"{what}; the population stopped ({kept}); once the disk is fixed, continue from "
            f"round {self.saved_round} with `riskppo pbt --resume {self.run_dir}`",
            fault,
        )

    def best(self) -> PopulationMember:
        """The member with the best score this round; when no member with a checkpoint scored
        (every one's last round failed), the one whose checkpoint scored best when it was
        recorded; a member without a checkpoint only when none has one (the summary's
        ``best_checkpoint`` is then None, which ``riskppo pbt`` reports in one line). Ties go to
        the lower id."""

        def rank(m: PopulationMember) -> tuple[bool, float, float, int]:
            recorded = m.checkpoint_score if m.checkpoint is not None else None
            return (m.checkpoint is not None, _finite(m.performance), _finite(recorded), -m.id)

        return max(self.members, key=rank)

    def write_summary(self, stopped: str | None = None) -> dict[str, Any]:
        """Write ``pbt_summary.json``; ``stopped``: why the population stopped early."""
        best = self.best()
        summary = {
            "stopped": stopped,
            "metric": self.metric,
            "rounds": self.round,
            "best_member": best.id,
            "best_score": best.performance,
            "best_dir": str(self.member_dir(best)),
            "best_checkpoint": None if best.checkpoint is None else str(best.checkpoint),
            "best_hyperparams": best.hyperparams,
            "n_exploits": sum(len(m.history) for m in self.members),
            "n_failures": len(self.failures),
            "failures": self.failures,
            "frozen": [m.id for m in self.members if m.frozen],
            "members": [
                {
                    "member": m.id,
                    "score": m.performance,
                    "step": m.step,
                    "hyperparams": m.hyperparams,
                    "exploits": len(m.history),
                    "failures": m.failures,
                    "status": "frozen" if m.frozen else "active",
                }
                for m in self.members
            ],
        }
        text = json.dumps(json_safe(summary), indent=2)
        write_text_atomic(self.run_dir / "pbt_summary.json", text)  # never through a link
        return summary


def _finite(score: float | None) -> float:
    """``score`` for ranking: -inf when missing or not a number."""
    return score if score is not None and not math.isnan(score) else -math.inf


def rollback_member_dir(mdir: Path, recorded: Path | None, names: set[str]) -> list[str]:
    """After a failed interval: remove the checkpoints it wrote that the scheduler never recorded
    (``ckpt-*``, ``exploit-*``) and point ``checkpoints/latest`` back at the recorded one (or
    remove it when there is none), so the member directory holds only what the logs describe.
    Returns the names removed."""
    ckpts = mdir / "checkpoints"
    removed: list[str] = []
    if not ckpts.is_dir():
        return removed
    for p in sorted(ckpts.iterdir()):
        if p.is_dir() and p.name.startswith(("ckpt-", "exploit-")) and p.name not in names:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    if recorded is None:
        (ckpts / "latest").unlink(missing_ok=True)
    else:
        write_text_atomic(ckpts / "latest", recorded.name)
    return removed


def run_pbt_local(
    cfg: Config,
    run_dir: Path,
    *,
    progress_bar: bool = True,
    resume: bool = False,
    on_message: OnMessage = log_message,
) -> dict[str, Any]:
    """Run the whole population; returns the summary (also in ``pbt_summary.json``). The line
    saying what it starts goes to ``on_message`` (:mod:`riskppo.logs`).

    ``resume``: continue the run in ``run_dir`` from its last completed round (``cfg`` must be
    the run's own config, up to ``pbt.workers``); without it, a directory that already holds a
    PBT run is refused. A member whose worker dies or raises loses that round only (R-PBT-5);
    the run goes on and its summary lists every failure. A storage fault stops the population:
    :class:`~riskppo.pbt.storage.PopulationStopped`."""
    pbt = open_population(cfg, run_dir, resume)
    rounds = n_rounds(cfg)
    workers = cfg.pbt.workers or min(cfg.pbt.population, os.cpu_count() or 1)
    resumed = f", resumed after round {pbt.round} of {rounds}" if resume else ""
    on_message(
        f"riskppo pbt: {cfg.pbt.population} members × {rounds} rounds of "
        f"{cfg.pbt.ready_updates} updates, {workers} worker(s), metric {pbt.metric}{resumed} → "
        f"{run_dir}"
    )
    try:
        run_rounds(pbt, rounds, workers, progress_bar)
        summary = pbt.write_summary()
        from riskppo.pbt.report import plot_population  # matplotlib only when plotting

        plot_population(run_dir)
    except PopulationStopped:
        raise
    except Exception as exc:
        fault = storage_fault(exc)
        if fault is None:
            raise
        raise pbt.stop(fault) from exc
    return summary


def open_population(cfg: Config, run_dir: Path, resume: bool) -> PBTRun:
    """A fresh population in a new run directory, or the one in ``run_dir`` as it was after its
    last completed round (``resume``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    pbt = PBTRun(cfg, run_dir)
    if resume:
        state, logs = load_state(run_dir)
        check_resume_config(run_dir, cfg)
        prepare_resume(run_dir, state, logs)
        pbt.restore(state)
        return pbt
    if is_pbt_run(run_dir):
        raise ResumeError(
            f"{run_dir} already holds a PBT run; continue it with `riskppo pbt --resume "
            f"{run_dir}` (Python: resume=True) or choose another --run-dir"
        )
    cfg.to_yaml(run_dir / "config.yaml")
    pbt.save()
    return pbt


def run_rounds(pbt: PBTRun, rounds: int, workers: int, progress_bar: bool) -> None:
    """Train, score, select round after round up to ``rounds``, saving the scheduler's state
    after each; a member's storage fault stops at once (nothing of that round is recorded)."""
    with (
        sigterm_as_interrupt(),  # a scheduler's stop ends the workers as Ctrl-C does
        WorkerPool(workers, run_interval) as pool,
        ProgressBar(
            rounds,
            description="pbt rounds",
            unit="rounds",
            fields={"best": "best score"},
            enabled=progress_bar,
        ) as bar,
    ):
        if pbt.round:
            bar.update(advance=pbt.round, best=fmt(pbt.best().performance, ".4g"))
        while pbt.round < rounds and pbt.active():  # all frozen: nothing left to train
            results = pool.run(pbt.tasks())
            for res in results:
                if isinstance(res, MemberFailure) and res.fault is not None:
                    raise pbt.stop(res.fault, where=pbt.member_dir(pbt.members[res.member]))
            pbt.record(results)
            if pbt.round < rounds:
                pbt.select()
            pbt.save()
            bar.update(advance=1, best=fmt(pbt.best().performance, ".4g"))


def summary_lines(summary: Mapping[str, Any], run_dir: Path) -> list[str]:
    """The lines ``riskppo pbt`` prints at the end of a local population: the best member and
    every failed interval (none for the Ray backend's summary: Ray Tune reports its trials)."""
    if summary.get("backend") == "ray":
        return []
    failed = f", {summary['n_failures']} failed interval(s)" if summary["n_failures"] else ""
    lines = [
        f"riskppo pbt: best member m{summary['best_member']} ({summary['metric']} "
        f"{fmt(summary['best_score'], '.4g')}), {summary['n_exploits']} exploits{failed} → "
        f"{run_dir / 'pbt_history.jsonl'}"
    ]
    lines += [
        f"riskppo pbt: m{f['member']} failed in round {f['round']} ({f['reason']}): {f['action']}"
        for f in summary["failures"]
    ]
    return lines


def append_jsonl(path: Path, obj: dict[str, Any]) -> None:
    """Append one strict-JSON line, durably; an exclusive lock keeps lines whole when several
    processes (Ray trials) append to the same file. A symlink (or a hard link) at ``path`` is
    refused, not written through (:func:`riskppo.safefs.append_text`)."""
    with append_text(path) as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(json.dumps(json_safe(obj)) + "\n")
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
