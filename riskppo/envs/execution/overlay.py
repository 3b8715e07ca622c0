"""Pre-trade risk overlay: cap the exposure so that a *forecast* CVaR of the position stays
within the limit.

A trading desk enforces a risk limit before the order, not after the loss. The overlay does the
same for :class:`~riskppo.envs.TradingEnv`: at every decision bar ``t`` it forecasts the CVaR of
holding one unit of the asset over the next ``h`` bars and caps the exposure per unit of signal
so that the full signal's forecast stays inside the limit ``L < 0``:

.. code-block:: text

    σ̂_t   = max(σ_fast,t, σ_slow,t)          per-bar EWM volatilities of closes <= t
    z_s    = (log c_{s+d+h} - log c_{s+d}) / (σ̂_s √h)     standardised h-bar sums, known at s+d+h
    k_t    = max(-CVaR_α{z_s : s + d + h <= t}, φ(Φ⁻¹(α)) / α)     tail multiplier, expanding
    cap_t  = |L| / (margin · k_t · σ̂_t · √h)                   exposure cap per bar

The same sums give the Value-at-Risk counterpart ``q_t = max(-VaR_α{z_s : s + d + h <= t},
-Φ⁻¹(α))`` (:func:`tail_quantile`): one unit's forecast is ``VaR_t = -q_t σ̂_t √h``,
``CVaR_t = -k_t σ̂_t √h`` (:func:`unit_forecast`), what :mod:`riskppo.evaluation.limit_backtest`
tests out of sample.

``d`` is the fill delay (1 when an order fills at the next close, else 0): ``z_s`` is the
return an exposure decided at ``s`` actually earns. The multiplier is *filtered historical
simulation* (Barone-Adesi, Giannopoulos & Vosper 1999): the volatility forecast's own errors —
lag after a regime change, fat tails — are in the standardised sums it is estimated from, so a
forecast that under-reacts gets a larger multiplier. Everything at bar ``t`` uses closes
``<= t`` only. Before ``min_history`` sums are known the multiplier is the Gaussian one
(2.06 at α = 5%), and it never goes below it: an empirical tail thinner than the normal one is
sampling luck far more often than a fact. The fast volatility (span 5 by default) reacts within
days to a shock the slow one (the sizing's span) would take months to see.

``margin >= 1`` is a pessimism factor for what the history cannot show (a next regime riskier
than any before); docs/risk.md says how the defaults were chosen on validation data.

How the cap meets the agent's signal ``a_t`` (``u_t = min(vol_target / σ̂_annual, max_leverage)``
is the sizing's exposure per unit of signal), ``mode``:

.. code-block:: text

    "clip"  (default)  exposure_t = clip(a_t · u_t, -cap_t, cap_t)
    "scale"            exposure_t = a_t · min(u_t, cap_t)

``"clip"`` caps the position actually held, as a desk's limit does: a signal whose sized
position is inside the budget is held as it is, so a smaller signal is not cut a second time
and the budget is used. ``"scale"`` caps the full signal's position and scales every signal by
the same factor, so a fraction of the signal is a fraction of the budget; on a volatile asset,
where the cap is far below the sizing, it leaves most of the budget unused. Both keep
``|exposure| <= cap_t`` on every bar, and a full signal holds the same position in both.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np

from riskppo.envs.market.estimators import as_finite, ewm_volatility

__all__ = [
    "OVERLAY_MODES",
    "OverlayTable",
    "RiskOverlay",
    "UnitForecast",
    "binding_stats",
    "expanding_quantile",
    "expanding_tail_mean",
    "forecast_sigma",
    "gaussian_tail_multiplier",
    "gaussian_tail_quantile",
    "overlay_table",
    "standardised_sums",
    "tail_multiplier",
    "tail_quantile",
    "unit_forecast",
]


OVERLAY_MODES: tuple[str, ...] = ("clip", "scale")


@dataclass(frozen=True)
class RiskOverlay:
    """Settings of the overlay (module docstring).

    Attributes:
        limit: the CVaR limit ``L`` (< 0), a log return over ``horizon`` bars (-0.04: the mean
            of the worst α of h-bar returns must stay above -4%).
        alpha: tail level α of the CVaR, in (0, 0.5].
        horizon: ``h``, bars the forecast looks ahead.
        fast_span / slow_span: EWM spans (bars) of the two volatility estimates; the forecast
            is their maximum.
        margin: the cap is divided by it (>= 1; 1 trusts the history fully).
        min_history: standardised sums needed before the empirical multiplier is used.
        mode: ``"clip"`` caps the position held, ``"scale"`` the full signal's (module
            docstring).
    """

    limit: float
    alpha: float = 0.05
    horizon: int = 20
    fast_span: int = 5
    slow_span: int = 60
    margin: float = 1.3
    min_history: int = 250
    mode: str = "clip"

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"overlay {name}={getattr(self, name)!r} is invalid: {rule}")

        need(
            as_finite(self.limit) is not None and self.limit < 0,
            "limit",
            "must be a finite number < 0",
        )
        need(
            as_finite(self.alpha) is not None and 0 < self.alpha <= 0.5,
            "alpha",
            "must be in (0, 0.5]",
        )
        for name in ("horizon", "min_history"):
            need(_int(getattr(self, name), 1), name, "must be an int >= 1")
        for name in ("fast_span", "slow_span"):
            need(_int(getattr(self, name), 2), name, "must be an int >= 2")
        need(
            as_finite(self.margin) is not None and self.margin >= 1,
            "margin",
            "must be a finite number >= 1",
        )
        need(self.mode in OVERLAY_MODES, "mode", f"must be one of {', '.join(OVERLAY_MODES)}")

    @classmethod
    def of(cls, value: RiskOverlay | Mapping[str, Any]) -> RiskOverlay:
        """``value`` itself, or the overlay its keyword mapping describes."""
        if isinstance(value, RiskOverlay):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"overlay must be a mapping of its settings, got {value!r}")
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"overlay has unknown settings {unknown}")
        if "limit" not in value:
            raise ValueError("overlay needs a limit (a CVaR of log returns < 0, e.g. -0.04)")
        return cls(**value)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class OverlayTable(NamedTuple):
    """Per-bar overlay quantities, each ``[T]`` float64, NaN where undefined (warm-up).

    ``sigma``: the per-bar volatility forecast ``σ̂_t``; ``multiplier``: ``k_t``; ``cap``: the
    largest ``|exposure|`` allowed at bar ``t``.
    """

    sigma: np.ndarray
    multiplier: np.ndarray
    cap: np.ndarray


def gaussian_tail_multiplier(alpha: float) -> float:
    """``-CVaR_α`` of a standard normal, ``φ(Φ⁻¹(α)) / α`` (2.0627 at α = 0.05)."""
    nd = NormalDist()
    return nd.pdf(nd.inv_cdf(alpha)) / alpha


def gaussian_tail_quantile(alpha: float) -> float:
    """``-VaR_α`` of a standard normal, ``-Φ⁻¹(α)`` (1.6449 at α = 0.05)."""
    return -NormalDist().inv_cdf(alpha)


def standardised_sums(close: np.ndarray, sigma: np.ndarray, horizon: int, delay: int) -> np.ndarray:
    """``z[s] = (log c[s+delay+horizon] - log c[s+delay]) / (sigma[s] √horizon)`` (``[T]``;
    NaN where ``sigma[s]`` is NaN or not positive, or the sum runs past the last bar)."""
    logc = np.log(np.asarray(close, dtype=np.float64))
    n = len(logc)
    z = np.full(n, np.nan)
    m = n - delay - horizon
    if m > 0:
        fwd = logc[delay + horizon : delay + horizon + m] - logc[delay : delay + m]
        s = sigma[:m]
        with np.errstate(divide="ignore", invalid="ignore"):
            z[:m] = np.where(s > 0, fwd / (s * math.sqrt(horizon)), np.nan)
    return z


def expanding_tail_mean(values: np.ndarray, alpha: float) -> np.ndarray:
    """``out[i]`` = mean of the lowest ``ceil(alpha·(i+1))`` of ``values[: i+1]`` (``[n]``).

    One sorted list and the running sum of its lowest ``m`` entries: O(n log n) comparisons
    (the list insertions are memmoves), exact to float rounding against a sort per prefix.
    """
    srt: list[float] = []
    out = np.empty(len(values))
    total, m = 0.0, 0
    for i, v in enumerate(np.asarray(values, dtype=np.float64).tolist()):
        j = bisect.bisect_right(srt, v)
        srt.insert(j, v)
        if j < m:  # v enters the lowest m; the one it pushed out leaves
            total += v - srt[m]
        m_new = math.ceil(alpha * (i + 1) - 1e-12)
        if m_new > m:
            total += srt[m]
            m = m_new
        out[i] = total / m
    return out


def expanding_quantile(values: np.ndarray, alpha: float) -> np.ndarray:
    """``out[i]`` = the ``ceil(alpha·(i+1))``-th lowest of ``values[: i+1]`` (``[n]``): the
    empirical α-quantile of each prefix, the largest of the lowest values
    :func:`expanding_tail_mean` averages. One sorted list, O(n log n) comparisons."""
    srt: list[float] = []
    out = np.empty(len(values))
    for i, v in enumerate(np.asarray(values, dtype=np.float64).tolist()):
        bisect.insort(srt, v)
        out[i] = srt[math.ceil(alpha * (i + 1) - 1e-12) - 1]
    return out


def tail_multiplier(z: np.ndarray, overlay: RiskOverlay, *, delay: int) -> np.ndarray:
    """``k_t`` per bar (``[T]``) from standardised sums ``z`` ``[T]`` (:func:`standardised_sums`;
    ``z[s]`` is known at bar ``s + delay + horizon``): ``-CVaR_α`` of the sums known by ``t``,
    floored at the Gaussian multiplier, which is also used before ``min_history`` are known."""
    floor = gaussian_tail_multiplier(overlay.alpha)
    return _causal_expanding(
        z, overlay, delay, floor, lambda v: -expanding_tail_mean(v, overlay.alpha)
    )


def tail_quantile(z: np.ndarray, overlay: RiskOverlay, *, delay: int) -> np.ndarray:
    """``q_t`` per bar (``[T]``), the Value-at-Risk counterpart of :func:`tail_multiplier` from the
    same sums, known by the same bars: ``-`` the empirical α-quantile of the sums known by ``t``
    (the ``ceil(α n)``-th lowest of ``n``: the largest sum in the tail ``k_t`` averages), floored
    at the Gaussian ``-Φ⁻¹(α)`` (1.645 at α = 5%), which is also used before ``min_history`` are
    known. ``q_t <= k_t`` on every bar. The unit VaR forecast is ``-q_t σ̂_t √h``."""
    floor = gaussian_tail_quantile(overlay.alpha)
    return _causal_expanding(
        z, overlay, delay, floor, lambda v: -expanding_quantile(v, overlay.alpha)
    )


def _causal_expanding(
    z: np.ndarray,
    overlay: RiskOverlay,
    delay: int,
    floor: float,
    stat: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """``max(stat(sums known by t), floor)`` per bar ``[T]``; ``floor`` before ``min_history``
    sums are known. ``stat`` maps the known sums ``[n]`` (in the order they become known) to the
    statistic of each prefix ``[n]``."""
    o = overlay
    known = np.flatnonzero(~np.isnan(z))
    out = np.full(len(z), floor)
    if len(known) >= o.min_history:
        prefix = stat(z[known])  # after the first i+1 sums are known
        n_known = _n_known(known, len(z), delay + o.horizon)
        ready = n_known >= o.min_history
        out[ready] = np.maximum(prefix[n_known[ready] - 1], floor)
    return out


def forecast_sigma(close: np.ndarray, overlay: RiskOverlay) -> np.ndarray:
    """``σ̂_t`` per bar (``[T]``, per-bar units, NaN in the slow estimate's warm-up): the larger
    of the fast and the slow EWM volatility of closes ``<= t``."""
    slow = ewm_volatility(close, overlay.slow_span, 1.0)  # per-bar: bars_per_year = 1
    fast = ewm_volatility(close, overlay.fast_span, 1.0)
    return np.where(np.isnan(slow), np.nan, np.fmax(fast, slow))


def overlay_table(close: np.ndarray, overlay: RiskOverlay, *, delay: int) -> OverlayTable:
    """The overlay's per-bar forecast, multiplier and cap for closes ``close`` ``[T]``
    (module docstring); ``delay`` is 1 for a next-close fill, else 0."""
    o = overlay
    sigma = forecast_sigma(close, o)
    z = standardised_sums(close, sigma, o.horizon, delay)
    mult = tail_multiplier(z, o, delay=delay)
    with np.errstate(divide="ignore"):
        cap = abs(o.limit) / (o.margin * mult * sigma * math.sqrt(o.horizon))
    return OverlayTable(sigma=sigma, multiplier=mult, cap=cap)


class UnitForecast(NamedTuple):
    """The overlay's forecast for holding one unit over the next ``h`` bars, per decision bar
    (each ``[T]`` float64): ``sigma`` ``σ̂_t``; ``z`` the standardised sum that bar's unit
    earns (:func:`standardised_sums`, NaN where it runs past the data); ``multiplier`` ``k_t``;
    ``quantile`` ``q_t`` (:func:`tail_quantile`); ``n_known`` ``[T]`` int64, how many sums
    were known at bar ``t`` (the first ``n_known[t]`` finite entries of ``z``: those ``k_t`` and
    ``q_t`` were taken from once ``n_known[t] >= min_history``). In log-return units over ``h``
    bars, without the margin: ``VaR_t = -q_t σ̂_t √h``, ``CVaR_t = -k_t σ̂_t √h``, realised
    ``z_t σ̂_t √h``."""

    sigma: np.ndarray
    z: np.ndarray
    multiplier: np.ndarray
    quantile: np.ndarray
    n_known: np.ndarray


def unit_forecast(close: np.ndarray, overlay: RiskOverlay, *, delay: int) -> UnitForecast:
    """:class:`UnitForecast` of closes ``close`` ``[T]`` (the tables :func:`overlay_table`
    computes, and the quantile next to the multiplier); everything at bar ``t`` from closes
    ``<= t`` except ``z``, the outcome."""
    o = overlay
    sigma = forecast_sigma(close, o)
    z = standardised_sums(close, sigma, o.horizon, delay)
    known = np.flatnonzero(~np.isnan(z))
    return UnitForecast(
        sigma=sigma,
        z=z,
        multiplier=tail_multiplier(z, o, delay=delay),
        quantile=tail_quantile(z, o, delay=delay),
        n_known=_n_known(known, len(z), delay + o.horizon),
    )


def _n_known(known: np.ndarray, n: int, lag: int) -> np.ndarray:
    """``[n]`` int64: how many of the sums at positions ``known`` (sorted) are known at each bar,
    a sum at ``s`` being known from bar ``s + lag``."""
    return np.searchsorted(known + lag, np.arange(n), side="right").astype(np.int64)


def overlay_exposure(
    signal: np.ndarray, scale: np.ndarray, cap: np.ndarray | None, mode: str
) -> np.ndarray:
    """The exposure the env holds for ``signal`` (module docstring, ``mode``): ``clip(a·u, ±cap)``
    or ``a·min(u, cap)``, with ``u`` = ``scale`` the sizing's exposure per unit of signal.

    ``signal`` ``[..., T]``; ``scale`` and ``cap`` ``[T]`` per decision bar (``cap`` ``None`` or
    ``inf``: no overlay). The same float operations as a step of
    :class:`~riskppo.envs.TradingEnv`, so the result equals its positions exactly; vectorised
    over any leading axes (e.g. ``n`` random signals)."""
    if mode not in OVERLAY_MODES:
        raise ValueError(f"overlay mode={mode!r} is invalid: must be one of {OVERLAY_MODES}")
    a = np.asarray(signal, dtype=np.float64)
    u = np.asarray(scale, dtype=np.float64)
    if cap is None:
        return a * u
    c = np.asarray(cap, dtype=np.float64)
    if mode == "scale":
        return a * np.fmin(u, c)
    return np.clip(a * u, -c, c)


def binding_stats(uncapped: np.ndarray, cap: np.ndarray) -> dict[str, float]:
    """How the cap bound over a run of bars: ``binding_share``, the fraction of bars (with both
    defined) where ``cap < uncapped`` (the ``|exposure|`` the sizing alone gives: per unit of
    signal for a full signal, or times the signal held), and ``mean_cut``, the mean of
    ``cap / uncapped`` over those bars (1.0 when it never bound). ``[n]`` arrays each."""
    u, c = np.asarray(uncapped, dtype=np.float64), np.asarray(cap, dtype=np.float64)
    ok = ~(np.isnan(u) | np.isnan(c))
    bound = ok & (c < u)
    n = int(ok.sum())
    share = float(bound.sum() / n) if n else 0.0
    cut = float(np.mean(c[bound] / u[bound])) if bound.any() else 1.0
    return {"binding_share": share, "mean_cut": cut}


def _int(v: object, low: int) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool) and bool(v >= low)
