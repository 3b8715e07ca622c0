"""Trading environments and market data (R-TRADE): loaders, synthetic data, features, TradingEnv."""

from __future__ import annotations

from riskppo.envs.data import (
    DATASETS,
    OHLCV_COLUMNS,
    DataError,
    DatasetInfo,
    Fold,
    Split,
    dataset_path,
    default_split,
    index_range,
    load_dataset,
    load_ohlcv,
    split_by_date,
    validate_ohlcv,
    walk_forward,
)
from riskppo.envs.features import DEFAULT_FEATURES, FeatureMatrix, compute_features
from riskppo.envs.synthetic import (
    DEFAULT_REGIMES,
    DEFAULT_TRANSITIONS,
    Regime,
    gbm,
    regime_switching,
    regime_switching_with_states,
)
from riskppo.envs.trading import TradingEnv

__all__ = [
    "DATASETS",
    "DEFAULT_FEATURES",
    "DEFAULT_REGIMES",
    "DEFAULT_TRANSITIONS",
    "OHLCV_COLUMNS",
    "DataError",
    "DatasetInfo",
    "FeatureMatrix",
    "Fold",
    "Regime",
    "Split",
    "TradingEnv",
    "compute_features",
    "dataset_path",
    "default_split",
    "gbm",
    "index_range",
    "load_dataset",
    "load_ohlcv",
    "regime_switching",
    "regime_switching_with_states",
    "split_by_date",
    "validate_ohlcv",
    "walk_forward",
]
