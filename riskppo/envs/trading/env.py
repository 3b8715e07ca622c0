"""Single-asset trading environment (R-TRADE-2)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, SupportsFloat

import numpy as np
import pandas as pd
from gymnasium import spaces

from riskppo.envs.execution.account import AccountSettings, account_step, signal_slope
from riskppo.envs.execution.args import (
    action_positions,
    continuous_signal,
    discrete_signal,
    validate_min_signal,
)
from riskppo.envs.execution.bar_env import FEATURE_BOUND, BarEnv, observation_table
from riskppo.envs.execution.fills import fill_returns, resolve_fill
from riskppo.envs.execution.overlay import RiskOverlay, binding_stats, overlay_table
from riskppo.envs.execution.sizing import vol_target_scale
from riskppo.envs.execution.spec import BarSpec
from riskppo.envs.features import (
    DEFAULT_FEATURES,
    check_signal_bound,
    compute_features,
    left_out_line,
    split_features,
)
from riskppo.envs.market.ohlcv import validate_ohlcv

__all__ = ["TradingEnv"]

_TABLE_MAX_ELEMENTS = 16 * 2**20  # 64 MiB of float32
_noted: set[str] = set()  # the left-out-features lines this process has logged
log = logging.getLogger("riskppo")


class TradingEnv(BarEnv):
    """Trade one asset on OHLCV bars; the agent chooses a target position after each close.

    **Timing.** Let ``o_t``/``c_t`` be the open/close of bar ``t``. The observation at bar ``t``
    uses bars ``<= t`` only (features computed causally once at construction, see
    :mod:`riskppo.envs.features`). The action taken after observing it sets the exposure ``p_t``;
    ``fill`` says when that order is filled (:mod:`riskppo.envs.execution.fills` has the table):

    * ``"next_open"``: at ``o_{t+1}``. Over the step ``t -> t+1`` the exposure held before,
      ``p_{t-1}``, earns the overnight gap ``log(o_{t+1}/c_t)`` and ``p_t`` earns the session
      ``log(c_{t+1}/o_{t+1})``; the fee on ``|p_t - p_{t-1}|`` is paid at the fill.
    * ``"next_close"``: at ``c_{t+1}`` (one bar of delay). Over ``t -> t+1`` the exposure
      ``p_{t-1}`` (decided a step earlier) earns ``log(c_{t+1}/c_t)``; the fee on
      ``|p_t - p_{t-1}|`` is paid at ``c_{t+1}``. An episode's first step earns nothing (flat),
      its last decision is filled and pays its fee at the last close of the range.
    * ``"close"``: at the close ``c_t`` already observed — ``p_t`` earns ``log(c_{t+1}/c_t)``.
      An optimistic fill (no price can move between seeing a close and trading at it), kept for
      comparison with earlier results.
    * ``"auto"`` (default): ``"next_open"`` if the frame has an open on every bar, else
      ``"next_close"``. :attr:`fill` holds the mode in use; ``info["fill"]`` reports it.

    **Sizing.** With ``sizing="none"`` the position is the action's target ``a_t`` itself. With
    ``sizing="vol_target"`` the action is a *signal* and the position (exposure) is ``p_t = a_t ·
    min(vol_target / σ̂_t, max_leverage)``, ``σ̂_t`` the causal EWM volatility of ``vol_span`` bars
    (closes ``<= t``), annualised (:mod:`riskppo.envs.execution.sizing`; Zhang, Zohren & Roberts
    2020), so the agent can stay in the market with less risk. ``overlay`` (a
    :class:`~riskppo.envs.execution.overlay.RiskOverlay` or its settings as a dict) caps the
    exposure at each bar so its *forecast* CVaR stays within a limit
    (:mod:`riskppo.envs.execution.overlay`): ``p_t = clip(a_t · min(vol_target / σ̂_t,
    max_leverage), ±cap_t)``, or with its ``mode="scale"`` ``p_t = a_t · min(vol_target / σ̂_t,
    max_leverage, cap_t)``; :attr:`uncapped_scale` and :attr:`overlay_cap` hold the per-bar tables.
    The step returns the observation of bar ``t+1`` and the reward ``reward_scale * (gross_t - fee_t
    - borrow_t)``: the log growth of an account that holds the exposure as a share of its equity,
    rebalanced to it at each fill, its share drifting with the price between fills; the fee is
    charged on the share traded at the fill, the borrow cost on the short exposure held over bar
    ``t+1``'s session (``p_{t-1}`` with ``next_close``, else ``p_t``). The formulas and the reward's
    exact slopes: :mod:`riskppo.envs.execution.account`. Before the first step the account is flat.

    **Equity.** ``equity`` starts at 1 and is multiplied by ``exp(gross_t - fee_t - borrow_t)``
    each step, so the sum of unscaled rewards is exactly ``log(final equity / initial equity)``,
    the account's net asset value (the fee is a log-equity cost,
    ``exp(-fee |Δ|) ≈ 1 - fee |Δ|``).

    **Actions.** ``Discrete(len(positions))``: action ``i`` targets ``positions[i]`` (default
    ``(-1, 0, 1)``: short, flat, long). ``continuous=True``: ``Box(-1, 1, (1,), float32)``, the
    target exposure; values outside ``[-1, 1]`` are clipped, non-finite values raise. With
    ``long_only=True`` the continuous action ``a`` targets ``m + (1 - m)(a + 1) / 2`` in
    ``[m, 1]``, ``m = min_signal`` (default 0: no shorts; ``m > 0`` keeps a core long position —
    the agent decides between ``m`` and all of the sized exposure, it can neither short nor leave;
    the policy's initial mean is the middle of the range), and discrete positions must be
    ``>= 0``.

    **Data without open/high/low/volume** (a close-only file): the ``features`` that need a
    missing column (``hl_range``, ``volz_k``) are left out, ``F`` counts the others, and one
    warning per process on the ``riskppo`` logger says so, naming ``data_label``::

        close-only data (my.csv): features hl_range left out (need high/low)

    Returns, sizing and every other feature use the close only.

    **Signals**: ``signals`` names columns of ``df`` (a forecast, ...) observed raw after the
    features, each known at its bar's close like the features (:mod:`riskppo.envs.market.signals`).

    **Observation** (float32, ``window * F + 1 (+1)``): the feature rows of bars
    ``t-window+1 .. t`` (oldest first, flattened, clipped to ``±FEATURE_BOUND``), then the
    current position ``p_{t-1}`` (the last one decided; with every fill mode it is filled by the
    time bar ``t`` is observed) and, if ``obs_drawdown``, the current drawdown of equity.
    :attr:`observation_names` labels them. The space's bounds depend only on the configuration.

    **Trading range and episodes.** ``start``/``end`` restrict trading to bars ``[start, end)``
    (ints are positions in ``df``; timestamps or strings select bars with
    ``start <= time < end``); features still use the bars before ``start`` for warm-up (see
    :func:`~riskppo.envs.index_range`). A step at bar ``t`` needs bar ``t+1``, so the last bar of
    the range is only observed: an episode of the whole range has one step per bar after the
    first decision bar, whatever the fill. The first decision bar is
    ``max(start, first_valid_index)``.

    * ``random_start=True``: the start bar is drawn uniformly with ``self.np_random`` (seed it
      with ``reset(seed=...)``) among the bars from which ``episode_length`` steps fit in the
      range; the episode is *truncated* after ``episode_length`` steps (``None``: at the range
      end).
    * ``random_start=False``: evaluation — the episode starts at the first decision bar and runs
      to the end of the range (``episode_length`` is ignored), then it is *truncated*.
    * ``reset(options={"start": bar})`` starts at a given bar (position or timestamp).

    ``terminated`` is only set by ruin: equity ``<= ruin_equity`` (off by default).

    **info** (after ``reset`` and every ``step``): ``equity``, ``log_equity``, ``position`` (the
    exposure ``p_t`` just decided, filled by the end of the step, see **Timing**), ``signal`` (the
    action's target ``a_t`` before sizing), ``turnover`` (cumulative ``|Δp|``), ``drawdown``
    (``1 - equity / peak equity``), ``reward_costs_fraction`` (episode
    ``Σ costs / (Σ |gross| + Σ costs)`` in ``[0, 1]``, 0 when both are 0), ``gross_return``,
    ``costs``, ``fee_cost``, ``borrow_cost`` (this step, unscaled), ``bar`` (position in ``df``
    of the observed bar), ``timestamp`` (its time, int nanoseconds since the epoch),
    ``episode_step``, ``fill`` (the fill mode in use), ``reward_slope`` and ``reward_slope_prev``
    (``∂reward_t/∂a_t``, ``∂reward_t/∂a_{t-1}``: exact, :mod:`riskppo.envs.execution.account`).

    ``step`` uses no pandas; it allocates a fresh observation array per step (safe to store).
    The env never touches global RNGs or warning filters.
    """

    # episode state (see _new_episode_state; the account's in BarEnv)
    _pos: float
    _signal: float
    _dpda: float

    def __init__(
        self,
        df: pd.DataFrame,
        *,
        window: int = 1,
        positions: Sequence[float] | None = None,
        continuous: bool = False,
        fee: float = 0.0005,
        borrow_rate: float = 0.01,
        fill: str = "auto",
        reward_scale: float = 1.0,
        episode_length: int | None = 252,
        random_start: bool = True,
        start: int | str | pd.Timestamp | None = None,
        end: int | str | pd.Timestamp | None = None,
        bars_per_year: float = 252,
        features: Sequence[str] = DEFAULT_FEATURES,
        signals: Sequence[str] = (),
        obs_drawdown: bool = False,
        ruin_equity: float | None = None,
        sizing: str = "none",
        vol_target: float = 0.10,
        vol_span: int = 60,
        max_leverage: float = 1.0,
        long_only: bool = False,
        min_signal: float = 0.0,
        overlay: RiskOverlay | dict[str, Any] | None = None,
        data_label: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        self._init_spec(BarSpec.of("TradingEnv", locals()))
        self._init_position_rules(continuous, positions, min_signal)
        self.data_label = data_label or "<DataFrame>"  # the data's name in messages
        self.df: pd.DataFrame = validate_ohlcv(df, source=self.data_label, signals=self.signals)
        self.fill: str = resolve_fill(fill, _opens(self.df))
        self.obs_drawdown = bool(obs_drawdown)
        self._init_bars(features, start, end)
        self._new_episode_state(self._first_start, self._last_bar)
        self._needs_reset = True

    def _init_position_rules(
        self, continuous: bool, positions: Sequence[float] | None, min_signal: float
    ) -> None:
        """Check and set how an action becomes a position: the action space's positions and
        the core long position (``ValueError`` naming the argument)."""
        self._positions: tuple[float, ...] = action_positions(continuous, positions, self.long_only)
        validate_min_signal(min_signal, continuous, self.long_only)
        self.continuous = bool(continuous)
        self.min_signal = float(min_signal)

    def _init_bars(self, features: Sequence[str], start: Any, end: Any) -> None:
        """Everything derived from the bars of ``self.df``: features, exposure scale, trading
        range ``[start, end)``, the per-bar tables ``step`` indexes, and the spaces."""
        fm = compute_features(self.df, self._usable_features(features), self.signals)
        check_signal_bound(fm, self.signals, FEATURE_BOUND)
        self.feature_matrix, self.feature_names = fm, fm.names  # features, then signals
        self._n_bars = len(fm.values)
        close = self.df["close"].to_numpy(np.float64)
        size_warmup = self._init_sizing(close)
        self._first_valid = max(fm.warmup + self.window - 1, size_warmup)
        self._init_range(
            self.df.index,
            start,
            end,
            f"features need {fm.warmup} bars of history, "
            f"window={self.window}, sizing needs {size_warmup}",
        )
        self._init_tables(fm.values, close)
        self._init_spaces()

    def _usable_features(self, features: Sequence[str]) -> tuple[str, ...]:
        """``features`` without those that need columns ``df`` lacks (logged once per process)."""
        kept, left_out = split_features(features, self.df.columns)
        if not left_out:
            return kept
        line = left_out_line(self.data_label, self.df.columns, left_out)
        if not kept:
            raise ValueError(f"{line}, and no feature is left: add close-only ones, e.g. ret_1")
        if line not in _noted:
            _noted.add(line)
            log.warning(line)
        return kept

    def _init_sizing(self, close: np.ndarray) -> int:
        """Set the per-bar exposure scale (``_scale``, and ``uncapped_scale`` before the
        overlay); return the first sized bar."""
        warmup = 0
        scale = np.ones(len(close))
        if self.sizing == "vol_target":
            scale = vol_target_scale(
                close,
                target=self.vol_target,
                span=self.vol_span,
                max_leverage=self.max_leverage,
                bars_per_year=self.bars_per_year,
            )
            warmup = self.vol_span
        self.uncapped_scale: np.ndarray = scale
        self.overlay_cap: np.ndarray | None = None
        clip = np.full(len(close), math.inf)  # the step's cap on |exposure| (inf: none)
        if self.overlay is not None:
            table = overlay_table(close, self.overlay, delay=int(self.fill == "next_close"))
            self.overlay_cap = table.cap
            scale = np.where(np.isnan(table.cap), np.nan, scale)  # not sized before the overlay
            if self.overlay.mode == "scale":
                scale = np.fmin(scale, table.cap)
            else:
                clip = table.cap
            warmup = max(warmup, self.overlay.slow_span, self.overlay.fast_span)
        # per bar: exposure per unit of signal and the cap the step clips at; NaN before
        # `warmup` (never stepped there)
        self._scale: list[float] = scale.tolist()
        self._cap: list[float] = clip.tolist()
        return warmup

    def _init_tables(self, values: np.ndarray, close: np.ndarray) -> None:
        """Precomputed per-bar arrays that ``step`` indexes.

        Python lists: indexing them yields Python floats/ints, which keeps the per-step scalar
        arithmetic fast.
        """
        ret = fill_returns(self.fill, _opens(self.df), close)
        # log return of step t -> t+1 earned by the exposure held before / decided at bar t
        self._ret_old: list[float] = ret.old.tolist()
        self._ret_new: list[float] = ret.new.tolist()
        # the same as simple returns, and the previous step's second leg (account.py)
        self._e_old: list[float] = np.expm1(ret.old).tolist()
        self._e_new: list[float] = np.expm1(ret.new).tolist()
        self._e_prev: list[float] = [0.0, *self._e_new[:-1]]
        self._delayed = ret.delayed  # the old exposure holds the bar (borrow cost on it)
        self._ts_ns: list[int] = self.df.index.as_unit("ns").asi8.tolist()
        self._features = np.clip(values, -FEATURE_BOUND, FEATURE_BOUND)  # [T, F] float32
        n_extra = 1 + int(self.obs_drawdown)
        self._n_win = self.window * self._features.shape[1]
        self._obs_dim = self._n_win + n_extra
        # Observation table: row t holds the flattened feature window ending at bar t, plus empty
        # slots for position/drawdown; a step copies one row (fast). For very long frames with a
        # large window the table would be big, so the window is then gathered per step from a
        # zero-copy sliding view instead (row t - window + 1 = bars t-window+1..t).
        table, self._windows = observation_table(
            self._features, self.window, n_extra, _TABLE_MAX_ELEMENTS
        )
        self._table: np.ndarray | None = table
        self._borrow_per_bar = self.borrow_rate / self.bars_per_year
        self._slope_factor = signal_slope(self.long_only, self.min_signal)
        self.account_settings = AccountSettings(
            self.fee, self._borrow_per_bar, self._delayed, self.reward_scale
        )

    def _init_spaces(self) -> None:
        """Observation and action spaces; they depend on the configuration only."""
        n_win = self._n_win
        low = np.full(self._obs_dim, -FEATURE_BOUND, dtype=np.float32)
        high = np.full(self._obs_dim, FEATURE_BOUND, dtype=np.float32)
        # the held exposure is signal * scale with 0 < scale <= max_leverage (1 without sizing)
        lev = self.max_leverage if self.sizing == "vol_target" else 1.0
        pos_range = [lev * p for p in (self._positions or self.signal_range)]
        low[n_win], high[n_win] = min(0.0, *pos_range), max(0.0, *pos_range)  # flat at reset
        if self.obs_drawdown:
            low[n_win + 1], high[n_win + 1] = 0.0, 1.0
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self.action_space: spaces.Space[Any]
        if self.continuous:
            self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        else:
            self.action_space = spaces.Discrete(len(self._positions))

    # ------------------------------------------------------------------ public properties

    @property
    def signal_range(self) -> tuple[float, float]:
        """The signals (target positions before sizing) the actions reach: ``(min_signal, 1)``
        with ``long_only``, else ``(-1, 1)`` (discrete actions: within it)."""
        return (self.min_signal, 1.0) if self.long_only else (-1.0, 1.0)

    def action_for_signal(self, signals: np.ndarray) -> np.ndarray:
        """Continuous env actions ``[B, 1]`` float32 that target ``signals`` ``[B]`` (clipped to
        :attr:`signal_range`; the inverse of the action → signal map of :meth:`step`)."""
        lo, hi = self.signal_range
        x = np.clip(np.asarray(signals, dtype=np.float64), lo, hi)
        a = 2.0 * (x - lo) / (hi - lo) - 1.0 if self.long_only else x
        return np.asarray(a, dtype=np.float32)[:, None]

    def overlay_binding(
        self, lo: int | None = None, hi: int | None = None, signals: np.ndarray | None = None
    ) -> dict[str, Any]:
        """The overlay's settings and how it bound on the decision bars ``[lo, hi)`` (default:
        the trading range; :func:`~riskppo.envs.execution.overlay.binding_stats`); ``{}``
        without one.

        ``signals`` (``[hi - lo]``, the signals decided on those bars) judge the positions held;
        without them, or with ``mode="scale"`` (where the cap does not depend on the signal), a
        full signal's."""
        if self.overlay is None or self.overlay_cap is None:
            return {}
        a = self._first_start if lo is None else lo
        b = self._last_bar if hi is None else hi
        uncapped = self.uncapped_scale[a:b]
        if signals is not None and self.overlay.mode == "clip":
            uncapped = uncapped * np.abs(np.asarray(signals, dtype=np.float64))
        stats = binding_stats(uncapped, self.overlay_cap[a:b])
        return {**self.overlay.to_dict(), **stats}

    @property
    def positions(self) -> tuple[float, ...]:
        """Target position of each discrete action (empty for continuous actions)."""
        return self._positions

    @property
    def observation_names(self) -> list[str]:
        """Label of each observation entry."""
        names = [
            f"{f}[t-{lag}]" if lag else f"{f}[t]"
            for lag in range(self.window - 1, -1, -1)
            for f in self.feature_names
        ]
        names.append("position")
        if self.obs_drawdown:
            names.append("drawdown")
        return names

    # ------------------------------------------------------------------ gymnasium API

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("call reset() before step() (and after an episode ends)")
        if self.continuous:
            signal, inside = continuous_signal(action, self.long_only, self.min_signal)
        else:
            signal, inside = discrete_signal(action, self._positions), False
        t = self._t
        old = self._pos
        target = signal * self._scale[t]  # exposure decided at t (sizing; 1.0 without)
        cap = self._cap[t]
        if target > cap or target < -cap:  # the overlay clips the position held
            target = math.copysign(cap, target)
        self._signal = signal
        dpda = self._slope_factor * self._scale[t] if inside and abs(target) < cap else 0.0
        acc = account_step(old, target, self._e_prev[t], self._e_old[t], self._e_new[t], dpda,
                           self._dpda, self.account_settings)  # fmt: skip
        gross, fee_cost, borrow_cost, dpos = acc.gross, acc.fee_cost, acc.borrow_cost, acc.traded
        costs = fee_cost + borrow_cost
        slopes = (acc.slope_new, acc.slope_old)
        self._pos = target
        self._dpda = dpda
        net, terminated, truncated = self._book(gross, costs, dpos)
        return (
            self._observe(self._t),
            net * self.reward_scale,
            terminated,
            truncated,
            self._info(gross, costs, fee_cost, borrow_cost, slopes),
        )

    # ------------------------------------------------------------------ internals

    def _new_episode_state(self, t0: int, end_bar: int) -> None:
        super()._new_episode_state(t0, end_bar)
        self._pos = 0.0
        self._signal = 0.0
        self._dpda = 0.0  # ∂p/∂a of the last decision (0: flat, no decision yet)

    def _observe(self, t: int) -> np.ndarray:
        n = self._n_win
        obs: np.ndarray
        if self._table is not None:
            obs = self._table[t].copy()
        else:
            obs = np.empty(self._obs_dim, dtype=np.float32)
            obs[:n] = self._windows[t - self.window + 1]
        obs[n] = self._pos
        if self.obs_drawdown:
            obs[n + 1] = 1.0 - math.exp(self._log_equity - self._log_peak)
        return obs

    def _info(
        self, gross: float, costs: float, fee: float, borrow: float, slopes: Any = (0.0, 0.0)
    ) -> dict[str, Any]:
        total = self._sum_abs_gross + self._sum_costs
        t = self._t
        log_eq = self._log_equity
        return {
            "equity": math.exp(log_eq),
            "log_equity": log_eq,
            "position": self._pos,
            "signal": self._signal,
            "turnover": self._turnover,
            "drawdown": 1.0 - math.exp(log_eq - self._log_peak),
            "reward_costs_fraction": self._sum_costs / total if total > 0.0 else 0.0,
            "gross_return": gross,
            "costs": costs,
            "fee_cost": fee,
            "borrow_cost": borrow,
            "bar": t,
            "timestamp": self._ts_ns[t],
            "episode_step": self._steps,
            "fill": self.fill,
            "reward_slope": slopes[0],
            "reward_slope_prev": slopes[1],
        }


def _opens(df: pd.DataFrame) -> np.ndarray | None:
    """``[T]`` float64 opens of ``df``, or ``None`` if it has no open column."""
    return df["open"].to_numpy(np.float64) if "open" in df.columns else None
