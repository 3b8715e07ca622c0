"""Backtest a portfolio agent on one part of its split, against the skfolio baselines
(:mod:`riskppo.evaluation.portfolio.baselines`) fitted on the training part and held with the
same env settings.

Each strategy's per-bar record is a frame indexed by the timestamp of the bar a step ends at:
``log_return`` (net), ``gross_exposure`` (``Σ|h|`` filled at the step), ``turnover``
(``Σ|Δweight|`` traded), ``costs`` (fee and borrow, log-equity units), and per asset
``w_<SYMBOL>`` (the weight filled) and ``c_<SYMBOL>`` (its contribution to the step's simple
return, :mod:`riskppo.envs.portfolio.math`).

The agent's env has its risk ``overlay`` (:mod:`riskppo.envs.portfolio.overlay`) with the limit
of the ``risk`` section. Each baseline is held twice then: as a user knows it (``hrp``), and
under the agent's own overlay (``hrp_overlay``), the same allocation constrained by the same
pre-trade cap — the fair reference for the agent's risk-adjusted return, which would otherwise
credit the agent with the overlay's timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from riskppo.envs.execution.overlay import binding_stats
from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.envs.portfolio.factory import make_portfolio_env, portfolio_range
from riskppo.envs.registration import market_kind, portfolio_data_kwargs, resolve_overlay
from riskppo.evaluation.episode import run_agent_episode
from riskppo.evaluation.portfolio.baselines import BASELINES, BaselineRecord, baseline_records

if TYPE_CHECKING:
    from riskppo.agent import DistributionalPPO

__all__ = [
    "DATA_KEYS",
    "OVERLAY_SUFFIX",
    "PortfolioBacktest",
    "portfolio_backtest",
    "strategy_frame",
]

# env.kwargs that name the assets (make_portfolio_env's), not settings of the env itself
DATA_KEYS = ("dataset", "symbols", "paths", "table", "align")
# the name of a baseline held under the agent's overlay: "hrp" -> "hrp_overlay"
OVERLAY_SUFFIX = "_overlay"


class PortfolioBacktest(NamedTuple):
    """Per-bar frames of the agent and each baseline over one period of the split."""

    frames: dict[str, pd.DataFrame]
    symbols: tuple[str, ...]
    bars_per_year: float
    train: tuple[int, int]  # bars the baselines were fitted on
    test: tuple[int, int]  # bars of the period ([first decision bar, last bar + 1))
    fee: float
    overlay: dict[str, Any] | None  # the agent's overlay and how it bound over the period


def strategy_frame(
    index: pd.DatetimeIndex,
    symbols: Sequence[str],
    weights: np.ndarray,
    log_returns: np.ndarray,
    turnover: np.ndarray,
    costs: np.ndarray,
    contributions: np.ndarray,
) -> pd.DataFrame:
    """The per-bar record of one strategy (module docstring); ``weights`` and
    ``contributions`` ``[n, N]``."""
    w = np.asarray(weights, dtype=np.float64)
    columns = {
        "log_return": np.asarray(log_returns, dtype=np.float64),
        "gross_exposure": np.abs(w).sum(axis=1),
        "turnover": np.asarray(turnover, dtype=np.float64),
        "costs": np.asarray(costs, dtype=np.float64),
        **{f"w_{s}": w[:, i] for i, s in enumerate(symbols)},
        **{f"c_{s}": np.asarray(contributions)[:, i] for i, s in enumerate(symbols)},
    }
    return pd.DataFrame(columns, index=index)


def _agent_infos(model: DistributionalPPO, part: str) -> list[dict[str, Any]]:
    """One deterministic episode of the agent over ``part`` (recurrent state carried,
    observation normalisation frozen at the model's statistics): each step's info
    (:func:`~riskppo.evaluation.episode.run_agent_episode`)."""
    return run_agent_episode(model, part).infos


def portfolio_backtest(
    model: DistributionalPPO, part: str = "test", names: Sequence[str] = BASELINES
) -> PortfolioBacktest:
    """Run ``model`` over ``part`` and hold each baseline of ``names`` over the same bars."""
    cfg = model.config
    if market_kind(cfg.env.id, "portfolio backtest").single_asset:
        raise ValueError(
            f"portfolio backtest needs a model trained on many assets, not {cfg.env.id!r}"
        )
    kwargs = resolve_overlay(cfg.env.kwargs, cfg.risk)
    data_kwargs = portfolio_data_kwargs(cfg.data)
    env: PortfolioEnv = make_portfolio_env(**kwargs, **data_kwargs, part=part)
    data = env.data
    _, train_lo, train_hi = portfolio_range(data, data_kwargs["split"], "train", cfg.data.bars)
    first, last = env.trading_range
    settings = {k: v for k, v in kwargs.items() if k not in (*DATA_KEYS, "overlay")}
    settings.update(bars_per_year=env.bars_per_year, window=env.window)

    def hold(**overlay: Any) -> dict[str, BaselineRecord]:
        return baseline_records(
            data,
            train=(train_lo, train_hi),
            test=(first, last + 1),
            names=names,
            cvar_alpha=cfg.risk.cvar_alpha,
            **settings,
            **overlay,
        )

    records = hold()
    if kwargs.get("overlay") is not None:
        held = hold(overlay=kwargs["overlay"])
        records.update({f"{n}{OVERLAY_SUFFIX}": rec for n, rec in held.items()})
    infos = _agent_infos(model, part)
    index = pd.DatetimeIndex(pd.to_datetime([i["timestamp"] for i in infos]), name="timestamp")
    turnover = np.diff([0.0, *(i["turnover"] for i in infos)])
    frames = {
        "agent": strategy_frame(
            index,
            data.symbols,
            np.stack([i["weights"] for i in infos]),
            np.array([i["gross_return"] - i["costs"] for i in infos]),
            turnover,
            np.array([i["costs"] for i in infos]),
            np.stack([i["contributions"] for i in infos]),
        )
    }
    for name, rec in records.items():
        frames[name] = _baseline_frame(rec, index, data.symbols)
    return PortfolioBacktest(
        frames,
        data.symbols,
        env.bars_per_year,
        (train_lo, train_hi),
        (first, last + 1),
        env.fee,
        _overlay_binding(env, infos),
    )


def _overlay_binding(env: PortfolioEnv, infos: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The agent's overlay settings and how it bound on the steps ``infos`` (``None``
    without one)."""
    if env.overlay is None:
        return None
    uncapped = np.array([i["uncapped_scale"] for i in infos])
    cap = np.array([i["overlay_cap"] for i in infos])
    return {**env.overlay.to_dict(), **binding_stats(uncapped, cap)}


def _baseline_frame(
    rec: BaselineRecord, index: pd.DatetimeIndex, symbols: Sequence[str]
) -> pd.DataFrame:
    if len(rec.log_returns) != len(index):
        raise RuntimeError(
            f"baseline {rec.name} ran {len(rec.log_returns)} steps, the agent {len(index)}"
        )
    return strategy_frame(
        index, symbols, rec.weights, rec.log_returns, rec.turnover, rec.costs, rec.contributions
    )
