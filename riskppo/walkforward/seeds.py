"""How far apart a walk-forward's seeds landed: each seed's agent Sharpe ratio beside the seeds'
mean record (the one the verdict is read on) and the benchmark's.

One seed's record can beat the benchmark while another's does not; the verdict tests the mean
record (capital split equally over the seeds' agents), whose Sharpe ratio is usually above the
seeds' average (their returns are not perfectly correlated). The spread says how much the
result depends on the seed that happened to be drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["MAX_LISTED", "SeedSpread", "seed_line", "seed_spread", "seeds_entry"]

MAX_LISTED = 8  # seeds whose Sharpe ratios are listed one by one; more: min to max


@dataclass(frozen=True)
class SeedSpread:
    """Annual Sharpe ratios (log returns, the verdict's): ``agent`` ``[S]`` one per seed (None
    where undefined) under ``labels``; ``sd`` their standard deviation (ddof = 1; None with
    fewer than two defined); ``mean_record`` the seeds' mean record's; ``benchmark`` the
    benchmark's (``benchmark_name``), the same bars for every seed; ``above``: seeds whose
    Sharpe ratio is above the benchmark's."""

    labels: list[str]
    agent: list[float | None]
    sd: float | None
    mean_record: float | None
    benchmark: float | None
    benchmark_name: str
    above: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sharpe(block: Mapping[str, Any], series: str) -> float | None:
    value = block["stats"][series]["sharpe"]["estimate"]
    return float(value) if value is not None and math.isfinite(value) else None


def seed_spread(records: Mapping[str, Mapping[str, Any]], mean_label: str) -> SeedSpread | None:
    """The spread of the seeds' statistics blocks in ``records`` (label → block, as in a
    walk-forward's ``metrics.json``; ``mean_label``'s block is the mean record's); None with a
    single seed (no mean record)."""
    if mean_label not in records:
        return None
    seeds = {label: block for label, block in records.items() if label != mean_label}
    agent = [_sharpe(b, "agent") for b in seeds.values()]
    mean = records[mean_label]
    bench = _sharpe(mean, "benchmark")
    defined = [v for v in agent if v is not None]
    sd = float(np.std(defined, ddof=1)) if len(defined) >= 2 else None
    above = sum(v > bench for v in defined) if bench is not None else 0
    name = str(mean["stats"].get("benchmark_name") or "the benchmark")
    return SeedSpread(list(seeds), agent, sd, _sharpe(mean, "agent"), bench, name, above)


def seeds_entry(records: Mapping[str, Mapping[str, Any]], mean_label: str) -> dict[str, Any] | None:
    """The ``seeds`` entry of a walk-forward's ``metrics.json``: :func:`seed_spread` as a dict
    (None with a single seed)."""
    spread = seed_spread(records, mean_label)
    return spread.to_dict() if spread is not None else None


def _f(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def seed_line(spread: Mapping[str, Any] | None) -> list[str]:
    """The verdict's line on the seeds (a :meth:`SeedSpread.to_dict`; none without one): each
    seed's agent Sharpe ratio (min to max beyond :data:`MAX_LISTED` seeds), their sd, the mean
    record's and the benchmark's."""
    if not spread:
        return []
    agent = spread["agent"]
    defined = [v for v in agent if v is not None]
    if len(agent) <= MAX_LISTED or not defined:
        values = ", ".join(_f(v) for v in agent)
    else:
        values = f"{min(defined):.2f} to {max(defined):.2f} over {len(agent)} seeds"
    sd = f"sd {_f(spread['sd'])}; " if spread["sd"] is not None else ""
    bench = (
        f"{spread['benchmark_name']} {_f(spread['benchmark'])}, above it: "
        f"{spread['above']} of {len(agent)} seeds"
    )
    return [
        f"  seeds: agent Sharpe {values} ({sd}mean record {_f(spread['mean_record'])}; {bench})"
    ]
