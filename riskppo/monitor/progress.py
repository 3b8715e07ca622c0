"""Progress for long work (design §1.3): training steps with fps, ETA and the last mean episode
return; PBT rounds with the best score so far.

On a terminal (or in Jupyter) it is a ``rich`` bar. When the output is not a terminal (CI logs,
``| tee``, a file) a redrawn bar would be cut and mangled, so plain lines are printed instead:
one each time another tenth of the work is done, one at least every
:data:`PLAIN_MAX_INTERVAL_S` seconds, and a last one at the end::

    training: 20,480/200,000 steps (10%)  elapsed 0:00:05  ETA 0:00:44  fps 4,096  return -0.12
"""

from __future__ import annotations

import math
import os
import sys
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

PLAIN_MAX_INTERVAL_S = 30.0  # a plain line at least this often, also between tenths


def output_is_interactive() -> bool:
    """Whether stdout is a terminal or a Jupyter notebook (where a live bar renders)."""
    console = Console()
    return console.is_terminal or console.is_jupyter


def hms(seconds: float | None) -> str:
    """``seconds`` as ``H:MM:SS`` (``-:--:--`` when unknown)."""
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def wall_time_line(
    command: str,
    cells: int,
    workers: int,
    seconds: float,
    cores: int | None = None,
    unit: str = "worker process",
) -> str:
    """The line a parallel run prints at its end: how many cells it trained, with how many
    workers (``unit``: ``worker process``, ``Ray task``) on how many cores (default: this
    machine's), in how much wall time (``H:MM:SS``)."""
    cores = cores or os.cpu_count() or 1
    units = unit + ("es" if unit.endswith("s") else "s")
    return (
        f"{command}: {cells} cell{'s' * (cells != 1)} trained in {hms(seconds)} wall time, "
        f"{workers} {units if workers != 1 else unit} on {cores} core{'s' * (cores != 1)}"
    )


class ProgressBar:
    """``description [bar] done/total unit elapsed ETA remaining label value …``.

    ``fields`` maps each status field's name to its label, shown in that order; values are
    strings given to :meth:`update` (``-`` until then). A no-op when ``enabled`` is false.
    ``plain`` (default: whether stdout is not interactive, :func:`output_is_interactive`)
    prints periodic plain lines instead of the live ``rich`` bar (see the module docstring).
    ``start``: the count already done when the bar starts (a resumed run); the ETA is reckoned
    from the work done since.
    """

    def __init__(
        self,
        total: int,
        *,
        description: str,
        unit: str,
        fields: dict[str, str],
        enabled: bool = True,
        plain: bool | None = None,
        start: int = 0,
    ) -> None:
        self.progress: Progress | None = None
        self.plain = False
        if not enabled:
            return
        self.total, self.description, self.unit, self.fields = total, description, unit, fields
        self.values: dict[str, str] = {name: "-" for name in fields}
        self.completed = self.start = start
        self.plain = not output_is_interactive() if plain is None else plain
        self._t0 = self._last_time = time.monotonic()
        self._last_printed = start if start else -1
        if self.plain:
            return
        status = "  ".join(f"{label} {{task.fields[{name}]}}" for name, label in fields.items())
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn(status),
        )
        initial: dict[str, Any] = {name: "-" for name in fields}  # rich's task fields
        self.task = self.progress.add_task(description, total=total, completed=start, **initial)

    def __enter__(self) -> ProgressBar:
        if self.progress is not None:
            self.progress.start()
        return self

    def update(self, *, completed: int | None = None, advance: int = 0, **values: str) -> None:
        """Set the count (``completed``) or add to it (``advance``) and the status values."""
        if self.progress is not None:
            fields: dict[str, Any] = values  # rich's task fields
            self.progress.update(self.task, completed=completed, advance=advance, **fields)
        elif self.plain:
            self.completed = (self.completed if completed is None else completed) + advance
            self.values.update(values)
            if self._line_due():
                self._print_line()

    def _line_due(self) -> bool:
        """A plain line is due at each new tenth of the total, after ``PLAIN_MAX_INTERVAL_S``
        without one, and at the end."""
        if self.completed >= self.total:
            return True
        total = max(self.total, 1)
        new_tenth = 10 * self.completed // total > 10 * max(self._last_printed, 0) // total
        return new_tenth or time.monotonic() - self._last_time >= PLAIN_MAX_INTERVAL_S

    def plain_line(self) -> str:
        """The current state as one line: count, share, elapsed, ETA and the status fields."""
        done, total = self.completed, self.total
        elapsed = time.monotonic() - self._t0
        eta = elapsed * (total - done) / (done - self.start) if done > self.start else None
        status = "".join(f"  {label} {self.values[name]}" for name, label in self.fields.items())
        share = min(done / total, 1.0) if total else 1.0
        return (
            f"{self.description}: {done:,}/{total:,} {self.unit} ({share:.0%})  "
            f"elapsed {hms(elapsed)}  ETA {hms(max(eta, 0.0) if eta is not None else None)}"
            f"{status}"
        )

    def _print_line(self) -> None:
        print(self.plain_line(), file=sys.stdout, flush=True)
        self._last_printed = self.completed
        self._last_time = time.monotonic()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.progress is not None:
            self.progress.stop()
        elif self.plain and self._last_printed != self.completed:
            self._print_line()  # where it stopped (the end, a callback's stop, an error)


def whole_rollouts(steps: int, per_rollout: int) -> int:
    """``steps`` env steps rounded up to whole rollouts of ``per_rollout`` steps (``n_steps``
    × ``n_envs``): what ``learn(steps)`` trains, since it stops only between rollouts."""
    return -(-steps // per_rollout) * per_rollout


def training_progress(total_timesteps: int, enabled: bool, start: int = 0) -> ProgressBar:
    """The bar of :meth:`DistributionalPPO.learn`: steps, fps and the last mean return.
    ``total_timesteps`` is what will be trained (:func:`whole_rollouts`), so the count ends at
    it exactly; ``start``: the steps already trained (a resumed run shows its whole progress)."""
    return ProgressBar(
        total_timesteps,
        description="training",
        unit="steps",
        fields={"fps": "fps", "ret": "return"},
        enabled=enabled,
        start=start,
    )


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec``, or ``-`` when there is none yet."""
    return "-" if value is None else format(value, spec)
