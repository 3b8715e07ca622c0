"""``riskppo universe``: train and backtest one agent per stock of the bundled sp500 dataset (and
per seed), in parallel processes, and tabulate the verdict per stock.

Layout of the parent run directory::

    universe_spec.json       what to run: symbols, seeds and the base config (``--resume``
                             reads it, so a resumed universe runs exactly the same cells)
    cells/<SYMBOL>-s<seed>/  one ordinary run directory per cell (``riskppo train`` layout,
                             backtest_test/ included)
    cells/<SYMBOL>-s<seed>.yaml, .log   the cell's config and its output, beside its run
                             directory (``riskppo train`` starts only in an empty one)
    universe.json            the table's numbers per cell and the counts, and the ES
                             backtest of the risk overlay's forecast per cell and pooled
    universe.md              the table (and that backtest's section), also printed

Each cell is a ``riskppo train`` process (``--resume`` for a cell with a checkpoint), so the run
lock, checkpoints, resume and the final backtest are those of :mod:`riskppo.cli.runner`. A cell
is *finished* when its evaluation and test backtest report exist and read back
(:func:`riskppo.cli.runner.run_finished`, :func:`_finished`): a resumed universe skips it and leaves
its files alone (one whose files do not read back has its evaluation written again);
a cell with a checkpoint resumes from it; a cell without one starts again from scratch. Cells
checkpoint every :data:`CELL_CHECKPOINT_EVERY` updates unless the config sets
``checkpoint.every_updates``, so a killed universe loses at most that much training per cell
(checkpoints re-seed the envs, so a cell's result is deterministic but differs from a
``riskppo train`` run of the same config without periodic checkpoints).

The cells are jobs of the shared runner (:mod:`riskppo.runs.jobs`), each running its command
(:func:`~riskppo.runs.jobs.run_command`): on local worker processes, or as Ray tasks on a
cluster (``--backend ray``; the run directory on a file system every node sees).

Stopping: Ctrl-C or SIGTERM to the universe stops each running cell once (the cells run in
sessions of their own, so a terminal's Ctrl-C reaches the universe only); each trains on to its
next checkpoint, saves and exits, and the universe says how to continue. A cell dies with a
killed universe (Linux), so no cell trains on, orphaned, holding its run directory's lock.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from riskppo.cli.runner import evaluation_damage, run_finished
from riskppo.config import Config, ConfigError
from riskppo.config.sections import SP500_SYMBOLS
from riskppo.envs.features import left_out_line, split_features
from riskppo.envs.registration import market_kind
from riskppo.evaluation.universe import (
    CellResult,
    cell_result,
    count_cells,
    format_table,
    limit_section,
)
from riskppo.monitor.progress import ProgressBar, wall_time_line
from riskppo.runs.jobs import LOCAL, Backend, Command, Failed, open_runner, run_command
from riskppo.runs.ledger import LEDGER_ENV
from riskppo.runs.rundir import checkpoint_dir
from riskppo.safefs import remove_entry, write_text_atomic

__all__ = ["CELL_CHECKPOINT_EVERY", "SPEC_FILE", "Cell", "resume_universe", "run_universe"]

SPEC_FILE = "universe_spec.json"
CELL_CHECKPOINT_EVERY = 10  # updates between a cell's checkpoints, unless the config sets it
STOP_WAIT_S = 300.0  # how long a stopped universe waits for a cell to reach its checkpoint
log = logging.getLogger("riskppo")


@dataclass(frozen=True)
class Cell:
    """One (stock, seed) run of a universe."""

    symbol: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.symbol}-s{self.seed}"


def check_symbols(symbols: Sequence[str]) -> list[str]:
    """Upper-cased, de-duplicated ``symbols``; an unknown one raises :class:`ConfigError`
    (``--symbols``) listing the valid ones."""
    out = list(dict.fromkeys(s.upper() for s in symbols))
    bad = [s for s in out if s not in SP500_SYMBOLS]
    if bad or not out:
        raise ConfigError(
            f"--symbols {' '.join(bad) or '(none)'}: not in the sp500 dataset; valid symbols: "
            + " ".join(SP500_SYMBOLS)
        )
    return out


def cell_config(base: Config, cell: Cell) -> Config:
    """``base`` trading ``cell.symbol`` of the sp500 dataset with ``cell.seed``."""
    data = base.to_dict()
    data["seed"] = cell.seed
    data["data"].update(dataset="sp500", symbol=cell.symbol, path=None)
    if data["checkpoint"]["every_updates"] is None:
        data["checkpoint"]["every_updates"] = CELL_CHECKPOINT_EVERY
    return Config.build(data)


def run_universe(
    cfg: Config,
    run_dir: Path,
    *,
    symbols: Sequence[str] = SP500_SYMBOLS,
    seeds: Sequence[int] = (0,),
    workers: int | None = None,
    progress_bar: bool = True,
    ledger: Path | None = None,
    backend: Backend = LOCAL,
) -> list[CellResult]:
    """Train and backtest ``cfg`` on each (symbol, seed) into ``run_dir/cells/``, ``workers``
    cells at a time (default: all cores, or all CPUs of the Ray cluster) on ``backend``; write
    and print the table. ``run_dir`` must be new or empty (continue one with
    :func:`resume_universe`). Each cell's verdict is recorded in the trial ledger ``ledger``
    (None: none; :mod:`riskppo.runs.ledger`)."""
    market_kind(cfg.env.id, "riskppo universe", single_asset=True)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(f"--run-dir {run_dir} is not empty; continue it with --resume {run_dir}")
    if not seeds or any(s < 0 for s in seeds):
        raise ConfigError(f"--seeds {list(seeds)}: give one or more seeds >= 0")
    spec = {"symbols": check_symbols(symbols), "seeds": list(dict.fromkeys(seeds))}
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / SPEC_FILE, json.dumps(spec | {"config": cfg.to_dict()}, indent=2))
    return resume_universe(
        run_dir, workers=workers, progress_bar=progress_bar, ledger=ledger, backend=backend
    )


def resume_universe(
    run_dir: Path,
    *,
    workers: int | None = None,
    progress_bar: bool = True,
    ledger: Path | None = None,
    backend: Backend = LOCAL,
) -> list[CellResult]:
    """Run every cell of ``run_dir``'s spec that is not finished (finished ones are skipped,
    their files untouched), then write ``universe.json`` / ``universe.md`` and print the table."""
    spec_path = run_dir / SPEC_FILE
    if not spec_path.is_file():
        raise FileNotFoundError(
            f"{spec_path}: no such file; pass a directory written by `riskppo universe`"
        )
    base, cells = _read_spec(spec_path)
    _note_close_only(base)
    todo = [c for c in cells if not _finished(base, c, run_dir)]
    t0 = time.monotonic()
    errors, took = _run_cells(base, (cells, todo), run_dir, workers, progress_bar, ledger, backend)
    results = [cell_result(c.symbol, c.seed, _cell_dir(run_dir, c), errors.get(c)) for c in cells]
    _write_results(run_dir, base, results)
    if took is not None:
        used, cpus = took
        line = wall_time_line(
            "riskppo universe", len(todo), used, time.monotonic() - t0, cpus, backend.label
        )
        print(line)
    return results


def _read_spec(path: Path) -> tuple[Config, list[Cell]]:
    """The base config and the cells of a universe's spec; ``ConfigError`` (one line) if it
    does not read back: without it the universe's cells are unknown."""
    try:
        spec = json.loads(path.read_text())
        cells = [Cell(str(sym), int(seed)) for sym in spec["symbols"] for seed in spec["seeds"]]
        config = spec["config"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"{path} does not read back ({exc}); the universe's cells are unknown: start a new "
            "one with `riskppo universe --run-dir DIR`"
        ) from None
    return Config.build(config), cells


