"""The references held in the agent's own env, and which benchmark a verdict is read against.

A risk overlay (:mod:`riskppo.envs.execution.overlay`) caps the agent's position before every
fill. A reference without it is not the same bet: the overlay alone moves a full vol-targeted
position by several tenths of a Sharpe ratio either way, which an agent trading under it would
be credited with (or charged for). So every trading backtest and walk-forward also holds two
references in the agent's own env — its sizing, overlay, fill and fees:

* ``vt_bh_overlay``: the full signal (1.0) at every bar, i.e. vol-targeted buy-and-hold under the
  same overlay;
* ``floor_overlay``: the least signal the agent may hold (its ``min_signal`` core position, or 0:
  then it is the "do nothing" reference, flat by construction).

:func:`choose_benchmark` picks the verdict's benchmark: the one with the same risk machinery as
the agent — ``vt_bh_overlay`` when the agent's env has an overlay, else
``vol_target_buy_and_hold`` (which is then the same position). A record written before the
overlaid reference existed falls back to ``vol_target_buy_and_hold`` and says so.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

__all__ = [
    "FLAT_BY_DESIGN",
    "FLOOR_OVERLAY",
    "REFERENCE_LABELS",
    "VT_BH",
    "VT_BH_OVERLAY",
    "Benchmark",
    "choose_benchmark",
]

VT_BH = "vol_target_buy_and_hold"
VT_BH_OVERLAY = "vt_bh_overlay"
FLOOR_OVERLAY = "floor_overlay"

FLAT_BY_DESIGN = frozenset({FLOOR_OVERLAY})
"""References that may hold nothing by construction (a floor of 0): marked ``flat`` in their
metrics, never best, but not warned about as a strategy that failed to trade."""

REFERENCE_LABELS: dict[str, str] = {
    VT_BH_OVERLAY: "Vol-targeted B&H + overlay",
    FLOOR_OVERLAY: "Floor + overlay",
}
"""The two references' names in reports (their keys are the names in ``metrics.json``)."""


class Benchmark(NamedTuple):
    """The verdict's benchmark.

    ``key``: its strategy name (``metrics.json``, records); ``name``: in words, as the verdict
    line says it; ``label``: short, for table headers and the console; ``note``: why it is not
    the one with the agent's risk machinery (``None`` when it is)."""

    key: str
    name: str
    label: str
    note: str | None = None


_PLAIN = Benchmark(VT_BH, "vol-targeted buy-and-hold", "VT B&H")
_OVERLAID = Benchmark(
    VT_BH_OVERLAY, "vol-targeted buy-and-hold under the same risk overlay", "VT B&H+overlay"
)
_FALLBACK_NOTE = (
    "this record has no vol-targeted buy-and-hold under the agent's risk overlay (written "
    "before that reference existed): the verdict compares with vol-targeted buy-and-hold "
    "without the overlay"
)


def choose_benchmark(available: Collection[str], overlay: bool) -> Benchmark:
    """The benchmark of an agent whose env has a risk ``overlay`` (or not), among the strategies
    ``available`` in its record: ``vt_bh_overlay`` with an overlay, ``vol_target_buy_and_hold``
    without one — or with one, where the record lacks ``vt_bh_overlay`` (an old run; ``note``
    says so)."""
    if not overlay:
        return _PLAIN
    if VT_BH_OVERLAY in available:
        return _OVERLAID
    return _PLAIN._replace(note=_FALLBACK_NOTE)
