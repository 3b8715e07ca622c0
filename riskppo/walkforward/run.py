"""``riskppo walkforward``: retrain every ``step`` bars, trade the next ``step`` bars frozen,
stitch the out-of-sample segments into one record per seed and judge it with the statistics of
:mod:`riskppo.stats` (the schedule: :mod:`riskppo.walkforward.plan`).

One run directory holds it all::

    WF/.lock                     held by the process writing the run
    WF/config.yaml               the agent's config (each cell overrides seed, data.bars, steps)
    WF/walkforward.json          the schedule's settings and its segments
    WF/cells/seg03-s1/           one (segment, seed) cell: metrics.jsonl, model/ (checkpoint),
                                 record.csv (its per-bar backtest: every strategy and the
                                 agent env's tables), cell.json (written last)
    WF/records/s1.csv            a seed's stitched out-of-sample record; mean.csv the seeds' mean
    WF/metrics.json, WF/segments.csv, WF/report.html, WF/*.png

With ``--candidates`` (nested selection among configurations,
:mod:`riskppo.walkforward.select`) ``WF/candidates/cI.yaml`` hold the configurations
instead of ``config.yaml``, ``WF/select/`` the selection cells and each segment's choice.

Cells are independent jobs of the shared runner (:mod:`riskppo.runs.jobs`): local worker
processes (all cores by default) or Ray tasks on a cluster (``--backend ray``), with the same
result for a cell wherever it runs; warm-started cells wait for their predecessor.
A cell is finished when its ``cell.json`` exists and its files read back
(:func:`read_cell`); ``--resume`` (after Ctrl-C, a crash or SIGKILL, or on a copy damaged on
the way) re-runs only the unfinished cells, from scratch — a cell is one training, and a fresh
cell with the same seed gives the same result.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riskppo.config import Config, ConfigError
from riskppo.envs.registration import data_kwargs, market_kind
from riskppo.logs import OnMessage, log_message
from riskppo.monitor.progress import ProgressBar, wall_time_line
from riskppo.persist.files import sha256
from riskppo.runs.jobs import LOCAL, Backend, Failed, JobRunner, open_runner
from riskppo.runs.ledger import Trials
from riskppo.safefs import ensure_real_dir, remove_entry, write_text_atomic
from riskppo.walkforward.cells import CELL_DONE, UnreadableCell, read_cell, write_json
from riskppo.walkforward.plan import (
    CellJob,
    Record,
    Segment,
    WalkForwardSettings,
    cell_config,
    cell_name,
    plan_segments,
    segment_frame,
    stitch,
)

if TYPE_CHECKING:
    from riskppo.agent import DistributionalPPO
    from riskppo.persist.snapshot import Snapshot
    from riskppo.walkforward.select import Selection
from riskppo.runs.lock import lock_run

SETTINGS_FILE = "walkforward.json"


def run_cell(job: CellJob) -> dict[str, Any]:
    """Train one cell, backtest its test rows, write ``record.csv`` then ``cell.json``.

    Runs in a worker process; a partly written cell directory (a killed run) is cleared first.
    """
    import torch

    from riskppo.agent import DistributionalPPO
    from riskppo.evaluation.backtest import backtest, overlay_binding_replayed
    from riskppo.persist.checkpoint import read_snapshot

    cfg = cell_config(job.config, job.segment, job.seed, job.steps)
    torch.set_num_threads(cfg.num_threads or 1)  # before anything is built: results depend on it
    # training alerts go to the cell's alerts.jsonl; dozens of cells would flood the terminal
    logging.getLogger("riskppo").setLevel(logging.ERROR)
    if os.path.lexists(job.cell_dir):
        remove_entry(job.cell_dir)  # a link is removed, never followed
    ensure_real_dir(ensure_real_dir(job.cell_dir.parent) / job.cell_dir.name)
    model = DistributionalPPO(config=cfg, run_dir=job.cell_dir)
    try:
        if job.warm_from is not None:
            warm_start(model, read_snapshot(job.warm_from))
        model.learn(job.steps)
        model.save(job.cell_dir / "model")
        kind = market_kind(cfg.env.id, "walk-forward")
        if "walkforward_cell" in kind.hooks:  # the kind's own cell (default: the backtest's)
            return dict(kind.hook("walkforward_cell")(model, job, cfg))
        result = backtest(model, "test")
        overlay_train = overlay_binding_replayed(model, "train")
        lam = float(model.state.risk.lam) if model.state.risk is not None else None
    finally:
        model.close()
    tables = None if result.tables is None else result.tables.columns()
    frame = segment_frame(result.frames, job.segment.index, tables)  # the env's tables beside
    record = write_text_atomic(job.cell_dir / "record.csv", frame.to_csv(float_format="%.17g"))
    summary = {
        "segment": job.segment.index,
        "seed": job.seed,
        "steps": job.steps,
        "warm_from": None if job.warm_from is None else str(job.warm_from),
        "start": str(frame.index[0]),
        "end": str(frame.index[-1]),
        "bars": len(frame),
        "data_bars": list(job.segment.bars()),  # the rows its env was built on (data.bars)
        "bars_per_year": result.bars_per_year,
        "fee": result.env_settings["fee"],
        "fill": result.env_settings["fill"],  # fill and borrow rate: the null's env tables
        "borrow_rate": result.env_settings["borrow_rate"],
        "data": result.dataset,
        "metrics": result.metrics_dict(),
        "lambda": lam,  # the CVaR multiplier at the end of training
        "overlay_test": result.env_settings.get("overlay"),
        "overlay_train": overlay_train,  # the trained agent replayed over its training rows
        "record_sha256": sha256(record),  # what read_cell checks record.csv against
        **(job.extra or {}),  # a selection's candidate
    }
    write_json(job.cell_dir / CELL_DONE, summary)
    return summary


def warm_start(model: DistributionalPPO, snap: Snapshot) -> None:
    """Continue from ``ck``'s weights with the statistics they were trained under: observation
    normalisation, return scaling (with PopArt the critic's last layer is in those units; a
    fresh scale would rescale it by the wrong ratio, compounding over segments) and the CVaR
    constraint's state. The counters start from zero and the optimizer fresh."""
    model.adopt(snap)
    model.reset_counters()


