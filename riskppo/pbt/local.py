"""Local PBT backend (R-PBT-2, the embedded default): synchronous rounds on the local cores.

Every round each member trains ``pbt.ready_updates`` updates in a worker process (spawned, one
torch thread each, ``pbt.workers`` at a time), checkpoints and is scored; then truncation
selection decides who exploits whom, and the next round starts with those exploits. All member
state lives on disk, so a worker is stateless and a member is the same whether it ran in this
process, another one or a Ray trial.

Run directory::

    RUN_DIR/config.yaml          the PBT config (base hyperparameters, pbt section)
    RUN_DIR/members/mK/          one run directory per member (config.yaml, checkpoints/, metrics)
    RUN_DIR/pbt_history.jsonl    one line per exploit (SPEC §1.4 fields): the audit trail
    RUN_DIR/pbt_members.jsonl    one line per member and round: step, score, hyperparameters
    RUN_DIR/pbt_summary.json     the best member and everyone's final score
    RUN_DIR/pbt_summary.png      hyperparameters and scores over time
"""

from __future__ import annotations

import fcntl
import json
import math
import multiprocessing
import os
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from riskppo.config import Config
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
from riskppo.train.progress import ProgressBar, fmt


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
    """The scheduler: rounds of training, scoring, selection, exploit/explore, logging."""

    def __init__(self, cfg: Config, run_dir: Path) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.metric = resolve_metric(cfg)
        self.members = initial_members(cfg)
        self.rng = np.random.default_rng([cfg.seed, 11])
        self.pending: dict[int, dict[str, Any]] = {}  # target → exploit decided last round
        self.round = 0

    def member_dir(self, m: PopulationMember) -> Path:
        return self.run_dir / "members" / f"m{m.id}"

    def tasks(self) -> list[IntervalTask]:
        out = []
        for m in self.members:
            ex = self.pending.get(m.id)
            out.append(
                IntervalTask(
                    member=m.id,
                    member_dir=str(self.member_dir(m)),
                    config=member_config(self.cfg, m.id, m.hyperparams).to_dict(),
                    updates=self.cfg.pbt.ready_updates,
                    exploit_from=None if ex is None else ex["source_checkpoint"],
                    strategy=self.cfg.pbt.optimizer_strategy,
                )
            )
        return out

    def record(self, results: Iterable[IntervalResult | BaseException]) -> None:
        """Take a round's results: update members, write the audit trail and member log."""
        for m, res in zip(self.members, results):
            ex = self.pending.pop(m.id, None)
            if isinstance(res, BaseException):
                warnings.warn(
                    f"PBT member {m.id} failed in round {self.round}: {res!r}; it scores -inf "
                    "and continues from its last good checkpoint",
                    stacklevel=2,
                )
                m.performance = -math.inf
                entry = {"round": self.round, "member": m.id, "error": repr(res)}
            else:
                m.step, m.checkpoint, m.performance = res.step, Path(res.checkpoint), res.score
                entry = {
                    "round": self.round,
                    "member": m.id,
                    "step": res.step,
                    "score": res.score,
                    "hyperparams": m.hyperparams,
                    "applied_lr": res.applied_lr,
                    "checkpoint": res.checkpoint,
                    "seconds": round(res.seconds, 2),
                    **res.details,
                }
                if ex is not None:
                    ex.update(applied_lr=res.applied_lr, checkpoint_after=res.checkpoint_after)
                    append_jsonl(self.run_dir / "pbt_history.jsonl", ex)
                    m.history.append(ex)
            append_jsonl(self.run_dir / "pbt_members.jsonl", entry)
        self.round += 1

    def select(self) -> None:
        """Truncation selection + explore; the exploits run at the start of the next round."""
        p = self.cfg.pbt
        scores = {
            m.id: (m.performance if m.performance is not None else -math.inf) for m in self.members
        }
        for target_id, source_id in truncation_selection(scores, p.quantile, self.rng):
            target, source = self.members[target_id], self.members[source_id]
            if source.checkpoint is None:
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
                "source_checkpoint": str(source.checkpoint),
            }
            target.hyperparams = new

    def best(self) -> PopulationMember:
        return max(
            self.members,
            key=lambda m: (m.performance if m.performance is not None else -math.inf, -m.id),
        )

    def write_summary(self) -> dict[str, Any]:
        best = self.best()
        summary = {
            "metric": self.metric,
            "rounds": self.round,
            "best_member": best.id,
            "best_score": best.performance,
            "best_dir": str(self.member_dir(best)),
            "best_checkpoint": str(best.checkpoint),
            "best_hyperparams": best.hyperparams,
            "n_exploits": sum(len(m.history) for m in self.members),
            "members": [
                {
                    "member": m.id,
                    "score": m.performance,
                    "step": m.step,
                    "hyperparams": m.hyperparams,
                    "exploits": len(m.history),
                }
                for m in self.members
            ],
        }
        text = json.dumps(json_safe(summary), indent=2)
        (self.run_dir / "pbt_summary.json").write_text(text)
        return summary


