"""Trading environments and market data (R-TRADE): loaders, synthetic data, features, sizing,
TradingEnv.

Names are imported lazily (PEP 562), so ``import riskppo.envs`` stays cheap until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "DATASETS": "riskppo.envs.market.datasets",
    "DEFAULT_FEATURES": "riskppo.envs.features",
    "DEFAULT_REGIMES": "riskppo.envs.market.synthetic",
    "DEFAULT_TRANSITIONS": "riskppo.envs.market.synthetic",
    "DataError": "riskppo.envs.market.ohlcv",
    "DataWarning": "riskppo.envs.market.errors",
    "DatasetInfo": "riskppo.envs.market.datasets",
    "FeatureMatrix": "riskppo.envs.features",
    "Fold": "riskppo.envs.market.ohlcv",
    "OHLCV_COLUMNS": "riskppo.envs.market.ohlcv",
    "PORTFOLIO_ID": "riskppo.envs.registration",
    "PortfolioData": "riskppo.envs.portfolio.data",
    "PortfolioEnv": "riskppo.envs.portfolio.env",
    "Regime": "riskppo.envs.market.synthetic",
    "Split": "riskppo.envs.market.ohlcv",
    "SIZINGS": "riskppo.envs.execution.sizing",
    "SP500_SYMBOLS": "riskppo.envs.market.datasets",
    "TRADING_FEATURES": "riskppo.envs.features",
    "TRADING_ID": "riskppo.envs.registration",
    "TradingEnv": "riskppo.envs.trading.env",
    "compute_features": "riskppo.envs.features",
    "dataset_path": "riskppo.envs.market.datasets",
    "default_split": "riskppo.envs.market.ohlcv",
    "ewm_volatility": "riskppo.envs.market.estimators",
    "feature_columns": "riskppo.envs.features",
    "gbm": "riskppo.envs.market.synthetic",
    "index_range": "riskppo.envs.market.ohlcv",
    "load_dataset": "riskppo.envs.market.datasets",
    "load_ohlcv": "riskppo.envs.market.ohlcv",
    "load_portfolio": "riskppo.envs.portfolio.data",
    "make_portfolio_env": "riskppo.envs.portfolio.factory",
    "make_trading_env": "riskppo.envs.trading.factory",
    "regime_switching": "riskppo.envs.market.synthetic",
    "regime_switching_with_states": "riskppo.envs.market.synthetic",
    "register_envs": "riskppo.envs.registration",
    "split_by_date": "riskppo.envs.market.ohlcv",
    "split_features": "riskppo.envs.features",
    "validate_ohlcv": "riskppo.envs.market.ohlcv",
    "vol_target_scale": "riskppo.envs.execution.sizing",
    "walk_forward": "riskppo.envs.market.ohlcv",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'riskppo.envs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
