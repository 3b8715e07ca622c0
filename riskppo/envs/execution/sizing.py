"""Volatility-targeted position sizing (R-TRADE-2; Zhang, Zohren & Roberts 2020, eq. 2).

The agent chooses a *signal* ``a_t`` (a target position in ``[-1, 1]``); the exposure it holds
from close ``t`` to close ``t+1`` is

.. code-block:: text

    exposure_t = a_t · min(σ_target / σ̂_t, max_leverage)

where ``σ̂_t`` is the annualised volatility of one-bar log returns estimated **causally** at bar
``t`` (from returns ``r_1 .. r_t`` only) by an exponentially weighted mean of squared returns:

.. code-block:: text

    σ̂²_t = Σ_{k=0}^{t-1} w^k r²_{t-k} / Σ_{k=0}^{t-1} w^k,   w = 1 − 2/(span+1),
    σ̂_t  = sqrt(σ̂²_t · bars_per_year)

(the zero-mean EWM estimator usual for daily returns; Moreira & Muir 2017 use realised variance
the same way). A bar is *sized* once ``span`` returns are available; before that the scale is NaN
and the env does not start episodes there. A zero volatility (constant prices) takes the leverage
cap. Costs are charged on the change of *exposure*, so the rebalancing that sizing causes is paid
for.
"""

from __future__ import annotations

import numpy as np

from riskppo.envs.market.estimators import as_finite, check_vol_span, ewm_volatility

__all__ = ["SIZINGS", "check_sizing", "vol_target_scale"]

SIZINGS: tuple[str, ...] = ("none", "vol_target")


def check_sizing(*, target: object, span: object, max_leverage: object) -> None:
    """Validate the vol-targeting parameters; the ``ValueError`` names the bad field."""
    t = as_finite(target)
    if t is None or t <= 0:
        raise ValueError(f"vol_target={target!r} is invalid: must be a finite annual vol > 0")
    check_vol_span(span)
    lev = as_finite(max_leverage)
    if lev is None or lev <= 0:
        raise ValueError(f"max_leverage={max_leverage!r} is invalid: must be finite and > 0")


def vol_target_scale(
    close: np.ndarray,
    *,
    target: float,
    span: int,
    max_leverage: float,
    bars_per_year: float,
) -> np.ndarray:
    """Exposure per unit of signal, ``min(target / σ̂_t, max_leverage)`` per bar (``[T]``, NaN
    before ``span`` returns). ``target`` is an annual volatility (0.10 = 10%/yr)."""
    check_sizing(target=target, span=span, max_leverage=max_leverage)
    sigma = ewm_volatility(close, span, bars_per_year)
    with np.errstate(divide="ignore"):
        scale = np.minimum(target / sigma, max_leverage)
    return np.where(np.isnan(sigma), np.nan, scale)