@dataclass
class WalkForwardRun:
    """A walk-forward run directory and its plan; :meth:`run` fills in the cells.
    ``on_message`` takes the lines it has while it runs (:mod:`riskppo.logs`)."""

    config: Config  # with a selection: its first candidate's (the risk settings judged under)
    settings: WalkForwardSettings
    run_dir: Path
    segments: list[Segment]
    selection: Selection | None = None  # --candidates
    on_message: OnMessage = log_message

    def job(self, segment: Segment, seed: int) -> CellJob:
        """Segment ``segment``'s test cell with ``seed``; with a selection it waits for the
        segment's selection cells, and :meth:`resolve` gives it the chosen config."""
        s = self.settings
        prev = segment.index - 1
        warm = s.warm_start and prev >= 0
        after: tuple[Path, ...] = ()
        if self.selection is not None:
            from riskppo.walkforward.select import waits_for

            after = waits_for(self.run_dir, self.selection, segment, s.seeds, self.on_message)
        return CellJob(
            self.config,
            segment,
            seed,
            s.steps_for(segment.index, self.config.total_timesteps),
            self.run_dir / "cells" / cell_name(segment, seed),
            self.run_dir / "cells" / cell_name(self.segments[prev], seed) / "model"
            if warm
            else None,
            after,
        )

    def pending(self) -> list[CellJob]:
        """Cells without a ``cell.json``, oldest segment first; with a selection, a segment's
        unfinished selection cells before its test cells while its choice is not made. A cell
        whose files do not read back (:func:`read_cell`) is unfinished too: its ``cell.json``
        is removed, so that no warm start reads it, and a line naming it goes to
        ``on_message``."""
        out = []
        say = self.on_message
        for seg in self.segments:
            tests = [
                j for j in (self.job(seg, s) for s in self.settings.seeds) if _unfinished(j, say)
            ]
            if tests and self.selection is not None and any(j.after for j in tests):
                from riskppo.walkforward.select import selection_jobs

                jobs = selection_jobs(self.run_dir, self.selection, seg, self.settings.seeds)
                out += [j for j in jobs if _unfinished(j, say)]
            out += tests
        return out

    def resolve(self, job: CellJob) -> CellJob:
        """``job`` as it runs: with a selection, a test cell gets its segment's chosen
        candidate (:func:`~riskppo.walkforward.select.choose`, once the segment's
        selection cells have finished)."""
        if self.selection is None:
            return job
        from riskppo.walkforward.select import choose, chosen_job, is_selection_cell

        if is_selection_cell(job):
            return job
        choice = choose(
            self.run_dir, self.selection, job.segment, self.settings.seeds, self.on_message
        )
        return chosen_job(job, self.selection, choice)

    def n_cells(self) -> int:
        """Cells of the run: segments × seeds, times (1 + candidates) with a selection."""
        per = 1 + (len(self.selection.candidates) if self.selection is not None else 0)
        return len(self.segments) * len(self.settings.seeds) * per

    def run(self, *, progress_bar: bool = True, backend: Backend = LOCAL) -> str | None:
        """Run every pending cell as a job on ``backend``, one progress bar over the cells;
        return the line saying how long that took (None when no cell was left to run)."""
        t0 = time.monotonic()
        todo = self.pending()
        total = self.n_cells()
        bar = ProgressBar(
            total,
            description="walk-forward",
            unit="cells",
            fields={"last": "last", "sharpe": "Sharpe"},
            enabled=progress_bar,
        )
        workers = self.settings.workers
        if not todo:  # judged again: no worker, no Ray connection
            with bar:
                bar.update(completed=total)
            return None
        # Ctrl-C, SIGTERM, a failed cell: the runner ends every worker; finished cells are on disk
        with bar, open_runner(backend, min(workers, len(todo)) if workers else None) as runner:
            bar.update(completed=total - len(todo))
            _schedule(runner, todo, bar, self.resolve)
            used = min(runner.workers, len(todo))
            cpus = runner.cpus
        took = time.monotonic() - t0
        return wall_time_line("riskppo walkforward", len(todo), used, took, cpus, backend.label)

    def records(self) -> list[Record]:
        """Each seed's stitched record (every cell must be finished)."""
        out = []
        for seed in self.settings.seeds:
            parts = []
            for seg in self.segments:
                cell = read_cell(self.run_dir / "cells" / cell_name(seg, seed))
                if cell is None:
                    raise RuntimeError(f"cell {cell_name(seg, seed)} has not finished")
                parts.append(cell[1])
            out.append(stitch(f"seed {seed}", parts))
        return out

    def cell_summaries(self) -> list[dict[str, Any]]:
        out = []
        for seg in self.segments:
            for seed in self.settings.seeds:
                cell = read_cell(self.run_dir / "cells" / cell_name(seg, seed))
                if cell is not None:
                    out.append(cell[0])
        return out


