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
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np

from riskppo.envs.trading.sizing import as_finite, ewm_volatility

__all__ = [
    "OVERLAY_MODES",
    "OverlayTable",
    "RiskOverlay",
    "binding_stats",
    "expanding_tail_mean",
    "gaussian_tail_multiplier",
    "overlay_table",
    "standardised_sums",
    "tail_multiplier",
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


def tail_multiplier(z: np.ndarray, overlay: RiskOverlay, *, delay: int) -> np.ndarray:
    """``k_t`` per bar (``[T]``) from standardised sums ``z`` ``[T]`` (:func:`standardised_sums`;
    ``z[s]`` is known at bar ``s + delay + horizon``): ``-CVaR_α`` of the sums known by ``t``,
    floored at the Gaussian multiplier, which is also used before ``min_history`` are known."""
    o = overlay
    known = np.flatnonzero(~np.isnan(z))
    floor = gaussian_tail_multiplier(o.alpha)
    mult = np.full(len(z), floor)
    if len(known) >= o.min_history:
        tail = -expanding_tail_mean(z[known], o.alpha)  # after the first i+1 sums are known
        n_known = np.searchsorted(known + delay + o.horizon, np.arange(len(z)), side="right")
        ready = n_known >= o.min_history
        mult[ready] = np.maximum(tail[n_known[ready] - 1], floor)
    return mult


def overlay_table(close: np.ndarray, overlay: RiskOverlay, *, delay: int) -> OverlayTable:
    """The overlay's per-bar forecast, multiplier and cap for closes ``close`` ``[T]``
    (module docstring); ``delay`` is 1 for a next-close fill, else 0."""
    o = overlay
    slow = ewm_volatility(close, o.slow_span, 1.0)  # per-bar: bars_per_year = 1
    sigma = np.where(np.isnan(slow), np.nan, np.fmax(ewm_volatility(close, o.fast_span, 1.0), slow))
    z = standardised_sums(close, sigma, o.horizon, delay)
    mult = tail_multiplier(z, o, delay=delay)
    with np.errstate(divide="ignore"):
        cap = abs(o.limit) / (o.margin * mult * sigma * math.sqrt(o.horizon))
    return OverlayTable(sigma=sigma, multiplier=mult, cap=cap)


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
