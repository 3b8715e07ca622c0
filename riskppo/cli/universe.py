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
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

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
from riskppo.runs.interrupt import sigterm_as_interrupt
from riskppo.runs.ledger import LEDGER_ENV
from riskppo.runs.processes import child_env
from riskppo.runs.rundir import checkpoint_dir
from riskppo.safefs import remove_entry, write_text_atomic

__all__ = ["CELL_CHECKPOINT_EVERY", "SPEC_FILE", "Cell", "resume_universe", "run_universe"]

SPEC_FILE = "universe_spec.json"
CELL_CHECKPOINT_EVERY = 10  # updates between a cell's checkpoints, unless the config sets it
POLL_S = 0.2
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
) -> list[CellResult]:
    """Train and backtest ``cfg`` on each (symbol, seed) into ``run_dir/cells/``, ``workers``
    processes at a time (default: all cores); write and print the table. ``run_dir`` must be
    new or empty (continue one with :func:`resume_universe`). Each cell's verdict is recorded
    in the trial ledger ``ledger`` (None: none; :mod:`riskppo.runs.ledger`)."""
    market_kind(cfg.env.id, "riskppo universe", single_asset=True)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(f"--run-dir {run_dir} is not empty; continue it with --resume {run_dir}")
    if not seeds or any(s < 0 for s in seeds):
        raise ConfigError(f"--seeds {list(seeds)}: give one or more seeds >= 0")
    spec = {"symbols": check_symbols(symbols), "seeds": list(dict.fromkeys(seeds))}
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / SPEC_FILE, json.dumps(spec | {"config": cfg.to_dict()}, indent=2))
    return resume_universe(run_dir, workers=workers, progress_bar=progress_bar, ledger=ledger)


def resume_universe(
    run_dir: Path,
    *,
    workers: int | None = None,
    progress_bar: bool = True,
    ledger: Path | None = None,
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
    t0 = time.monotonic()
    workers = workers or os.cpu_count() or 1
    errors, trained = _run_cells(base, cells, run_dir, workers, progress_bar, ledger)
    results = [cell_result(c.symbol, c.seed, _cell_dir(run_dir, c), errors.get(c)) for c in cells]
    _write_results(run_dir, base, results)
    if trained:
        workers = min(workers, trained)
        print(wall_time_line("riskppo universe", trained, workers, time.monotonic() - t0))
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


def _command(base: Config, cell: Cell, cell_dir: Path) -> list[str]:
    """The ``riskppo train`` command line of a cell: resume from its checkpoint, else a fresh
    run (what an earlier attempt left without a checkpoint is removed first)."""
    cli = [sys.executable, "-m", "riskppo.cli", "train", "--no-progress"]
    if (checkpoint_dir(cell_dir) / "latest").is_file():
        return [*cli, "--resume", str(cell_dir)]
    if cell_dir.exists():
        shutil.rmtree(cell_dir)
    cell_dir.mkdir(parents=True)
    config = cell_dir.with_name(f"{cell.name}.yaml")
    cell_config(base, cell).to_yaml(config)
    return [*cli, "--config", str(config), "--run-dir", str(cell_dir)]


@dataclass
class _Running:
    cell: Cell
    proc: subprocess.Popen[bytes]
    log: IO[bytes]


def _run_cells(
    base: Config,
    cells: list[Cell],
    run_dir: Path,
    workers: int,
    progress_bar: bool,
    ledger: Path | None,
) -> tuple[dict[Cell, str], int]:
    """Run the unfinished cells, ``workers`` at a time; return each failed cell's reason and
    how many cells ran."""
    todo = [c for c in cells if not _finished(base, c, run_dir)]
    n_todo = len(todo)
    print(
        f"riskppo universe: {len(cells)} cells ({len(cells) - len(todo)} finished), "
        f"{min(workers, max(len(todo), 1))} at a time → {run_dir}"
    )
    errors: dict[Cell, str] = {}
    running: list[_Running] = []
    bar = ProgressBar(
        len(cells),
        description="universe",
        unit="cells",
        fields={"running": "running", "failed": "failed"},
        enabled=progress_bar,
    )
    with bar, sigterm_as_interrupt():
        bar.update(completed=len(cells) - len(todo), running="0", failed="0")
        try:
            while todo or running:
                while todo and len(running) < workers:
                    running.append(_start(base, todo.pop(0), run_dir, ledger))
                time.sleep(POLL_S)
                for r in [r for r in running if r.proc.poll() is not None]:
                    running.remove(r)
                    r.log.close()
                    if r.proc.returncode != 0:
                        errors[r.cell] = _failure(r, _cell_log(run_dir, r.cell))
                    bar.update(advance=1, running=str(len(running)), failed=str(len(errors)))
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the cells stop at a checkpoint
            _stop_cells(running)
            raise
    return errors, n_todo


def _stop_cells(running: list[_Running]) -> None:
    """Ask every running cell to stop (``riskppo train`` trains on to its next checkpoint and
    exits) and wait for them (a cell still running after :data:`STOP_WAIT_S` is killed: it
    resumes from its previous checkpoint)."""
    for r in running:
        r.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    for r in running:
        try:
            r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait()
        r.log.close()


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


def _start(base: Config, cell: Cell, run_dir: Path, ledger: Path | None) -> _Running:
    cell_dir = _cell_dir(run_dir, cell)
    cmd = _command(base, cell, cell_dir)
    out = open(_cell_log(run_dir, cell), "ab")  # noqa: SIM115 (closed when the process ends)
    env = os.environ | {"OMP_NUM_THREADS": "1"}  # one core per cell; the cells run in parallel
    env[LEDGER_ENV] = str(ledger.resolve()) if ledger is not None else "off"  # the cell's train
    # A session of its own: Ctrl-C reaches the universe only, which stops each cell once
    # (_stop_cells); a cell dies with the universe if that is killed (child_env).
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env(env), start_new_session=True
    )
    return _Running(cell, proc, out)


def _failure(r: _Running, log: Path) -> str:
    """The last line of a failed cell's log (its one-line error), with the exit status."""
    lines = log.read_text(errors="replace").strip().splitlines()
    last = lines[-1].strip() if lines else ""
    return f"exit code {r.proc.returncode}" + (f": {last}" if last else "")


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
