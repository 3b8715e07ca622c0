"""The result of a backtest (:class:`BacktestResult`), apart from the code that produces it
(:mod:`riskppo.evaluation.backtest`), so that the plots and the report read it without importing
the backtest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from riskppo.config import Config
from riskppo.evaluation.baselines import STRATEGIES
from riskppo.evaluation.metrics import FLAT_MARKET_SHARE, MetricValue, StrategyMetrics
from riskppo.evaluation.timing_null import EnvTables

__all__ = ["SPLIT_NAMES", "BacktestResult", "flat_strategies"]

SPLIT_NAMES = {"train": "training", "val": "validation", "test": "test"}
"""Each split part (``--split``) in words."""


@dataclass
class BacktestResult:
    """Everything a backtest produced (per-bar frames, metrics, the critic's forecasts).

    Attributes:
        part: ``"train"``, ``"val"`` or ``"test"``.
        dataset: what was traded: the data file's name when ``data.path`` is set, else the
            bundled dataset's name (``"GOOGL"``); see
            :func:`~riskppo.envs.registration.data_label`.
        start: timestamp of the first decision bar (every equity curve starts at 1 here).
        end: timestamp of the last bar of the period.
        bars_per_year: annualisation factor used for the metrics.
        frames: strategy → per-bar frame (see :func:`~riskppo.evaluation.baselines.strategy_frame`;
            indexed by the bar at which each return is realised).
        metrics: strategy → :class:`StrategyMetrics`.
        critic: per decision bar (indexed by the bar observed when deciding): quantiles of the
            critic's predicted **discounted return-to-go** in log-return units (columns ``q05``,
            ``q25``, ``q50``, ``q75``, ``q95``), its ``mean``, ``var`` and ``cvar`` at
            ``cvar_alpha``, and ``realised``: the realised discounted return-to-go
            ``Σ_k γ^k r_{t+k}``, bootstrapped at the period end with the critic's mean.
        cvar_alpha: the run's ``risk.cvar_alpha``.
        gamma: the run's discount ``ppo.gamma`` (the critic's horizon).
        env_settings: fee, borrow rate, positions, sizing, ... of the envs the strategies ran in.
        config: the model's config.
        num_timesteps: environment steps the agent was trained for.
        sma: SMA-crossover parameters used.
        tables: the agent env's per-step tables over the period (sizing scale, overlay cap,
            fill returns; :class:`~riskppo.evaluation.timing_null.EnvTables`), for the
            random-timing null held like the agent's positions.
    """

    part: str
    dataset: str
    start: pd.Timestamp
    end: pd.Timestamp
    bars_per_year: float
    frames: dict[str, pd.DataFrame]
    metrics: dict[str, StrategyMetrics]
    critic: pd.DataFrame
    cvar_alpha: float
    gamma: float
    env_settings: dict[str, Any]
    config: Config
    num_timesteps: int
    sma: dict[str, Any] = field(default_factory=dict)
    flat_threshold: float = FLAT_MARKET_SHARE
    tables: EnvTables | None = None

    def metrics_dict(self) -> dict[str, dict[str, MetricValue]]:
        """``{strategy: metrics.to_dict()}`` — the content of ``metrics.json``."""
        return {name: self.metrics[name].to_dict() for name in STRATEGIES}

    def equity_frame(self) -> pd.DataFrame:
        """Per bar (with a first row at :attr:`start`, equity 1): close, agent position and the
        equity and drawdown of each strategy — the content of ``equity.csv``."""
        agent = self.frames["agent"]
        out = pd.DataFrame(
            {
                "close": agent["close"],
                "agent_position": agent["position"],
                "agent_signal": agent["signal"],
            },
            index=agent.index,
        )
        for name in STRATEGIES:
            out[f"{name}_equity"] = self.frames[name]["equity"]
            out[f"{name}_drawdown"] = self.frames[name]["drawdown"]
        first = pd.DataFrame(
            {c: [1.0 if c.endswith("_equity") else 0.0] for c in out.columns}, index=[self.start]
        )
        first["close"] = self.env_settings["start_close"]
        out = pd.concat([first, out])
        out.index.name = "timestamp"
        return out

    def info(self) -> dict[str, Any]:
        """JSON-ready description of the backtest (``run_info.json``)."""
        cfg = self.config
        return {
            "dataset": self.dataset,
            "data_path": cfg.data.path,
            "split": self.part,
            "split_fractions": list(cfg.data.split),
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "n_bars": len(self.frames["agent"]),
            "bars_per_year": self.bars_per_year,
            "num_timesteps": self.num_timesteps,
            "seed": cfg.seed,
            "env": {k: v for k, v in self.env_settings.items() if k != "start_close"},
            "critic": {
                "kind": cfg.critic.kind,
                "twin": cfg.critic.twin,
                "n_quantiles": cfg.critic.n_quantiles,
                "n_atoms": cfg.critic.n_atoms,
            },
            "risk": {
                "cvar_alpha": cfg.risk.cvar_alpha,
                "cvar_horizon": self.metrics["agent"].cvar_horizon_bars,
                "cvar_limit": cfg.risk.cvar_limit,
            },
            "flat_market_share": self.flat_threshold,
            "flat": flat_strategies(self),
            "gamma": self.gamma,
            "sma": self.sma,
        }


def flat_strategies(result: BacktestResult) -> list[str]:
    """Names of the strategies that were flat/near-flat (market share below the threshold)."""
    return [name for name in STRATEGIES if result.metrics[name].flat]
