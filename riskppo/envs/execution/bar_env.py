"""The base of the envs that trade on a table of bars (:class:`~riskppo.envs.TradingEnv`,
:class:`~riskppo.envs.portfolio.env.PortfolioEnv`): the shared keywords
(:class:`~riskppo.envs.execution.spec.BarSpec`), the trading range and episode starts
(:mod:`riskppo.envs.execution.episode_range`), the account's log equity, peak, turnover and cost
tallies, ``reset`` and the end of a step, and the observation table of feature windows.

A subclass builds its bars, sets ``_first_valid`` and calls :meth:`BarEnv._init_range`, and
implements ``step``, ``_observe(t)`` and ``_info(gross, costs, fee, borrow)``; it may extend
``_new_episode_state`` with its own state.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from riskppo.envs.execution.episode_range import episode_range, resolve_bar
from riskppo.envs.execution.spec import BarSpec

__all__ = ["FEATURE_BOUND", "BarEnv", "observation_table"]

# Features are clipped to +-FEATURE_BOUND (never active on real data: a log return of 1e6) so the
# observation space is finite and depends only on the configuration, not on the data — train and
# test envs of one configuration have equal spaces.
FEATURE_BOUND = 1e6


class BarEnv(gym.Env[np.ndarray, Any]):
    """What a bar env shares (module docstring); not an env by itself."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium convention)

    # episode state (see _new_episode_state)
    _t: int
    _end_bar: int
    _log_equity: float
    _log_peak: float
    _turnover: float
    _sum_abs_gross: float
    _sum_costs: float
    _steps: int
    # set by the subclass before _init_range
    _n_bars: int
    _first_valid: int

    def _init_spec(self, spec: BarSpec) -> None:
        """Keep the shared keywords of ``spec`` as attributes (numbers as Python scalars)."""
        self.render_mode = None
        self.signals = spec.signals
        self.window, self.fee, self.borrow_rate = spec.window, spec.fee, spec.borrow_rate
        self.bars_per_year, self.reward_scale = spec.bars_per_year, spec.reward_scale
        self.episode_length, self.random_start = spec.episode_length, spec.random_start
        self.ruin_equity = spec.ruin_equity
        self.sizing, self.vol_target, self.vol_span = spec.sizing, spec.vol_target, spec.vol_span
        self.max_leverage, self.long_only = spec.max_leverage, spec.long_only
        self.overlay = spec.overlay

    def _init_range(self, index: pd.DatetimeIndex, start: Any, end: Any, warmup: str) -> None:
        """Trading range ``[start, end)`` of the bars of ``index`` and the bars an episode may
        start from; ``warmup`` says in messages why the first bars are not traded."""
        self._index = index
        self._range = episode_range(
            resolve_bar(index, start, 0, "start"),
            resolve_bar(index, end, self._n_bars, "end"),
            first_valid=self._first_valid,
            episode_length=self.episode_length,
            random_start=self.random_start,
            warmup_reason=warmup,
            start=start,
            end=end,
        )
        self._first_start, self._last_bar = self._range.first_start, self._range.last_bar

    # ------------------------------------------------------------------ public properties

    @property
    def first_valid_index(self) -> int:
        """First bar (position in the data) whose observation is complete and, with sizing,
        whose volatility (or covariance) estimate is defined."""
        return self._first_valid

    @property
    def trading_range(self) -> tuple[int, int]:
        """``(first decision bar, last bar)`` of the range, as positions in the data
        (inclusive)."""
        return self._range.bounds

    @property
    def max_episode_steps(self) -> int:
        """Steps of a ``random_start=False`` episode (first decision bar to the range end)."""
        return self._range.steps

    # ------------------------------------------------------------------ gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        t0, end_bar = self.episode_bounds(self.np_random, options)
        self._new_episode_state(t0, end_bar)
        self._needs_reset = False
        return self._observe(t0), self._info(0.0, 0.0, 0.0, 0.0)

    def episode_bounds(
        self, rng: np.random.Generator, options: dict[str, Any] | None = None
    ) -> tuple[int, int]:
        """``(start bar, end bar)`` of a new episode: ``options["start"]``, else a start drawn
        with ``rng`` (``random_start``), else the first decision bar."""
        start = None
        if options and options.get("start") is not None:
            start = resolve_bar(self._index, options["start"], 0, "options['start']")
        return self._range.episode(rng, start)

    def render(self) -> None:
        return None

    # ------------------------------------------------------------------ internals

    def _new_episode_state(self, t0: int, end_bar: int) -> None:
        """A flat account at bar ``t0`` of an episode that ends at ``end_bar``."""
        self._t, self._end_bar = t0, end_bar
        self._log_equity = self._log_peak = 0.0
        self._turnover = self._sum_abs_gross = self._sum_costs = 0.0
        self._steps = 0

    def _book(self, gross: float, costs: float, traded: float) -> tuple[float, bool, bool]:
        """Book one step's ``gross`` log return, ``costs`` (log-equity) and ``traded`` exposure,
        and move to the next bar: ``(net, terminated, truncated)``, ``net = gross - costs``
        (terminated by ruin, truncated at the episode's end bar)."""
        net = gross - costs
        log_eq = self._log_equity + net
        self._log_equity = log_eq
        if log_eq > self._log_peak:
            self._log_peak = log_eq
        self._turnover += traded
        self._sum_abs_gross += abs(gross)
        self._sum_costs += costs
        t = self._t + 1
        self._t = t
        self._steps += 1
        terminated = self.ruin_equity is not None and math.exp(log_eq) <= self.ruin_equity
        truncated = t >= self._end_bar
        if terminated or truncated:
            self._needs_reset = True
        return net, terminated, truncated

    def _observe(self, t: int) -> np.ndarray:
        raise NotImplementedError

    def _info(self, gross: float, costs: float, fee: float, borrow: float) -> dict[str, Any]:
        raise NotImplementedError


def observation_table(
    values: np.ndarray, window: int, n_extra: int, max_elements: float = math.inf
) -> tuple[np.ndarray | None, np.ndarray]:
    """The feature windows of ``values`` (``[T, F]`` float32, clipped) as observation rows.

    Returns ``(table, windows)``: ``table`` ``[T, window·F + n_extra]`` float32, row ``t`` the
    flattened rows ``t-window+1 .. t`` (oldest first; NaN before a window is complete, never
    observed) then ``n_extra`` zero slots the env fills per step — ``None`` when it would have
    more than ``max_elements`` entries; ``windows`` ``[T-window+1, window·F]``, a zero-copy view
    (row ``t - window + 1`` is bar ``t``'s window) to gather from without a table."""
    row = values.shape[1]
    n_win = window * row
    windows = sliding_window_view(values.reshape(-1), n_win)[::row]
    if len(values) * (n_win + n_extra) > max_elements:
        return None, windows
    table = np.zeros((len(values), n_win + n_extra), dtype=np.float32)
    table[: window - 1, :n_win] = np.nan  # incomplete windows, never observed
    table[window - 1 :, :n_win] = windows
    return table, windows
