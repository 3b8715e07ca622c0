"""Bundled datasets, read from the installed packages that ship them (never copied into this repo).

* ``googl``, ``eurusd``: OHLCV files of the MIT-licensed ``gym-anytrading`` package.
* ``sp500``: daily adjusted closes of 20 large US stocks, 1990-01-02 .. 2022-12-28, from the
  BSD-3-licensed ``skfolio`` package (the file behind ``skfolio.datasets.load_sp500_dataset``,
  which ships inside the package: nothing is downloaded). One column per stock, so each stock is
  a dataset of its own: ``load_dataset("sp500", symbol="AAPL")``, in a config ``data.dataset:
  sp500`` with ``data.symbol: AAPL``. The prices are close-only (no open/high/low/volume), rounded
  to 3 decimals, so early, low-priced bars move in steps (AAPL 1990: 0.264, 0.266, ...).

Each file is located with ``importlib.util.find_spec`` on the top-level package, **without
importing it**: importing ``gym_anytrading`` registers environments in Gymnasium's global registry
and parses both its CSVs; importing ``skfolio`` imports scikit-learn and cvxpy.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from riskppo.config.sections import SP500_SYMBOLS
from riskppo.envs.market.ohlcv import load_ohlcv, validate_ohlcv

__all__ = ["DATASETS", "SP500_SYMBOLS", "DatasetInfo", "dataset_path", "load_dataset"]


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset shipped inside an installed package.

    Attributes:
        package: the importable top-level package (``gym_anytrading``, ``skfolio``).
        distribution: its name on PyPI, for the install hint.
        filename: path of the file inside the package.
        timestamp_format: ``strftime`` format of its time column.
        bars_per_year: bars per year (annualisation; ``env.kwargs.bars_per_year`` default).
        description: one line for listings.
        symbols: the asset columns of a file with one column per asset (one dataset each,
            picked with ``symbol``); empty for a single-asset OHLCV file.
    """

    package: str
    distribution: str
    filename: str
    timestamp_format: str
    bars_per_year: int
    description: str
    symbols: tuple[str, ...] = ()


DATASETS: dict[str, DatasetInfo] = {
    "googl": DatasetInfo(
        "gym_anytrading",
        "gym-anytrading",
        "datasets/data/STOCKS_GOOGL.csv",
        "%Y-%m-%d",
        252,
        "GOOGL daily bars, 2009-05-22 .. 2018-08-29",
    ),
    "eurusd": DatasetInfo(
        "gym_anytrading",
        "gym-anytrading",
        "datasets/data/FOREX_EURUSD_1H_ASK.csv",
        "%d.%m.%Y %H:%M:%S.%f",  # day-first: "01.01.2017 22:00:00.000"
        24 * 5 * 52,  # hourly, 24 h x 5 days a week
        "EURUSD hourly ask bars, 2017-01-01 22:00 .. 2017-12-29 21:00",
    ),
    "sp500": DatasetInfo(
        "skfolio",
        "skfolio",
        "datasets/data/sp500_dataset.csv.gz",
        "%Y-%m-%d",
        252,
        "daily adjusted closes of 20 large US stocks, 1990-01-02 .. 2022-12-28 (close only)",
        SP500_SYMBOLS,
    ),
}


def _info(name: str) -> DatasetInfo:
    key = name.lower() if isinstance(name, str) else name
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {sorted(DATASETS)}")
    return DATASETS[key]


def check_symbol(name: str, symbol: str | None) -> str | None:
    """The canonical (upper-case) ``symbol`` of dataset ``name``; ``None`` for a single-asset one.

    Raises:
        ValueError: a multi-asset dataset without a symbol or with an unknown one (the message
            lists the valid symbols), or a symbol for a single-asset dataset.
    """
    info = _info(name)
    if not info.symbols:
        if symbol is not None:
            raise ValueError(
                f"symbol={symbol!r} applies to the multi-asset datasets "
                f"({', '.join(k for k, v in DATASETS.items() if v.symbols)}), not to {name!r}"
            )
        return None
    valid = ", ".join(info.symbols)
    if symbol is None:
        raise ValueError(f"dataset {name!r} needs a symbol, one of: {valid}")
    if not isinstance(symbol, str) or symbol.upper() not in info.symbols:
        raise ValueError(f"symbol={symbol!r} is not in dataset {name!r}; valid symbols: {valid}")
    return symbol.upper()


def dataset_path(name: str) -> Path:
    """Path of a bundled dataset's file inside its installed package (see the module docstring:
    the package is located, not imported)."""
    info = _info(name)
    spec = importlib.util.find_spec(info.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the bundled dataset {name!r} comes from the {info.distribution!r} package: "
            f"pip install {info.distribution}"
        )
    for base in spec.submodule_search_locations:
        p = Path(base) / info.filename
        if p.is_file():
            return p
    raise FileNotFoundError(f"{info.filename} not found in the installed {info.package} package")


def load_dataset(name: str, symbol: str | None = None) -> pd.DataFrame:
    """Load a bundled dataset as a canonical frame (:func:`~riskppo.envs.market.ohlcv.load_ohlcv`).

    Args:
        name: ``"googl"`` (daily OHLCV), ``"eurusd"`` (hourly OHLCV) or ``"sp500"`` (daily
            closes; close-only frame).
        symbol: the stock of ``"sp500"`` (one of :data:`SP500_SYMBOLS`, any case); must be
            ``None`` for the others.

    The bars per year of each dataset are in ``DATASETS[name].bars_per_year``.
    """
    info = _info(name)
    sym = check_symbol(name, symbol)
    path = dataset_path(name)
    if sym is None:
        return load_ohlcv(path, timestamp_format=info.timestamp_format)
    wide = pd.read_csv(path, usecols=["Date", sym], dtype=str)
    return validate_ohlcv(wide.rename(columns={sym: "close"}), source=f"{path} [{sym}]")