def _cell_dir(run_dir: Path, cell: Cell) -> Path:
    return run_dir / "cells" / cell.name


def _cell_log(run_dir: Path, cell: Cell) -> Path:
    return run_dir / "cells" / f"{cell.name}.log"


def _note_close_only(base: Config) -> None:
    """The one line saying which features the close-only sp500 data leaves out (the cells'
    own lines go to their logs)."""
    features = base.env.kwargs.get("features")
    if features:
        _, left_out = split_features(features, ("close",))
        if left_out:
            print(f"riskppo universe: {left_out_line('sp500', ('close',), left_out)}")


def _command(base: Config, cell: Cell, run_dir: Path, ledger: Path | None) -> Command:
    """The ``riskppo train`` command of a cell: resume from its checkpoint, else a fresh run
    (what an earlier attempt left without a checkpoint is removed first); one core per cell
    (the cells run in parallel), its output appended to the cell's log."""
    cell_dir = _cell_dir(run_dir, cell)
    cli = ["-m", "riskppo.cli", "train", "--no-progress"]
    if (checkpoint_dir(cell_dir) / "latest").is_file():
        args = [*cli, "--resume", str(cell_dir)]
    else:
        if cell_dir.exists():
            shutil.rmtree(cell_dir)
        cell_dir.mkdir(parents=True)
        config = cell_dir.with_name(f"{cell.name}.yaml")
        cell_config(base, cell).to_yaml(config)
        args = [*cli, "--config", str(config), "--run-dir", str(cell_dir)]
    env = {
        "OMP_NUM_THREADS": "1",
        LEDGER_ENV: str(ledger.resolve()) if ledger is not None else "off",  # the cell's train
    }
    return Command(tuple(args), _cell_log(run_dir, cell), env)