def _unfinished(job: CellJob, on_message: OnMessage) -> bool:
    """Whether ``job``'s cell has no ``cell.json`` or one whose files do not read back (then
    removed, with a line naming it to ``on_message``)."""
    try:
        return read_cell(job.cell_dir) is None
    except UnreadableCell as exc:
        on_message(f"riskppo walkforward: {exc}; training that cell again")
        remove_entry(job.cell_dir / CELL_DONE)
        return True


def _schedule(
    runner: JobRunner,
    todo: list[CellJob],
    bar: ProgressBar,
    resolve: Callable[[CellJob], CellJob],
) -> None:
    """Submit the cells whose predecessors (warm start, selection) have finished, each as
    ``resolve`` makes it; take the next finished cell; repeat. A failed cell stops the run
    (its error raised here; ``--resume`` retries it)."""
    waiting = list(todo)

    def submit_ready() -> None:
        for job in [j for j in waiting if _ready(j)]:
            waiting.remove(job)
            job = resolve(job)
            runner.submit(job.name, run_cell, job)
        if waiting and not runner.pending:
            raise RuntimeError("walk-forward: no cell can start (a predecessor is missing)")

    submit_ready()
    for outcome in runner.results():
        if isinstance(outcome, Failed):
            raise outcome.exception()
        sharpe = outcome.value["metrics"]["agent"].get("sharpe")
        bar.update(advance=1, last=outcome.name, sharpe="-" if sharpe is None else f"{sharpe:.2f}")
        submit_ready()


def _ready(job: CellJob) -> bool:
    """Whether ``job``'s predecessors have finished: the cell it warm-starts from, the files it
    waits for (a selection's cells)."""
    warm = job.warm_from is None or (job.warm_from.parent / CELL_DONE).is_file()
    return warm and all(p.is_file() for p in job.after)


