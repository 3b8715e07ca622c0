"""A many-asset portfolio environment: the agent chooses target weights after each close."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, SupportsFloat

import numpy as np
import pandas as pd
from gymnasium import spaces

from riskppo.envs.execution.args import validate_min_signal
from riskppo.envs.execution.bar_env import FEATURE_BOUND, BarEnv, observation_table
from riskppo.envs.execution.fills import fill_returns, resolve_fill
from riskppo.envs.execution.overlay import RiskOverlay, binding_stats
from riskppo.envs.execution.spec import BarSpec
from riskppo.envs.features import check_signal_bound, compute_features, split_features
from riskppo.envs.market.estimators import COVARIANCES, causal_covariance
from riskppo.envs.portfolio.data import PortfolioData
from riskppo.envs.portfolio.math import (
    MAX_LOGIT_SCALE,
    long_only_weights,
    long_short_weights,
    rebalance_step,
    vol_scale,
)
from riskppo.envs.portfolio.overlay import portfolio_cap, portfolio_overlay_tables
from riskppo.envs.portfolio.slopes import (
    InverseVol,
    drift_product,
    position_jacobian,
    reward_gradients,
    weights_jacobian,
)

__all__ = ["PORTFOLIO_FEATURES", "PortfolioEnv"]
_sum = np.add.reduce

# Close-only features (the bundled sp500 closes have no open/high/low/volume): vol-scaled returns
# over four horizons, two trend signals and two volatility levels (riskppo.envs.features).
PORTFOLIO_FEATURES: tuple[str, ...] = (
    "vret_1",
    "vret_5",
    "vret_20",
    "vret_60",
    "macd_8_24",
    "macd_32_96",
    "ewmvol_20",
    "ewmvol_60",
)


class PortfolioEnv(BarEnv):
    """Allocate across ``N`` aligned assets (:class:`~riskppo.envs.portfolio.data.PortfolioData`).

    **Actions.** ``Box(-1, 1, (N,), float32)``, mapped to *signal weights* ``w_t``
    (:mod:`riskppo.envs.portfolio.math`):

    * ``long_only=True`` (default): ``w = softmax(logit_scale · a)``, on the simplex (each
      weight > 0, sum 1). The zero action (the policy's initial mean) is equal weight; with
      ``logit_scale = 3`` the largest weight ratio the box reaches is ``e^6 ≈ 400``.
    * ``long_only=False``: ``w = a · min(1, max_gross / Σ|a|)``, long and short, gross ``<=
      max_gross``.

    With ``exposure_signal=True`` the action has one more component ``x``, the *exposure
    signal* ``s = min_signal + (1 - min_signal)(x + 1)/2`` in ``[min_signal, 1]``: the share of
    the sized portfolio held (the rest in cash), as the trading env's signal is of its sized
    position. Without it the weights always hold the whole sized portfolio, so volatility
    targeting fixes the portfolio's risk and the CVaR constraint has nothing to act on.

    **Sizing.** ``sizing="vol_target"`` scales the whole portfolio to ``vol_target`` (annual):
    held weights ``h_t = s_t · w_t · min(vol_target / sqrt(w_tᵀ Σ̂_t w_t · bars_per_year),
    max_leverage)`` (``s_t = 1`` without the exposure signal), ``Σ̂_t`` the causal covariance
    of one-bar log returns up to bar ``t``
    (``covariance="ewm"`` with span ``vol_span``, or ``"ledoit_wolf"`` over the last
    ``vol_span`` returns); the rest is cash. ``sizing="none"``: ``h_t = w_t``.

    **Risk overlay.** ``overlay`` (a :class:`~riskppo.envs.execution.overlay.RiskOverlay` or its
    settings as a dict) caps the position at each bar so the held weights' *forecast* CVaR of the
    next ``overlay.horizon`` bars stays within ``overlay.limit``
    (:mod:`riskppo.envs.portfolio.overlay`): ``h_t = w_t · min(s_t · scale_t, cap_t)``, or with
    its ``mode="scale"`` (the cap on the full signal) ``h_t = s_t · w_t · min(scale_t, cap_t)``;
    either way the gross exposure is at most ``cap_t · Σ|w_t|`` (``cap_t`` for long-only
    weights). The cap depends on the weights, so :attr:`uncapped_scale` (what the cap is
    compared with: ``scale_t``, or ``s_t · scale_t`` with ``clip``) and :attr:`overlay_cap`
    (``[T]``, NaN on bars not stepped) record the bars the env has decided on;
    :meth:`overlay_binding` summarises them.

    **Fills, costs, reward.** As :class:`~riskppo.envs.TradingEnv`, per asset: ``fill`` (``auto``:
    ``next_open`` when every asset has opens, else ``next_close``) sets which log returns the held
    and the new weights earn over the step (:mod:`riskppo.envs.execution.fills`); the fee is ``fee``
    per unit of each asset's ``|Δweight|`` (drift since the last fill included), the borrow cost
    ``borrow_rate / bars_per_year`` per unit of short weight. The reward is ``reward_scale · (gross
    − fee − borrow)``, ``gross`` the portfolio's log return, so rewards sum to the log of the final
    equity and a CVaR constraint on ``cvar_horizon``-step sums of rewards is a constraint on the
    portfolio's log return (:mod:`riskppo.algo.constraints.cvar`).

    **Observation** (float32, ``window · N · F + N``): for bars ``t-window+1 .. t`` (oldest
    first) each asset's ``F`` causal ``features`` (:mod:`riskppo.envs.features`, asset by asset
    in ``symbols`` order, clipped to ``±FEATURE_BOUND``; then its ``signals`` columns, raw, each
    known at its bar's close), then the weights held now (after the last step's price moves).
    :attr:`observation_names` labels them.

    **Range, episodes, info.** ``start`` / ``end``, ``episode_length``, ``random_start``,
    ``reset(options={"start": bar})`` and ``ruin_equity`` work as in
    :class:`~riskppo.envs.TradingEnv`. ``info`` has the trading env's keys (``position`` is the
    net exposure ``Σ h``) plus ``weights`` (``[N]``, the weights filled this step),
    ``contributions`` (``[N]``, each asset's part of the step's simple return,
    :mod:`riskppo.envs.portfolio.math`),
    ``gross_exposure`` (``Σ|h|``) and ``scale`` (the exposure scale applied: with ``clip``, the
    share of the signal weights held, signal included); with an overlay also ``uncapped_scale``
    (the sizing's scale before the cap, times the signal with ``clip``) and ``overlay_cap``.
    With ``reward_slopes=True`` also ``reward_slope`` and ``reward_slope_prev`` (``[A]``): the
    reward's exact derivatives in this step's action and in the last one
    (:mod:`riskppo.envs.portfolio.slopes`), what the trainer's pathwise term follows
    (``ppo.pathwise_coef``); off by default, as they cost a few ``N × N`` products per step.
    """

    # episode state (see _new_episode_state; the account's in BarEnv)
    _held: np.ndarray
    _filled: np.ndarray
    _contrib: np.ndarray
    _scale_now: float
    _signal_now: float
    _uncapped_now: float
    _cap_now: float
    _held_jacobian: np.ndarray  # [N, A] ∂(weights held now)/∂(last action), for reward_slopes

    def __init__(
        self,
        data: PortfolioData,
        *,
        window: int = 1,
        features: Sequence[str] = PORTFOLIO_FEATURES,
        signals: Sequence[str] = (),
        long_only: bool = True,
        logit_scale: float = 3.0,
        max_gross: float = 1.0,
        fee: float = 0.0005,
        borrow_rate: float = 0.01,
        fill: str = "auto",
        reward_scale: float = 1.0,
        episode_length: int | None = 252,
        random_start: bool = True,
        start: int | str | pd.Timestamp | None = None,
        end: int | str | pd.Timestamp | None = None,
        bars_per_year: float = 252,
        sizing: str = "vol_target",
        vol_target: float = 0.10,
        vol_span: int = 60,
        max_leverage: float = 1.0,
        covariance: str = "ewm",
        overlay: RiskOverlay | dict[str, Any] | None = None,
        exposure_signal: bool = False,
        min_signal: float = 0.0,
        ruin_equity: float | None = None,
        reward_slopes: bool = False,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        _check_options(logit_scale, max_gross, covariance)
        self._init_spec(BarSpec.of("PortfolioEnv", locals()))
        self.data, self.symbols, self.n_assets = data, data.symbols, len(data.symbols)
        self.logit_scale, self.max_gross = float(logit_scale), float(max_gross)
        _check_exposure(exposure_signal, min_signal)
        self.exposure_signal, self.min_signal = bool(exposure_signal), float(min_signal)
        self.covariance = covariance
        if not isinstance(reward_slopes, bool | np.bool_):
            raise ValueError(f"reward_slopes={reward_slopes!r} must be true or false")
        self.reward_slopes = bool(reward_slopes)
        opens = _all_opens(data)
        self.fill: str = resolve_fill(fill, opens)
        self._init_bars(features, opens, start, end)
        self._new_episode_state(self._first_start, self._last_bar)
        self._needs_reset = True

    def _init_bars(
        self, features: Sequence[str], opens: np.ndarray | None, start: Any, end: Any
    ) -> None:
        """Features, covariance, fill tables, trading range and spaces, from the bars."""
        kept, left_out = split_features(features, self.data.frames[0].columns)
        if left_out:
            raise ValueError(
                f"features {list(left_out)} need columns the portfolio data "
                f"({self.data.label}) lacks: {sorted({c for v in left_out.values() for c in v})}"
            )
        mats = [compute_features(f, kept, self.signals) for f in self.data.frames]
        for m in mats:
            check_signal_bound(m, self.signals, FEATURE_BOUND)
        self.feature_names: tuple[str, ...] = mats[0].names  # features, then signals
        close = self.data.close()
        self._n_bars = len(close)
        warmup = mats[0].warmup + self.window - 1
        spans = (self.overlay.slow_span, self.overlay.fast_span) if self.overlay is not None else ()
        self._first_valid = max(warmup, self.vol_span if self.sizing == "vol_target" else 0, *spans)
        self._init_range(self.data.index, start, end, "feature warm-up, window and covariance span")
        self._cov = (
            causal_covariance(close, self.covariance, self.vol_span, self._first_start)
            if self.sizing == "vol_target"
            else None
        )
        self._init_overlay(close)
        per_asset = [
            fill_returns(self.fill, None if opens is None else opens[:, i], close[:, i])
            for i in range(self.n_assets)
        ]
        # [T-1, N] simple returns earned by the weights held before / filled at bar t
        e_old = np.expm1(np.stack([r.old for r in per_asset], axis=1))
        e_new = np.expm1(np.stack([r.new for r in per_asset], axis=1))
        # a fill mode's empty leg (next_close: new, close: old) is None: skipped per step
        self._delayed = per_asset[0].delayed
        self._e_old: np.ndarray | None = None if self.fill == "close" else e_old
        self._e_new: np.ndarray | None = None if self._delayed else e_new
        # long-only weights are never short: no borrow to compute
        self._borrow_per_bar = 0.0 if self.long_only else self.borrow_rate / self.bars_per_year
        self._ts_ns: list[int] = self.data.index.as_unit("ns").asi8.tolist()
        values = np.concatenate([m.values for m in mats], axis=1)  # [T, N*F] asset-major
        values = np.clip(values, -FEATURE_BOUND, FEATURE_BOUND)
        row = values.shape[1]
        n_win = self.window * row
        self._n_win = n_win
        table, _ = observation_table(values, self.window, self.n_assets)
        assert table is not None  # no size limit
        self._table: np.ndarray = table
        self._init_spaces()

    def _init_overlay(self, close: np.ndarray) -> None:
        """The overlay's covariances and multiplier, and the per-bar records of the cap."""
        self._overlay_tables = None
        self.uncapped_scale: np.ndarray | None = None
        self.overlay_cap: np.ndarray | None = None
        o = self.overlay
        if o is None:
            return
        # the sizing's own table is the slow covariance when it is the same estimate
        same = self.covariance == "ewm" and self.vol_span == o.slow_span
        self._overlay_tables = portfolio_overlay_tables(
            close, o, delay=int(self.fill == "next_close"), slow=self._cov if same else None
        )
        self.uncapped_scale = np.full(self._n_bars, np.nan)
        self.overlay_cap = np.full(self._n_bars, np.nan)

    def _init_spaces(self) -> None:
        """Observation and action spaces; they depend on the configuration only."""
        n_obs, n_win = self._table.shape[1], self._n_win
        low = np.full(n_obs, -FEATURE_BOUND, dtype=np.float32)
        high = np.full(n_obs, FEATURE_BOUND, dtype=np.float32)
        lev = self.max_leverage if self.sizing == "vol_target" else 1.0
        cap = lev * (1.0 if self.long_only else self.max_gross)
        # weights drift with prices after the fill, beyond the cap on a large move: a loose bound
        low[n_win:], high[n_win:] = (0.0 if self.long_only else -2.0 * cap), 2.0 * cap
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        n_actions = self.n_assets + int(self.exposure_signal)
        self.action_space = spaces.Box(-1.0, 1.0, (n_actions,), np.float32)

    # ------------------------------------------------------------------ public properties

    @property
    def covariance_table(self) -> np.ndarray | None:
        """``[T, N, N]`` per-bar covariance the sizing uses (``None`` without sizing)."""
        return self._cov

    @property
    def observation_names(self) -> list[str]:
        names = [
            f"{s}.{f}[t-{lag}]" if lag else f"{s}.{f}[t]"
            for lag in range(self.window - 1, -1, -1)
            for s in self.symbols
            for f in self.feature_names
        ]
        return names + [f"weight.{s}" for s in self.symbols]

    def overlay_binding(self, lo: int | None = None, hi: int | None = None) -> dict[str, Any]:
        """The overlay's settings and how it bound on the decision bars ``[lo, hi)`` the env has
        stepped (default: the trading range; :func:`~riskppo.envs.execution.overlay.binding_stats`;
        a bar's latest decision counts); ``{}`` without an overlay."""
        if self.overlay is None or self.overlay_cap is None or self.uncapped_scale is None:
            return {}
        a = self._first_start if lo is None else lo
        b = self._last_bar if hi is None else hi
        stats = binding_stats(self.uncapped_scale[a:b], self.overlay_cap[a:b])
        return {**self.overlay.to_dict(), **stats}

    def signal_weights(self, action: Any) -> np.ndarray:
        """``[N]`` float64 signal weights of ``action`` (class docstring)."""
        return self._weights(self._checked_action(action))

    def exposure(self, action: Any) -> float:
        """The exposure signal of ``action`` in ``[min_signal, 1]``: its last component ``x``
        mapped by ``min_signal + (1 - min_signal)(x + 1)/2`` with ``exposure_signal``, else 1."""
        return self._exposure(self._checked_action(action))

    def _weights(self, a: np.ndarray) -> np.ndarray:
        if self.long_only:
            return long_only_weights(a[: self.n_assets], self.logit_scale)
        return long_short_weights(a[: self.n_assets], self.max_gross)

    def _exposure(self, a: np.ndarray) -> float:
        if not self.exposure_signal:
            return 1.0
        x = float(np.clip(a[-1], -1.0, 1.0))
        return self.min_signal + (1.0 - self.min_signal) * (0.5 * (x + 1.0))

    def _checked_action(self, action: Any) -> np.ndarray:
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        n = self.n_assets + int(self.exposure_signal)
        if a.shape != (n,) or not np.isfinite(a).all():
            what = "one per asset" + (" and the exposure signal" if self.exposure_signal else "")
            raise ValueError(f"action must be {n} finite numbers ({what}), got {action!r}")
        return a

    # ------------------------------------------------------------------ gymnasium API

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        a = self._checked_action(action)
        w, signal = self._weights(a), self._exposure(a)
        if not self.reward_slopes:
            return self.step_weights(w, signal)
        t, h_prev = self._t, self._held
        out = self.step_weights(w, signal)
        out[4]["reward_slope"], out[4]["reward_slope_prev"] = self._slopes(t, a, w, signal, h_prev)
        return out

    def step_weights(
        self, w: np.ndarray, signal: float = 1.0
    ) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """:meth:`step` with the signal weights ``w`` ``[N]`` (and the exposure ``signal``)
        given directly (a fixed-weight baseline held with the agent's sizing, fills and costs);
        unchecked, see :meth:`signal_weights` and :meth:`exposure` for what an action maps to."""
        if self._needs_reset:
            raise RuntimeError("call reset() before step() (and after an episode ends)")
        t = self._t
        scale = 1.0
        if self._cov is not None:
            scale = vol_scale(
                w, self._cov[t], self.vol_target, self.max_leverage, self.bars_per_year
            )
        held = signal
        if self._overlay_tables is not None:
            scale, held = self._capped(t, w, scale, signal)
        h_new = w * scale * held
        acct = rebalance_step(
            self._held,
            h_new,
            None if self._e_old is None else self._e_old[t],
            None if self._e_new is None else self._e_new[t],
            fee=self.fee,
            borrow_per_bar=self._borrow_per_bar,
            delayed=self._delayed,
        )
        costs = acct.fee_cost + acct.borrow_cost
        self._held, self._filled, self._scale_now = acct.held_after, h_new, scale
        self._signal_now = signal
        self._contrib = acct.contributions
        net, terminated, truncated = self._book(acct.gross, costs, acct.turnover)
        info = self._info(acct.gross, costs, acct.fee_cost, acct.borrow_cost)
        return self._observe(self._t), net * self.reward_scale, terminated, truncated, info

    # ------------------------------------------------------------------ internals

    def _slopes(
        self, t: int, a: np.ndarray, w: np.ndarray, signal: float, h_prev: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(∂reward_t/∂a_t, ∂reward_t/∂a_{t-1})`` ``[A]`` of the step just taken from bar ``t``
        with targets ``self._filled`` (:mod:`riskppo.envs.portfolio.slopes`); keeps
        ``∂h_held/∂a_t`` for the next step's second slope."""
        n = self.n_assets
        w_jac = weights_jacobian(a[:n], w, self.long_only, self.logit_scale, self.max_gross)
        scale = InverseVol(1.0, None)
        if self._cov is not None:
            value = vol_scale(
                w, self._cov[t], self.vol_target, self.max_leverage, self.bars_per_year
            )
            scale = InverseVol(value, self._cov[t] if value < self.max_leverage else None)
        cap = None
        if self._overlay_tables is not None:
            fast, slow = self._overlay_tables.fast[t], self._overlay_tables.slow[t]
            binding = fast if float(w @ fast @ w) >= float(w @ slow @ w) else slow
            cap = InverseVol(self._cap_now, binding if math.isfinite(self._cap_now) else None)
        ds = None  # ds/dx of the exposure signal: 0 where x is clipped to the box
        if self.exposure_signal:
            ds = 0.5 * (1.0 - self.min_signal) * float(-1.0 < a[-1] < 1.0)
        clip_mode = self.overlay is not None and self.overlay.mode == "clip"
        jac = position_jacobian(w, w_jac, scale, cap, signal, ds, clip_mode)
        e_old = None if self._e_old is None else self._e_old[t]
        e_new = None if self._e_new is None else self._e_new[t]
        d_new, d_prev = reward_gradients(
            h_prev, self._filled, e_old, e_new, fee=self.fee, borrow_per_bar=self._borrow_per_bar,
            delayed=self._delayed, reward_scale=self.reward_scale,
        )  # fmt: skip
        slope_prev = self._held_jacobian.T @ d_prev
        self._held_jacobian = drift_product(self._filled, e_new, jac)
        return jac.T @ d_new, slope_prev

    def _capped(self, t: int, w: np.ndarray, scale: float, signal: float) -> tuple[float, float]:
        """``(scale, signal)`` after the overlay's cap ``cap_t`` for weights ``w`` (the held
        weights are ``w · scale · signal``): ``mode="scale"`` caps the full signal's scale,
        ``(min(scale, cap_t), signal)``; ``"clip"`` the position held,
        ``(min(signal · scale, cap_t), 1)``. Records the uncapped and the cap for
        :meth:`overlay_binding`."""
        tab, o = self._overlay_tables, self.overlay
        assert tab is not None and o is not None
        assert self.uncapped_scale is not None and self.overlay_cap is not None
        cap = portfolio_cap(w, tab.fast[t], tab.slow[t], float(tab.multiplier[t]), o)
        uncapped = scale if o.mode == "scale" else scale * signal
        self.uncapped_scale[t], self.overlay_cap[t] = uncapped, cap
        self._uncapped_now, self._cap_now = uncapped, cap
        return (min(scale, cap), signal) if o.mode == "scale" else (min(uncapped, cap), 1.0)

    def _new_episode_state(self, t0: int, end_bar: int) -> None:
        super()._new_episode_state(t0, end_bar)
        self._held = np.zeros(self.n_assets)
        self._filled = np.zeros(self.n_assets)
        self._contrib = np.zeros(self.n_assets)
        self._scale_now = self._signal_now = 0.0
        self._uncapped_now = self._cap_now = math.nan
        self._held_jacobian = np.zeros((self.n_assets, self.n_assets + int(self.exposure_signal)))

    def _observe(self, t: int) -> np.ndarray:
        obs = self._table[t].copy()
        obs[self._n_win :] = self._held
        return obs

    def _info(
        self, gross: float, costs: float, fee_cost: float, borrow_cost: float
    ) -> dict[str, Any]:
        total = self._sum_abs_gross + self._sum_costs
        log_eq, h = self._log_equity, self._filled
        info = {
            "equity": math.exp(log_eq),
            "log_equity": log_eq,
            "position": float(_sum(h)),
            "gross_exposure": float(_sum(np.abs(h))),
            "weights": h,
            "contributions": self._contrib,
            "scale": self._scale_now,
            "signal": self._signal_now,
            "turnover": self._turnover,
            "drawdown": 1.0 - math.exp(log_eq - self._log_peak),
            "reward_costs_fraction": self._sum_costs / total if total > 0.0 else 0.0,
            "gross_return": gross,
            "costs": costs,
            "fee_cost": fee_cost,
            "borrow_cost": borrow_cost,
            "bar": self._t,
            "timestamp": self._ts_ns[self._t],
            "episode_step": self._steps,
            "fill": self.fill,
        }
        if self.overlay is not None:
            info["uncapped_scale"], info["overlay_cap"] = self._uncapped_now, self._cap_now
        return info


def _all_opens(data: PortfolioData) -> np.ndarray | None:
    """``[T, N]`` opens when every asset has an open column, else ``None``."""
    if not all("open" in f.columns for f in data.frames):
        return None
    return np.stack([f["open"].to_numpy(np.float64) for f in data.frames], axis=1)


def _check_options(logit_scale: Any, max_gross: Any, covariance: Any) -> None:
    """The weight map's and the covariance's arguments (one line each)."""
    _positive("logit_scale", logit_scale, MAX_LOGIT_SCALE)
    _positive("max_gross", max_gross)
    if covariance not in COVARIANCES:
        raise ValueError(f"covariance={covariance!r} is invalid: must be one of {COVARIANCES}")


def _check_exposure(exposure_signal: Any, min_signal: Any) -> None:
    """``exposure_signal`` a bool; ``min_signal`` in ``[0, 1)``, above 0 only with it."""
    if not isinstance(exposure_signal, bool | np.bool_):
        raise ValueError(f"exposure_signal={exposure_signal!r} must be true or false")
    validate_min_signal(min_signal, continuous=True, long_only=True)
    if float(min_signal) > 0 and not exposure_signal:
        raise ValueError(
            f"min_signal={min_signal} needs exposure_signal=True (a core share of the sized "
            "portfolio the agent scales between min_signal and 1)"
        )


def _positive(name: str, value: Any, most: float = math.inf) -> None:
    ok = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if not (ok and math.isfinite(float(value)) and 0 < float(value) <= most):
        bound = "" if math.isinf(most) else f" and <= {most:g}"
        raise ValueError(f"{name}={value!r} is invalid: must be a finite number > 0{bound}")