def _run_cells(
    base: Config,
    cells: tuple[list[Cell], list[Cell]],
    run_dir: Path,
    workers: int | None,
    progress_bar: bool,
    ledger: Path | None,
    backend: Backend,
) -> tuple[dict[Cell, str], tuple[int, int] | None]:
    """Run the unfinished cells (``cells``: all of them, those to run), ``workers`` at a time
    on ``backend``; return each failed cell's reason and, where cells ran, the workers they ran
    on and the cores of the machine or cluster. Stopped (Ctrl-C, SIGTERM), the runner asks each
    running cell to stop at its next checkpoint and waits up to :data:`STOP_WAIT_S` for it."""
    every, todo = cells
    errors: dict[Cell, str] = {}
    bar = ProgressBar(
        len(every),
        description="universe",
        unit="cells",
        fields={"running": "running", "failed": "failed"},
        enabled=progress_bar,
    )
    if not todo:
        _say_start(every, todo, 1, run_dir)
        return errors, None
    by_name = {c.name: c for c in todo}
    with open_runner(backend, workers, stop_grace=STOP_WAIT_S) as runner:
        _say_start(every, todo, runner.workers, run_dir)
        with bar:
            bar.update(completed=len(every) - len(todo), running="0", failed="0")
            for cell in todo:
                runner.submit(cell.name, run_command, _command(base, cell, run_dir, ledger))
            for outcome in runner.results():
                cell = by_name[outcome.name]
                if isinstance(outcome, Failed):  # its worker died (or its command did not start)
                    errors[cell] = outcome.reason
                elif outcome.value != 0:
                    errors[cell] = _failure(outcome.value, _cell_log(run_dir, cell))
                running = min(runner.pending, runner.workers)
                bar.update(advance=1, running=str(running), failed=str(len(errors)))
        return errors, (min(runner.workers, len(todo)), runner.cpus)


def _say_start(every: list[Cell], todo: list[Cell], workers: int, run_dir: Path) -> None:
    print(
        f"riskppo universe: {len(every)} cells ({len(every) - len(todo)} finished), "
        f"{min(workers, max(len(todo), 1))} at a time → {run_dir}"
    )


def _finished(base: Config, cell: Cell, run_dir: Path) -> bool:
    """Whether the cell's run finished (:func:`run_finished`) and its result reads back
    (:func:`cell_result`). A cell whose files do not read back (a truncated write, a damaged
    copy) is unfinished: the line naming it is printed and its test backtest removed, so that
    its ``riskppo train --resume`` writes the evaluation again from its checkpoint."""
    cell_dir = _cell_dir(run_dir, cell)
    cfg = cell_config(base, cell)
    damage = evaluation_damage(cell_dir, cfg)
    if damage is None:
        if not run_finished(cell_dir, cfg):
            return False
        damage = cell_result(cell.symbol, cell.seed, cell_dir).error
        if damage is None:
            return True
    print(f"riskppo universe: cells/{cell.name}/{damage}; writing its evaluation again")
    if os.path.lexists(cell_dir / "backtest_test"):
        remove_entry(cell_dir / "backtest_test")  # a link is removed, never followed
    return False


def _failure(returncode: int, log: Path) -> str:
    """The last line of a failed cell's log (its one-line error), with the exit status."""
    lines = log.read_text(errors="replace").strip().splitlines()
    last = lines[-1].strip() if lines else ""
    return f"exit code {returncode}" + (f": {last}" if last else "")


def _write_results(run_dir: Path, base: Config, results: list[CellResult]) -> None:
    title = f"riskppo universe: test-period verdict per stock ({run_dir.name})"
    limits = limit_section(results)  # the risk overlay's forecast, ES-backtested
    table = format_table(results, title) + ("\n" + limits.markdown if limits.markdown else "")
    summary = {
        "run_dir": str(run_dir),
        "total_timesteps": base.total_timesteps,
        "counts": asdict(count_cells(results)),
        "cells": [r.to_dict() for r in results],
        "limit_backtest": {"cells": limits.cells, "pooled": limits.pooled},
    }
    write_text_atomic(
        run_dir / "universe.json", json.dumps(summary, indent=2, allow_nan=False) + "\n"
    )
    write_text_atomic(run_dir / "universe.md", table)
    print(table, end="")
    print(f"riskppo universe: table → {run_dir / 'universe.md'} (numbers: universe.json)")