def prepare(
    cfg: Config | None,
    settings: WalkForwardSettings,
    run_dir: Path,
    *,
    resume: bool,
    selection: Selection | None = None,
    on_message: OnMessage = log_message,
) -> WalkForwardRun:
    """The run's plan; a new run writes ``config.yaml`` (with a ``selection``, ``--candidates``:
    ``candidates/``, and ``cfg`` is None) and ``walkforward.json`` (and refuses a directory that
    already holds files), ``resume`` reads them back (``cfg`` and ``selection`` are then
    ignored and only ``settings.workers`` is taken from ``settings``). ``on_message``: the
    run's lines while it runs."""
    settings_path = run_dir / SETTINGS_FILE
    if resume:
        if not settings_path.is_file():
            raise ConfigError(
                f"{run_dir} is not a walk-forward run (no {SETTINGS_FILE}); start one with "
                "`riskppo walkforward --run-dir DIR`"
            )
        kept, selection = _read_settings(settings_path)
        cfg = None if selection is not None else Config.from_yaml(run_dir / "config.yaml")
        settings = dataclasses.replace(kept, workers=settings.workers)
    elif run_dir.exists() and any(p.name != ".lock" for p in run_dir.iterdir()):
        raise ConfigError(
            f"{run_dir} already holds files; continue it with `riskppo walkforward --resume "
            f"{run_dir}` or choose another --run-dir"
        )
    elif selection is not None:
        from riskppo.walkforward.select import check_candidates

        check_candidates(selection, settings)
    if selection is not None:
        cfg = selection.candidates[0].config
    if cfg is None:
        raise ValueError("a new walk-forward needs a config")
    market_kind(cfg.env.id, "walk-forward")
    if cfg.data.bars is not None:
        raise ConfigError("walk-forward sets data.bars itself for each segment; drop it")
    segments = _plan(cfg, settings, selection)
    if not resume:
        run_dir.mkdir(parents=True, exist_ok=True)
        stored: dict[str, Any] = {"settings": settings.to_dict()}
        if selection is None:
            cfg.to_yaml(run_dir / "config.yaml")
        else:
            from riskppo.walkforward.select import write_selection

            write_selection(run_dir, selection)
            stored["select"] = selection.to_dict()
        stored["segments"] = [s.__dict__ for s in segments]
        write_json(settings_path, stored)
    return WalkForwardRun(cfg, settings, run_dir, segments, selection, on_message)


def _plan(cfg: Config, settings: WalkForwardSettings, selection: Selection | None) -> list[Segment]:
    """The segments of ``cfg``'s data; with a selection, its candidates' shared data, each
    segment long enough to hold its validation rows (``ConfigError`` otherwise)."""
    if selection is None:
        n_rows = _n_rows(cfg)
    else:
        from riskppo.walkforward.select import check_data

        n_rows = check_data(selection)
    try:
        segments = plan_segments(n_rows, settings)
    except ValueError as exc:  # --initial longer than the data
        raise ConfigError(str(exc)) from None
    if selection is not None:
        from riskppo.walkforward.select import check_select_bars

        check_select_bars(segments, selection.select_bars)
    return segments


