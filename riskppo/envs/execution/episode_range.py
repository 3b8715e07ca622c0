"""The trading range and episode starts of a bar-stepping env (:class:`~riskppo.envs.TradingEnv`,
:class:`~riskppo.envs.portfolio.env.PortfolioEnv`).

A range ``[lo, hi)`` of bars is traded from its first decision bar ``max(lo, first_valid)``; a
step at bar ``t`` needs bar ``t+1``, so the last bar ``hi - 1`` is only observed. With
``random_start`` an episode starts at a bar drawn uniformly among those from which
``episode_length`` steps fit; otherwise at the first decision bar, running to the range end.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

__all__ = ["EpisodeRange", "episode_range", "resolve_bar"]


class EpisodeRange(NamedTuple):
    """Bars (positions in the data) of a trading range."""

    first_start: int  # the first decision bar
    last_bar: int  # the range's last bar (observed, never stepped from)
    max_start: int  # the last bar a random-start episode of ``episode_length`` steps may start at
    episode_length: int | None
    random_start: bool

    @property
    def bounds(self) -> tuple[int, int]:
        """``(first decision bar, last bar)`` of the range (inclusive)."""
        return self.first_start, self.last_bar

    @property
    def steps(self) -> int:
        """Steps of a ``random_start=False`` episode (first decision bar to the range end)."""
        return self.last_bar - self.first_start

    def episode(
        self, rng: np.random.Generator, start: int | None, name: str = "options['start']"
    ) -> tuple[int, int]:
        """``(start bar, end bar)`` of a new episode: ``start`` when given (checked), else drawn
        with ``rng`` (``random_start``) or the first decision bar."""
        if start is not None:
            if not self.first_start <= start <= self.last_bar - 1:
                raise ValueError(
                    f"{name} -> bar {start} is outside the valid start bars "
                    f"{self.first_start}..{self.last_bar - 1}"
                )
            t0 = start
        elif self.random_start:
            t0 = int(rng.integers(self.first_start, self.max_start + 1))
        else:
            t0 = self.first_start
        end = self.last_bar
        if self.random_start and self.episode_length is not None:
            end = min(t0 + self.episode_length, self.last_bar)
        return t0, end


def episode_range(
    lo: int,
    hi: int,
    *,
    first_valid: int,
    episode_length: int | None,
    random_start: bool,
    warmup_reason: str,
    start: Any = None,
    end: Any = None,
) -> EpisodeRange:
    """The :class:`EpisodeRange` of bars ``[lo, hi)`` (``start`` / ``end``: what the user gave,
    for messages; ``warmup_reason`` says why ``first_valid`` is where it is).

    Raises:
        ValueError: an empty range, a range without a step, or an ``episode_length`` that does
            not fit it.
    """
    if not lo < hi:
        raise ValueError(f"empty trading range: start={start!r} -> bar {lo}, end={end!r} -> {hi}")
    first_start, last_bar = max(lo, first_valid), hi - 1
    if first_start > last_bar - 1:
        raise ValueError(
            f"the trading range (bars {lo}..{hi - 1}) has no step: the first bar with a "
            f"complete observation is {first_valid} ({warmup_reason}) and a step needs the "
            "next bar"
        )
    max_start = last_bar - (episode_length if episode_length is not None else 1)
    if random_start and max_start < first_start:
        raise ValueError(
            f"episode_length={episode_length} does not fit the trading range: "
            f"{last_bar - first_start} steps available from bar {first_start}; use a shorter "
            "episode_length or None"
        )
    return EpisodeRange(first_start, last_bar, max_start, episode_length, random_start)


def resolve_bar(index: pd.DatetimeIndex, value: Any, default: int, name: str) -> int:
    """A bar position: ``value`` itself (an int in ``0..len(index)``), or for a time (timestamp
    or string) the first bar at or after it; ``default`` for ``None``."""
    if value is None:
        return default
    n = len(index)
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        i = int(value)
        if not 0 <= i <= n:
            raise ValueError(f"{name}={i} is outside the frame's bars 0..{n}")
        return i
    try:
        ts = pd.Timestamp(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is neither a bar position nor a time") from None
    if ts.tz is not None:  # the frame's index is tz-naive UTC (see load_ohlcv)
        ts = ts.tz_convert("UTC").tz_localize(None)
    return int(index.searchsorted(ts, "left"))
