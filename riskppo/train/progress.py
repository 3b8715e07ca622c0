"""Progress bars for long work (SPEC §1.3): training steps with fps, ETA and the last mean
episode return; PBT rounds with the best score so far."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class ProgressBar:
    """A ``rich`` bar: ``description [bar] done/total unit elapsed ETA remaining label value …``.

    ``fields`` maps each status field's name to its label, shown in that order; values are
    strings given to :meth:`update` (``-`` until then). A no-op when ``enabled`` is false.
    """

    def __init__(
        self,
        total: int,
        *,
        description: str,
        unit: str,
        fields: dict[str, str],
        enabled: bool = True,
    ) -> None:
        self.progress: Progress | None = None
        if not enabled:
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
        self.task = self.progress.add_task(description, total=total, **initial)

    def __enter__(self) -> ProgressBar:
        if self.progress is not None:
            self.progress.start()
        return self

    def update(self, *, completed: int | None = None, advance: int = 0, **values: str) -> None:
        """Set the count (``completed``) or add to it (``advance``) and the status values."""
        if self.progress is not None:
            fields: dict[str, Any] = values  # rich's task fields
            self.progress.update(self.task, completed=completed, advance=advance, **fields)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.progress is not None:
            self.progress.stop()


def training_progress(total_timesteps: int, enabled: bool) -> ProgressBar:
    """The bar of :meth:`DistributionalPPO.learn`: steps, fps and the last mean return."""
    return ProgressBar(
        total_timesteps,
        description="training",
        unit="steps",
        fields={"fps": "fps", "ret": "return"},
        enabled=enabled,
    )


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec``, or ``-`` when there is none yet."""
    return "-" if value is None else format(value, spec)