def _read_settings(path: Path) -> tuple[WalkForwardSettings, Selection | None]:
    """The schedule a run was started with, and its selection (None without
    ``--candidates``); ``ConfigError`` (one line) if the file does not read back: without it
    the run's cells cannot be placed."""
    from riskppo.walkforward.select import read_selection

    try:
        stored = json.loads(path.read_text())
        settings = WalkForwardSettings.from_dict(stored["settings"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"{path} does not read back ({exc}); the run's schedule is lost: start a new run "
            "with `riskppo walkforward --run-dir DIR`"
        ) from None
    return settings, read_selection(path.parent, stored)


def _n_rows(cfg: Config) -> int:
    from riskppo.envs.trading.factory import trading_range

    kind = market_kind(cfg.env.id, "walk-forward")
    if "rows" in kind.hooks:  # the kind's own count (default: the single asset's bars)
        return int(kind.hook("rows")(cfg))

    df, _, _ = trading_range(part="train", **data_kwargs(cfg.data))
    return len(df)


def walk_forward(
    cfg: Config | None,
    run_dir: str | Path,
    settings: WalkForwardSettings | None = None,
    *,
    resume: bool = False,
    progress_bar: bool = True,
    n_trials: int = 1,
    ledger: Path | None = None,
    selection: Selection | None = None,
    on_message: OnMessage = log_message,
    backend: Backend = LOCAL,
) -> WalkForwardResult:
    """Run (or ``resume``, when ``cfg`` may be None) a walk-forward of ``cfg`` into ``run_dir``;
    write the stitched records, ``metrics.json`` and the report; return the metrics (see
    :func:`riskppo.walkforward.analysis.analyse`) with the report's path and the
    summary (:class:`WalkForwardResult`). ``n_trials``: the configurations
    tried on this data, this one included — the verdict's p-value is adjusted for them (Šidák),
    so the best of several tries is not mistaken for an edge; a finished run can be judged again
    with another count (``resume``). ``ledger``: the trial ledger the stitched record (the
    seeds' mean) is recorded in; the verdict's N is the larger of ``n_trials`` and the ledger's
    count of configurations judged on this data (:mod:`riskppo.runs.ledger`). ``selection``
    (``cfg`` None): choose among configurations inside each segment's training rows and judge
    the procedure as one configuration (:mod:`riskppo.walkforward.select`).
    ``on_message``: the lines it has while it runs (a damaged cell it trains again).
    ``backend``: where the cells run (:mod:`riskppo.runs.jobs`; local processes by default, or
    a Ray cluster) — the records are the same wherever they run."""
    run_dir = Path(run_dir)
    with lock_run(run_dir, "riskppo walkforward"):
        wf = prepare(
            cfg,
            settings or WalkForwardSettings(),
            run_dir,
            resume=resume,
            selection=selection,
            on_message=on_message,
        )
        took = wf.run(progress_bar=progress_bar, backend=backend)
        done = _outputs(wf, run_dir, n_trials, ledger)
    return dataclasses.replace(done, took=took)


@dataclass(frozen=True)
class WalkForwardResult:
    """What :func:`walk_forward` found: ``metrics`` (those of ``metrics.json``), the report's
    path, the ``summary`` (the verdict and the statistics under it, as ``riskppo walkforward``
    prints them) and ``took``, the line saying how long the cells took (None when no cell was
    left to run)."""

    metrics: dict[str, Any]
    report: Path
    summary: str
    took: str | None = None


def _outputs(
    wf: WalkForwardRun, run_dir: Path, n_trials: int, ledger: Path | None = None
) -> WalkForwardResult:
    """Analyse the finished cells of ``wf``, write the report files and return the metrics,
    the report's path and the summary."""
    from riskppo.evaluation.trials import trials_block
    from riskppo.walkforward.analysis import analyse  # the heavy statistics, when needed
    from riskppo.walkforward.report import summary_text, write_outputs

    records = wf.records()
    cells = wf.cell_summaries()
    trials = _judge(wf, run_dir, records, ledger, float(cells[0]["bars_per_year"]))
    kind = market_kind(wf.config.env.id, "walk-forward")
    if "walkforward_outputs" in kind.hooks:  # the kind's own analysis and report
        outputs = kind.hook("walkforward_outputs")
        block = trials_block(trials, n_trials)
        metrics, report, summary = outputs(run_dir, wf.config, records, cells, n_trials, block)
        return WalkForwardResult(metrics, report, summary)
    metrics = analyse(wf.config, wf.settings, records, cells, n_trials=n_trials, trials=trials)
    if wf.selection is not None:
        from riskppo.walkforward.select import selection_block

        protocol = _protocol(wf.settings)
        metrics["selection"] = selection_block(
            run_dir, wf.selection, wf.segments, protocol, wf.on_message
        )
    report = write_outputs(run_dir, wf.config, records, metrics)
    return WalkForwardResult(metrics, report, summary_text(metrics))


def _protocol(settings: WalkForwardSettings) -> dict[str, Any]:
    """The schedule as part of a configuration (not the seeds or workers)."""
    return {k: v for k, v in settings.to_dict().items() if k not in ("seeds", "workers")}


def _judge(
    wf: WalkForwardRun, run_dir: Path, records: list[Record], ledger: Path | None, bpy: float
) -> Trials | None:
    """Record the seeds' mean out-of-sample record in the trial ledger (one configuration
    whatever its seeds: the schedule, not the seeds or workers, is part of it; with a
    selection one configuration too, the procedure) and count the trials on its data."""
    from riskppo.evaluation.trials import TrialSpec, judge_trials
    from riskppo.walkforward.plan import mean_record

    protocol = _protocol(wf.settings)
    procedure = None
    if wf.selection is not None:
        from riskppo.walkforward.select import procedure_hash

        procedure = procedure_hash(wf.selection, protocol)
    spec = TrialSpec(ledger, wf.config, "walkforward", protocol, config_id=procedure)
    mean = mean_record(records) if len(records) > 1 else records[0]
    return judge_trials(spec, mean.returns("agent"), bpy, run_dir, wf.config)
