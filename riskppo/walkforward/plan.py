"""The walk-forward schedule and its out-of-sample record (pure: no training, no files).

A walk-forward run retrains the agent every ``step`` bars and trades the next ``step`` bars with
the frozen model (Pardo, *The Evaluation and Optimization of Trading Strategies*, 2008, ch. 11;
López de Prado, *Advances in Financial Machine Learning*, 2018, §12.2). Segment ``k`` trains on
rows ``[train_start, test_start)`` — all rows before it (expanding window) or the last
``train_bars`` of them (rolling) — and decides on rows ``[test_start, test_end)``. Its frame is
cut one row after that (the close its last position settles at), so no later row can reach it.
The segments' per-bar records are stitched into one out-of-sample record per seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from riskppo.config import Config
from riskppo.evaluation.baselines import STRATEGIES

Window = Literal["expanding", "rolling"]

# Per-bar columns a segment keeps of each strategy's backtest frame, and the strategies (a run
# written before a strategy existed lacks its columns). Columns named "env_…" are the agent env's
# tables (riskppo.evaluation.timing_null), the same for every seed.
RECORD_COLUMNS = ("position", "signal", "log_return", "gross_return", "costs")
RECORD_STRATEGIES = STRATEGIES
ENV_PREFIX = "env_"
MEAN_LABEL = "mean of seeds"  # the label of :func:`mean_record`'s record


@dataclass(frozen=True)
class WalkForwardSettings:
    """How a walk-forward run cuts the data and trains (``riskppo walkforward`` options).

    ``initial``: rows before the first test segment (default 756: three years of daily bars);
    ``step``: rows per test segment and between retrainings (126: half a year);
    ``window``: ``expanding`` (train on every earlier row) or ``rolling`` (the last
    ``train_bars`` rows, default ``initial``); ``seeds``: one independent agent per seed and
    segment; ``warm_start``: each segment after the first starts from the previous segment's
    weights and observation statistics and trains ``warm_steps`` (default a quarter of
    ``total_timesteps``) instead of the full budget; ``workers``: parallel processes (None: all
    cores).
    """

    initial: int = 756
    step: int = 126
    window: Window = "expanding"
    train_bars: int | None = None
    seeds: tuple[int, ...] = (0,)
    warm_start: bool = False
    warm_steps: int | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        for name in ("initial", "step"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.window not in ("expanding", "rolling"):
            raise ValueError(f"--window must be expanding or rolling, got {self.window!r}")
        if self.train_bars is not None and self.train_bars < 2:
            raise ValueError(f"--train-bars must be >= 2, got {self.train_bars}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds must name distinct seeds, got {list(self.seeds)}")
        if self.warm_steps is not None and self.warm_steps < 1:
            raise ValueError(f"--warm-steps must be >= 1, got {self.warm_steps}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``walkforward.json``); what a resumed run must match, less ``workers``."""
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WalkForwardSettings:
        return cls(**{**d, "seeds": tuple(d["seeds"])})

    def steps_for(self, segment: int, total_timesteps: int) -> int:
        """Training steps of ``segment``: the full budget, or ``warm_steps`` when warm-started."""
        if not self.warm_start or segment == 0:
            return total_timesteps
        return self.warm_steps or max(total_timesteps // 4, 1)


@dataclass(frozen=True)
class Segment:
    """One retraining: train on rows ``[train_start, test_start)``, decide on
    ``[test_start, test_end)``; the env's frame ends at ``settle_end`` (one row more where the
    data has it: the close the last decision settles at)."""

    index: int
    train_start: int
    test_start: int
    test_end: int
    settle_end: int

    @property
    def name(self) -> str:
        return f"seg{self.index:02d}"

    def bars(self) -> tuple[int, int, int, int]:
        """``data.bars`` of this segment: train, no validation part, test."""
        return (self.train_start, self.test_start, self.test_start, self.settle_end)


def plan_segments(n_rows: int, settings: WalkForwardSettings) -> list[Segment]:
    """The segments of ``n_rows`` rows: the first test segment starts at row ``initial``, the
    last one ends at the last row (it may be shorter than ``step``; one of fewer than two rows
    is dropped)."""
    s = settings
    if s.initial + 2 > n_rows:
        raise ValueError(
            f"--initial {s.initial} leaves no rows to test on: the data has {n_rows} rows"
        )
    width = s.train_bars or s.initial
    out: list[Segment] = []
    for k, test_start in enumerate(range(s.initial, n_rows - 1, s.step)):
        test_end = min(test_start + s.step, n_rows - 1)
        if test_end - test_start < 2 and out:
            break
        train_start = 0 if s.window == "expanding" else max(test_start - width, 0)
        out.append(Segment(k, train_start, test_start, test_end, min(test_end + 1, n_rows)))
    return out


@dataclass(frozen=True)
class CellJob:
    """What a worker process needs to run one (segment, seed) cell."""

    config: Config
    segment: Segment
    seed: int
    steps: int
    cell_dir: Path
    warm_from: Path | None  # the previous segment's model/ (warm start)
    after: tuple[Path, ...] = ()  # files that must exist before it starts (other cells' cell.json)
    extra: Mapping[str, Any] | None = None  # written into its cell.json beside the summary

    @property
    def name(self) -> str:
        return self.cell_dir.name


def cell_name(segment: Segment, seed: int) -> str:
    return f"{segment.name}-s{seed}"


def cell_config(cfg: Config, segment: Segment, seed: int, steps: int) -> Config:
    """``cfg`` for one cell: its seed, its rows (``data.bars``) and its training budget."""
    data = cfg.data.model_copy(update={"bars": segment.bars()})
    return cfg.model_copy(update={"seed": seed, "data": data, "total_timesteps": steps})


@dataclass
class Record:
    """The stitched out-of-sample record of one seed (or of the seeds' mean): per bar, each
    strategy's :data:`RECORD_COLUMNS` (``agent_log_return``, ...), plus ``segment``."""

    label: str
    frame: pd.DataFrame
    segments: list[int] = field(default_factory=list)

    def returns(self, strategy: str) -> pd.Series:
        return self.frame[f"{strategy}_log_return"]

    def positions(self, strategy: str) -> pd.Series:
        return self.frame[f"{strategy}_position"]

    def signals(self, strategy: str) -> pd.Series:
        return self.frame[f"{strategy}_signal"]

    @property
    def strategies(self) -> tuple[str, ...]:
        """The strategies of :data:`RECORD_STRATEGIES` this record holds (an old run's lacks
        those added since), in table order."""
        return tuple(n for n in RECORD_STRATEGIES if f"{n}_log_return" in self.frame.columns)

    def strategy_frames(self) -> dict[str, pd.DataFrame]:
        """Each strategy's columns as a backtest strategy frame (``position``, ``log_return``,
        ...), the shape :func:`riskppo.evaluation.verdict.statistics_block` reads."""
        return {
            name: pd.DataFrame({c: self.frame[f"{name}_{c}"] for c in RECORD_COLUMNS})
            for name in self.strategies
        }


def segment_frame(
    frames: dict[str, pd.DataFrame],
    segment: int,
    env_columns: Mapping[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """One segment's per-bar record from its backtest's strategy frames (one row per bar), with
    ``env_columns`` (the agent env's tables, each ``[bars]`` and named ``env_…``) beside them."""
    agent = frames["agent"]
    out = pd.DataFrame(index=agent.index)
    out["close"] = agent["close"]
    for name in RECORD_STRATEGIES:
        for col in RECORD_COLUMNS:
            out[f"{name}_{col}"] = frames[name][col].to_numpy()
    for col, values in (env_columns or {}).items():
        if not col.startswith(ENV_PREFIX):
            raise ValueError(f"env column {col!r} must start with {ENV_PREFIX!r}")
        out[col] = values
    out["segment"] = segment
    return out


def stitch(label: str, parts: Sequence[pd.DataFrame]) -> Record:
    """Concatenate segment records (oldest first); raises if they overlap or are out of order."""
    frame = pd.concat(list(parts))
    if not (frame.index.is_monotonic_increasing and frame.index.is_unique):
        raise ValueError(f"{label}: the segments' bars overlap or are out of order")
    return Record(label, frame, sorted({int(s) for s in frame["segment"]}))


def mean_record(records: Sequence[Record]) -> Record:
    """The seeds' average: the record of splitting capital equally over the seeds' agents,
    rebalanced every bar — per bar, the mean of each strategy's simple return (stored as its log,
    ``log_return``), position, signal, gross return and costs. Baselines are deterministic, so
    theirs are unchanged; the env's tables (``env_…`` columns) are the same for every seed and
    kept as they are."""
    first = records[0].frame
    for r in records[1:]:
        if not r.frame.index.equals(first.index):
            raise ValueError(f"{r.label}: its bars differ from {records[0].label}'s")
    shared = ["close", *(c for c in first.columns if c.startswith(ENV_PREFIX))]
    numeric = [c for c in first.columns if c not in (*shared, "segment")]
    logs = [c for c in numeric if c.endswith("_log_return")]
    parts = [r.frame[numeric].assign(**{c: np.expm1(r.frame[c]) for c in logs}) for r in records]
    mean = sum(parts[1:], parts[0]) / len(records)
    mean[logs] = np.log1p(mean[logs])
    frame = first[shared].join(mean)[first.columns.drop("segment")]
    frame["segment"] = first["segment"]
    return Record(MEAN_LABEL, frame, records[0].segments)