def run_pbt_local(cfg: Config, run_dir: Path, *, progress_bar: bool = True) -> dict[str, Any]:
    """Run the whole population; returns the summary (also in ``pbt_summary.json``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if (run_dir / "pbt_history.jsonl").exists() or (run_dir / "members").exists():
        raise FileExistsError(f"{run_dir} already holds a PBT run; choose another --run-dir")
    cfg.to_yaml(run_dir / "config.yaml")
    pbt = PBTRun(cfg, run_dir)
    rounds = n_rounds(cfg)
    workers = cfg.pbt.workers or min(cfg.pbt.population, os.cpu_count() or 1)
    print(
        f"riskppo pbt: {cfg.pbt.population} members × {rounds} rounds of "
        f"{cfg.pbt.ready_updates} updates, {workers} worker(s), metric {pbt.metric} → {run_dir}"
    )
    with (
        _Pool(workers) as pool,
        ProgressBar(
            rounds,
            description="pbt rounds",
            unit="rounds",
            fields={"best": "best score"},
            enabled=progress_bar,
        ) as bar,
    ):
        for r in range(rounds):
            pbt.record(pool.run(pbt.tasks()))
            if r < rounds - 1:
                pbt.select()
            bar.update(advance=1, best=fmt(pbt.best().performance, ".4g"))
    summary = pbt.write_summary()
    from riskppo.pbt.report import plot_population

    plot_population(run_dir)
    print(
        f"riskppo pbt: best member m{summary['best_member']} ({pbt.metric} "
        f"{summary['best_score']:.4g}), {summary['n_exploits']} exploits → "
        f"{run_dir / 'pbt_history.jsonl'}"
    )
    return summary


class _Pool:
    """Members in spawned worker processes (fork is unsafe with torch threads)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.executor: ProcessPoolExecutor | None = None

    def __enter__(self) -> _Pool:
        if self.workers > 1:
            ctx = multiprocessing.get_context("spawn")
            self.executor = ProcessPoolExecutor(self.workers, mp_context=ctx)
        return self

    def run(self, tasks: list[IntervalTask]) -> list[IntervalResult | BaseException]:
        if self.executor is None:
            return [_call(run_interval, t) for t in tasks]
        futures: list[Future[IntervalResult]] = [
            self.executor.submit(run_interval, t) for t in tasks
        ]
        out: list[IntervalResult | BaseException] = []
        for f in futures:
            exc = f.exception()
            out.append(exc if exc is not None else f.result())
        return out

    def __exit__(self, *exc: object) -> None:
        if self.executor is not None:
            self.executor.shutdown(cancel_futures=True)


def _call(fn: Callable[[IntervalTask], IntervalResult], task: IntervalTask) -> Any:
    try:
        return fn(task)
    except Exception as exc:  # a failing member must not end the population
        return exc


def append_jsonl(path: Path, obj: dict[str, Any]) -> None:
    """Append one strict-JSON line, durably; an exclusive lock keeps lines whole when several
    processes (Ray trials) append to the same file."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(json.dumps(json_safe(obj)) + "\n")
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def json_safe(obj: Any) -> Any:
    """Strict JSON: paths as strings, non-finite floats (a failed member's -inf) as null."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
