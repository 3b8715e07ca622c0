"""The pre-trade risk overlay (:mod:`riskppo.envs.execution.overlay`) for a many-asset portfolio.

At each decision bar ``t`` the portfolio env caps the exposure scale of the target weights
``w_t`` (``[N]``) so the full targets' *forecast* CVaR of the next ``h`` bars stays inside the
limit ``L < 0``:

.. code-block:: text

    σ̂_p,t = max(sqrt(w_tᵀ Σ̂^fast_t w_t), sqrt(w_tᵀ Σ̂^slow_t w_t))    per-bar, returns <= t
    k_t    = tail multiplier of the reference portfolio (below), known by t
    cap_t  = |L| / (margin · k_t · σ̂_p,t · √h)
    h_t    = w_t · min(vol-target scale, max_leverage, cap_t)

``Σ̂^fast`` / ``Σ̂^slow`` are the zero-mean EWM covariances of one-bar log returns with spans
``fast_span`` / ``slow_span`` (:func:`riskppo.envs.portfolio.math.ewm_covariance`).

**The multiplier's reference portfolio.** ``k_t`` is estimated by filtered historical simulation
(Barone-Adesi, Giannopoulos & Vosper 1999) as for one asset, on the standardised ``h``-bar sums of
one fixed portfolio: the equal-weight one, rebalanced every bar, with the same two-span volatility
forecast. The agent's weights change every bar, so its own past sums would mix portfolios; the
equal-weight portfolio is the one the zero action holds (long-only), it is defined from the first
bar on, and its sums carry what the multiplier is for — the covariance forecast's lag after a
shock and the fat tails of a diversified stock portfolio. It is computed once per env, from
closes only; ``k_t`` uses the sums complete by bar ``t`` and never goes below the Gaussian
multiplier (2.06 at α = 5%).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from riskppo.envs.execution.overlay import RiskOverlay, standardised_sums, tail_multiplier
from riskppo.envs.market.estimators import ewm_covariance, log_returns

__all__ = ["PortfolioOverlayTables", "portfolio_cap", "portfolio_overlay_tables"]


class PortfolioOverlayTables(NamedTuple):
    """Per-bar inputs of the cap: ``fast`` / ``slow`` ``[T, N, N]`` covariances (NaN before
    their span), ``multiplier`` ``[T]`` (``k_t``)."""

    fast: np.ndarray
    slow: np.ndarray
    multiplier: np.ndarray


def portfolio_cap(
    w: np.ndarray,
    fast: np.ndarray,
    slow: np.ndarray,
    multiplier: float,
    overlay: RiskOverlay,
) -> float:
    """The largest exposure scale of signal weights ``w`` ``[N]`` whose forecast CVaR stays
    inside the limit (module docstring), from bar ``t``'s ``fast`` / ``slow`` covariances
    ``[N, N]`` and multiplier ``k_t``; ``inf`` for a zero-variance portfolio."""
    var = max(float(w @ fast @ w), float(w @ slow @ w))
    if var <= 0.0:
        return math.inf
    o = overlay
    return abs(o.limit) / (o.margin * multiplier * math.sqrt(var * o.horizon))


def portfolio_overlay_tables(
    close: np.ndarray, overlay: RiskOverlay, *, delay: int, slow: np.ndarray | None = None
) -> PortfolioOverlayTables:
    """The covariances and the reference multiplier for closes ``close`` ``[T, N]``; ``delay``
    is 1 for a next-close fill, else 0; ``slow``: a ready EWM covariance with span
    ``overlay.slow_span`` (the env's own sizing table), else computed here."""
    fast = ewm_covariance(close, overlay.fast_span)
    if slow is None:
        slow = ewm_covariance(close, overlay.slow_span)
    n = close.shape[1]
    w = np.full(n, 1.0 / n)
    r = np.nan_to_num(log_returns(close))  # bar 0 has no return
    index = np.exp(np.cumsum(np.log(np.expm1(r) @ w + 1.0)))  # equal weight, rebalanced
    var = np.maximum(np.einsum("i,tij,j->t", w, fast, w), np.einsum("i,tij,j->t", w, slow, w))
    sigma = np.sqrt(np.where(np.isnan(var), np.nan, np.maximum(var, 0.0)))
    z = standardised_sums(index, sigma, overlay.horizon, delay)
    return PortfolioOverlayTables(fast, slow, tail_multiplier(z, overlay, delay=delay))
