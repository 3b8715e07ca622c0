"""How many bars a year a price file has, read from its timestamps.

Volatility targeting, the per-bar borrow cost and every annualised metric (Sharpe, volatility,
Sortino) scale with ``bars_per_year``. For a user's file it was 252 (daily bars) unless set, so
an hourly crypto file was sized and scored as if each hour were a trading day: a volatility
target about √(8766/252) ≈ 5.9 times too loose and Sharpe ratios about 5.9 times too small.

The estimate counts bars over calendar time, ``(n − 1) / (span in years of 365.25 days)``, which
counts closed sessions correctly where the median spacing would not: hourly US equities
(6.5 bars a session, ≈ 1,640 a year) have a median spacing of one hour, as does 24/7 crypto
(8,766 a year). It reads only the timestamps, which are known before any bar trades, and the
whole file, so every part of a split and every walk-forward segment gets the same value.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pandas as pd

__all__ = ["DAILY_BARS", "bars_per_year_of", "file_bars_per_year"]

DAILY_BARS = 252  # the convention for daily bars of a market that closes on weekends
# A count from 168 to 302 a year is read as daily bars (252 is kept): 1.2 × 252 above, for
# markets that close on fewer holidays; 252 / 1.5 below, for files with a gap of a few months.
# 24/7 markets (365 daily bars a year), weekly (52) and intraday bars (≥ 1,600) fall outside.
_DAILY = (DAILY_BARS / 1.5, DAILY_BARS * 1.2)
_MISMATCH = 1.5  # a set value this far from the file's count is named in a warning
_SECONDS_PER_YEAR = 365.25 * 86400
_warned: set[str] = set()


def bars_per_year_of(index: pd.DatetimeIndex) -> float | None:
    """``(n − 1) / years spanned`` of a sorted DatetimeIndex; None for fewer than 2 bars."""
    if len(index) < 2:
        return None
    seconds = (index[-1] - index[0]).total_seconds()
    return (len(index) - 1) / (seconds / _SECONDS_PER_YEAR)


def file_bars_per_year(index: pd.DatetimeIndex, label: str, configured: Any = None) -> Any:
    """``env.kwargs.bars_per_year`` for a price file with timestamps ``index``.

    Unset (``configured`` None): 252 for daily bars (a count from 168 to 302 a year), else
    the file's count rounded to a whole number (at least 1), with a warning naming it. Set: the
    set value, as given (the env checks it), with a warning where it is a positive number and
    the file's count differs from it by more than a factor 1.5.
    """
    counted = bars_per_year_of(index)
    if configured is not None:
        if counted is not None and _far_apart(counted, configured):
            _warn_once(
                f"env.kwargs.bars_per_year={configured:g}, but {label} has about "
                f"{_about(counted)} bars a year ({_span(index)}): its annualised figures "
                "and volatility target assume the set value"
            )
        return configured
    if counted is None or _DAILY[0] <= counted <= _DAILY[1]:
        return float(DAILY_BARS)
    estimate = float(max(1, round(counted)))
    _warn_once(
        f"{label} has about {_about(counted)} bars a year ({_span(index)}), not daily bars: "
        f"annualising with env.kwargs.bars_per_year={estimate:g} (set it to override)"
    )
    return estimate


def _warn_once(text: str) -> None:
    """One warning per text and process: every env of a run (each part, each of ``n_envs``)
    reads the same file, and a ``catch_warnings`` block elsewhere would let Python's own
    once-per-location filter show it again."""
    if text not in _warned:
        _warned.add(text)
        warnings.warn(text, stacklevel=3)


def _far_apart(counted: float, configured: Any) -> bool:
    """A set value (a positive number: else the env names what is wrong) more than a factor
    1.5 from the file's count."""
    number = isinstance(configured, int | float) and not isinstance(configured, bool)
    if not number or not 0 < configured < math.inf:
        return False
    return max(counted / configured, configured / counted) > _MISMATCH


def _about(counted: float) -> str:
    return f"{max(1, round(counted)):,}"


def _span(index: pd.DatetimeIndex) -> str:
    hours = (index[-1] - index[0]).total_seconds() / 3600
    over = f"{hours / 24:,.0f} days" if hours >= 48 else f"{hours:,.1f} hours"
    return f"{len(index):,} bars over {over}"
