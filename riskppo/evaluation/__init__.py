"""Backtests of trading agents (R-TRADE-3): metrics, baselines, plots and the HTML report.

::

    from riskppo.evaluation import backtest, backtest_run

    result = backtest(model, part="test")          # BacktestResult: frames, metrics, critic
    art = backtest_run("runs/googl", split="test")  # writes RUN_DIR/backtest_test/

Names are imported lazily (PEP 562): ``import riskppo.evaluation`` stays cheap until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

from riskppo.evaluation import kinds  # noqa: F401 (registers the env kinds' evaluation hooks)

_LAZY: dict[str, str] = {
    "DEFAULT_CVAR_HORIZON": "riskppo.evaluation.metrics",
    "IN_MARKET_EXPOSURE": "riskppo.evaluation.metrics",
    "FLAT_MARKET_SHARE": "riskppo.evaluation.metrics",
    "METRIC_KEYS": "riskppo.evaluation.metrics",
    "SPEC_METRIC_KEYS": "riskppo.evaluation.metrics",
    "StrategyMetrics": "riskppo.evaluation.metrics",
    "aggregate_metrics": "riskppo.evaluation.metrics",
    "dumps_metrics": "riskppo.evaluation.metrics",
    "horizon_cvar": "riskppo.evaluation.metrics",
    "strategy_metrics": "riskppo.evaluation.metrics",
    "BASELINES": "riskppo.evaluation.baselines",
    "buy_and_hold_policy": "riskppo.evaluation.baselines",
    "flat_frame": "riskppo.evaluation.baselines",
    "nearest_action": "riskppo.evaluation.baselines",
    "run_policy": "riskppo.evaluation.baselines",
    "sma_crossover_policy": "riskppo.evaluation.baselines",
    "sma_crossover_targets": "riskppo.evaluation.baselines",
    "strategy_frame": "riskppo.evaluation.baselines",
    "STRATEGIES": "riskppo.evaluation.baselines",
    "BacktestArtifacts": "riskppo.evaluation.backtest",
    "BacktestResult": "riskppo.evaluation.backtest",
    "backtest": "riskppo.evaluation.backtest",
    "backtest_run": "riskppo.evaluation.backtest",
    "flat_strategies": "riskppo.evaluation.backtest",
    "flat_warning": "riskppo.evaluation.backtest",
    "save_plots": "riskppo.evaluation.plots",
    "render_report": "riskppo.evaluation.report",
    "write_report": "riskppo.evaluation.report",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'riskppo.evaluation' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
