"""Progress bar for long work: steps, fps, ETA and the last mean episode return (SPEC §1.3)."""

from __future__ import annotations

from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class TrainingProgress:
    """A ``rich`` progress bar (a no-op when disabled)."""

    def __init__(self, total: int, *, enabled: bool = True, description: str = "training") -> None:
        self.enabled = enabled
        self.progress: Progress | None = None
        if enabled:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[fps]} fps  return {task.fields[ret]}"),
            )
            self.task = self.progress.add_task(description, total=total, fps="-", ret="-")

    def __enter__(self) -> TrainingProgress:
        if self.progress is not None:
            self.progress.start()
        return self

    def update(self, completed: int, fps: float, mean_return: float | None) -> None:
        if self.progress is None:
            return
        ret = "-" if mean_return is None else f"{mean_return:.2f}"
        self.progress.update(self.task, completed=completed, fps=f"{fps:,.0f}", ret=ret)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.progress is not None:
            self.progress.stop()
