"""Classical allocations to compare a portfolio agent with, from skfolio (a maintained portfolio
library): fitted on the training window only, then held through the test period with the
agent's own fills, costs and (optionally) volatility targeting.

==========================  ===============================================================
name                        skfolio estimator (fitted on the training window's returns)
==========================  ===============================================================
``equal_weight``            ``EqualWeighted`` — 1/N
``inverse_volatility``      ``InverseVolatility`` — weights ∝ 1 / σ_i
``risk_parity``             ``RiskBudgeting(risk_measure=VARIANCE)`` — equal risk contributions
``min_cvar``                ``MeanRisk(MINIMIZE_RISK, risk_measure=CVAR, cvar_beta=1 − α)``
``hrp``                     ``HierarchicalRiskParity`` (López de Prado 2016)
==========================  ===============================================================

All are long-only and fully invested (weights ``>= 0``, sum 1). "Held" means the same target
weights at every bar: the env rebalances back to them after each bar's drift (and pays for it),
and with ``sizing="vol_target"`` scales them by the causal-covariance volatility target the
agent gets (:class:`~riskppo.envs.portfolio.env.PortfolioEnv`). On a walk-forward schedule each
segment re-fits on its own training window (:func:`baseline_records` per segment).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from riskppo.envs.portfolio.data import PortfolioData
from riskppo.envs.portfolio.env import PortfolioEnv

__all__ = [
    "BASELINES",
    "BaselineRecord",
    "baseline_records",
    "fit_baseline",
    "fit_baselines",
    "hold_weights",
    "training_returns",
]

BASELINES: tuple[str, ...] = (
    "equal_weight",
    "inverse_volatility",
    "risk_parity",
    "min_cvar",
    "hrp",
)


class BaselineRecord(NamedTuple):
    """One baseline held over a test period of ``n`` steps and ``N`` assets."""

    name: str
    target: np.ndarray  # [N] fitted weights (sum 1)
    bars: np.ndarray  # [n] int, the decision bar of each step (position in the data)
    weights: np.ndarray  # [n, N] weights filled at each step (target x the sizing's scale)
    log_returns: np.ndarray  # [n] net log return of each step (after fees and borrow)
    turnover: np.ndarray  # [n] Σ|Δweight| traded at each step (drift included)
    costs: np.ndarray  # [n] fee and borrow cost of each step (log-equity units)
    contributions: np.ndarray  # [n, N] each asset's part of each step's simple return


def training_returns(close: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``[hi − lo − 1, N]`` simple one-bar returns between the closes of bars ``lo .. hi−1``
    (``close``: ``[T, N]``); nothing at or after bar ``hi`` is read."""
    if not 0 <= lo < hi - 1 < len(close):
        raise ValueError(f"training window bars {lo}..{hi - 1} hold fewer than two closes")
    c = np.asarray(close[lo:hi], dtype=np.float64)
    return c[1:] / c[:-1] - 1.0


def fit_baseline(name: str, returns: np.ndarray, *, cvar_alpha: float = 0.05) -> np.ndarray:
    """Fitted ``[N]`` weights of baseline ``name`` (module table) on ``returns`` ``[n, N]``
    (simple returns); clipped at 0 and renormalised against solver round-off."""
    from skfolio import RiskMeasure
    from skfolio.optimization import (
        EqualWeighted,
        HierarchicalRiskParity,
        InverseVolatility,
        MeanRisk,
        ObjectiveFunction,
        RiskBudgeting,
    )

    estimators: dict[str, Any] = {
        "equal_weight": EqualWeighted,
        "inverse_volatility": InverseVolatility,
        "risk_parity": lambda: RiskBudgeting(risk_measure=RiskMeasure.VARIANCE),
        "min_cvar": lambda: MeanRisk(
            objective_function=ObjectiveFunction.MINIMIZE_RISK,
            risk_measure=RiskMeasure.CVAR,
            cvar_beta=1.0 - cvar_alpha,
        ),
        "hrp": HierarchicalRiskParity,
    }
    if name not in estimators:
        raise ValueError(f"unknown baseline {name!r}; valid names: {list(BASELINES)}")
    est = estimators[name]().fit(np.asarray(returns, dtype=np.float64))
    w = np.clip(np.asarray(est.weights_, dtype=np.float64), 0.0, None)
    if not (np.isfinite(w).all() and w.sum() > 0):
        raise ValueError(f"baseline {name!r}: the optimiser returned no valid weights ({w})")
    return w / w.sum()


def fit_baselines(
    close: np.ndarray,
    train: tuple[int, int],
    names: Sequence[str] = BASELINES,
    *,
    cvar_alpha: float = 0.05,
) -> dict[str, np.ndarray]:
    """Each baseline's ``[N]`` weights fitted on the bars ``train = (lo, hi)`` of ``close``."""
    returns = training_returns(close, *train)
    return {n: fit_baseline(n, returns, cvar_alpha=cvar_alpha) for n in names}


def hold_weights(env: PortfolioEnv, name: str, target: np.ndarray) -> BaselineRecord:
    """Hold ``target`` (``[N]`` signal weights) in ``env`` from its first decision bar to the end
    of its range (one episode)."""
    env.reset(options={"start": env.trading_range[0]})
    bars: list[int] = []
    weights: list[np.ndarray] = []
    rets: list[float] = []
    turns: list[float] = []
    costs: list[float] = []
    contribs: list[np.ndarray] = []
    truncated = terminated = False
    prev_turnover = 0.0
    while not (truncated or terminated):
        bars.append(env.trading_range[0] + len(bars))
        _, _, terminated, truncated, info = env.step_weights(target)
        weights.append(info["weights"])
        rets.append(info["gross_return"] - info["costs"])
        turns.append(info["turnover"] - prev_turnover)
        costs.append(info["costs"])
        contribs.append(info["contributions"])
        prev_turnover = info["turnover"]
    return BaselineRecord(
        name,
        np.asarray(target, dtype=np.float64),
        np.asarray(bars, dtype=np.int64),
        np.asarray(weights),
        np.asarray(rets),
        np.asarray(turns),
        np.asarray(costs),
        np.asarray(contribs),
    )


def baseline_records(
    data: PortfolioData,
    *,
    train: tuple[int, int],
    test: tuple[int, int],
    names: Sequence[str] = BASELINES,
    cvar_alpha: float = 0.05,
    **env_kwargs: Any,
) -> dict[str, BaselineRecord]:
    """Fit each baseline on the bars ``train = (lo, hi)`` and hold it over ``test = (lo, hi)``
    in a :class:`PortfolioEnv` made with ``env_kwargs`` (the agent's: fee, sizing, vol_target,
    covariance, ...); the env sees no bar at or after ``test[1]``.

    Raises:
        ValueError: the training window ends after the test period starts.
    """
    if train[1] > test[0]:
        raise ValueError(
            f"training window bars {train[0]}..{train[1] - 1} overlap the test period "
            f"starting at bar {test[0]}"
        )
    targets = fit_baselines(data.close(), train, names, cvar_alpha=cvar_alpha)
    kwargs = {**env_kwargs, "random_start": False, "episode_length": None}
    env = PortfolioEnv(data.head(test[1]), start=test[0], end=test[1], **kwargs)
    return {n: hold_weights(env, n, w) for n, w in targets.items()}
