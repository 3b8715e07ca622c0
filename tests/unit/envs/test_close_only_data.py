"""Close-only price data (a date and a close) as a first-class input, and the bundled sp500
stocks: loading, missing values, features left out with one line, unchanged OHLCV results."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.config import Config, ConfigError, apply_overrides
from riskppo.envs import (
    DataError,
    TradingEnv,
    dataset_path,
    gbm,
    load_dataset,
    load_ohlcv,
    split_features,
    validate_ohlcv,
)
from riskppo.envs.registration import resolve_overlay
from riskppo.envs.trading.factory import make_trading_env

ROOT = Path(__file__).parents[3]
DEFAULT = Config.from_yaml(ROOT / "riskppo/configs/trading_googl.yaml")
CLOSE_FEATURES = ["ret_1", "vol_20", "rsi_14"]


def close_series(n: int = 400, seed: int = 0) -> pd.Series:
    df = gbm(n, seed=seed)
    return df["close"].rename_axis("date")


def left_out_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]


# ----------------------------------------------------------------------------- loading


def test_close_only_csv_loads_as_a_close_only_frame(tmp_path: Path) -> None:
    src = close_series()
    path = tmp_path / "c.csv"
    src.rename("Close").to_csv(path)
    df = load_ohlcv(path)
    assert list(df.columns) == ["close"] and df.index.name == "timestamp"
    np.testing.assert_array_equal(df["close"].to_numpy(), src.to_numpy())
    # the same close through each fallback name, and an in-memory frame
    for name in ("Adj Close", "adj_close", "Price", "value"):
        src.rename(name).to_csv(path)
        pd.testing.assert_frame_equal(load_ohlcv(path), df)
    frame = src.rename("Adj Close").to_frame().rename_axis(None)
    frame.index = pd.DatetimeIndex(frame.index)
    pd.testing.assert_frame_equal(validate_ohlcv(frame), df, check_freq=False)


def test_close_only_parquet_with_a_datetime_index(tmp_path: Path) -> None:
    src = close_series()
    path = tmp_path / "c.parquet"
    src.rename("price").to_frame().to_parquet(path)
    df = load_ohlcv(path)
    assert list(df.columns) == ["close"]
    np.testing.assert_array_equal(df["close"].to_numpy(), src.to_numpy())


@pytest.mark.parametrize(
    ("header", "missing"), [("DATE,SP500", "."), ("observation_date,SP500", "")]
)
def test_fred_export_dots_and_empty_cells_are_missing_values(
    tmp_path: Path, header: str, missing: str
) -> None:
    """FRED CSVs: a date column and one series column; holidays are '.' (older exports) or
    empty (newer ones, with an observation_date column)."""
    rows = ["2020-01-01,3230.78", f"2020-01-02,{missing}", "2020-01-03,3234.85", "2020-01-06,3246"]
    path = tmp_path / "fred.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    with pytest.raises(DataError, match=r"data row 2 .*NaN in column 'close'.*nan_policy="):
        load_ohlcv(path)
    df = load_ohlcv(path, nan_policy="ffill", ffill_limit=1)
    assert list(df.columns) == ["close"]
    assert df["close"].tolist() == [3230.78, 3230.78, 3234.85, 3246.0]


def test_fred_column_with_text_is_refused_naming_row(tmp_path: Path) -> None:
    path = tmp_path / "fred.csv"
    path.write_text("DATE,SP500\n2020-01-01,3230.78\n2020-01-02,abc\n")
    with pytest.raises(DataError, match=r"data row 2 .*non-numeric value 'abc'"):
        load_ohlcv(path)


def test_partial_columns_are_checked_where_present(tmp_path: Path) -> None:
    """Without an open, high/low are checked against the close; without volume the frame has
    no volume column (not a column of zeros)."""
    path = tmp_path / "hlc.csv"
    path.write_text("date,high,low,close\n2020-01-01,11,9,10\n2020-01-02,10.5,9,11\n")
    with pytest.raises(DataError, match=r"data row 2 .*high < close \(high=10.5, low=9.0"):
        load_ohlcv(path)
    path.write_text("date,high,low,close\n2020-01-01,11,9,10\n2020-01-02,11.5,9,11\n")
    assert list(load_ohlcv(path).columns) == ["high", "low", "close"]


def test_a_close_column_wins_over_the_fallbacks(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("date,close,price\n2020-01-01,10,99\n2020-01-02,11,98\n")
    assert load_ohlcv(path)["close"].tolist() == [10.0, 11.0]


# ----------------------------------------------------------------------------- features


def test_split_features_names_the_missing_columns() -> None:
    kept, left = split_features(["ret_1", "hl_range", "volz_20", "vret_5"], ["close"])
    assert kept == ("ret_1", "vret_5")
    assert left == {"hl_range": ("high", "low"), "volz_20": ("volume",)}
    kept, left = split_features(["hl_range", "volz_20"], ["high", "low", "close"])
    assert kept == ("hl_range",) and left == {"volz_20": ("volume",)}


def test_close_only_env_leaves_features_out_with_one_line_per_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "one_line.csv"
    close_series(900).rename("close").to_csv(path)
    kwargs = resolve_overlay(DEFAULT.env.kwargs, DEFAULT.risk)  # the overlay's limit: risk.*
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        envs = [
            make_trading_env(dataset=None, path=str(path), part=part, **kwargs)
            for part in ("train", "train", "val", "test")
        ]
    assert left_out_lines(caplog) == [
        "close-only data (one_line.csv): features hl_range left out (need high/low)"
    ]
    names = [f for f in kwargs["features"] if f != "hl_range"]
    assert all(env.feature_names == tuple(names) for env in envs)
    assert envs[0].observation_space.shape == (len(names) + 1,)


def test_no_feature_left_is_an_error_naming_the_data() -> None:
    df = close_series().to_frame("close")
    with pytest.raises(ValueError, match=r"close-only data \(<DataFrame>\).*no feature is left"):
        TradingEnv(df, features=["hl_range"])


def test_close_features_are_the_same_with_or_without_ohlv(caplog) -> None:
    """The close-based observation columns of an OHLCV frame equal those of its close alone."""
    full = gbm(500, seed=4)
    features = ["ret_1", "vol_20", "hl_range", "volz_20", "macd_8_24"]
    a = TradingEnv(full, features=features, random_start=False, fill="next_close")
    b = TradingEnv(full[["close"]], features=features, random_start=False)
    assert b.feature_names == ("ret_1", "vol_20", "macd_8_24")
    keep = [a.feature_names.index(f) for f in b.feature_names]
    np.testing.assert_array_equal(a._features[:, keep], b._features)
    # without opens the default fill is the next close: the same returns as OHLCV data there
    assert b.fill == "next_close"
    assert TradingEnv(full, features=features, random_start=False).fill == "next_open"
    assert (a._ret_old, a._ret_new) == (b._ret_old, b._ret_new)


# the default config's features when the digest below was recorded (they are fewer now)
TWELVE = ["vret_1", "vret_5", "vret_20", "vret_60", "vret_250", "macd_8_24", "macd_16_48",
          "macd_32_96", "rsi_14", "ewmvol_20", "ewmvol_60", "hl_range"]  # fmt: skip


def test_ohlcv_observations_are_unchanged() -> None:
    """The GOOGL observation table of the default config of the time (its twelve features), bit
    for bit as before close-only input (sha256 recorded at ea9a290, the commit before it)."""
    kwargs = {**DEFAULT.env.kwargs, "features": TWELVE}
    env = make_trading_env(dataset="googl", part="train", **resolve_overlay(kwargs, DEFAULT.risk))
    digest = hashlib.sha256(np.ascontiguousarray(env._table).tobytes()).hexdigest()
    assert env._table.shape == (2335, 13)
    assert digest == "2194797b97e5e8a424f114c43b91d0c61910e94415b49d56084816a3587498f7"


# ----------------------------------------------------------------------------- sp500 (skfolio)


def test_sp500_stock_loads_from_the_installed_skfolio_file() -> None:
    df = load_dataset("sp500", symbol="aapl")
    assert list(df.columns) == ["close"] and len(df) == 8313
    assert df.index[0] == pd.Timestamp("1990-01-02") and df.index[-1] == pd.Timestamp("2022-12-28")
    assert df["close"].iloc[0] == 0.264  # skfolio's docstring example
    path = dataset_path("sp500")
    assert path.name == "sp500_dataset.csv.gz" and "skfolio" in path.parts
    # never copied into the repository (its own folders: a virtual environment inside the
    # checkout, as the README and CI make, holds skfolio's copy)
    for folder in ("riskppo", "tests", "benchmarks", "docs"):
        assert not any((ROOT / folder).rglob("sp500_dataset*"))


@pytest.mark.parametrize(
    ("name", "symbol", "match"),
    [
        ("sp500", None, r"needs a symbol, one of: AAPL, AMD, .*, XOM$"),
        ("sp500", "GOOGL", r"symbol='GOOGL' is not in dataset 'sp500'; valid symbols: AAPL"),
        ("googl", "AAPL", r"symbol='AAPL' applies to the multi-asset datasets \(sp500\)"),
    ],
)
def test_sp500_symbol_errors(name: str, symbol: str | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_dataset(name, symbol=symbol)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["data.dataset=sp500"], r"data\.symbol: required with data\.dataset=sp500: one of AAPL"),
        (["data.dataset=sp500", "data.symbol=IBM"], r"data\.symbol: not a stock of .*XOM"),
        (["data.symbol=AAPL"], r"data\.symbol: applies to data\.dataset=sp500 only, not 'googl'"),
    ],
)
def test_sp500_config_validation(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        apply_overrides(DEFAULT, overrides)


def test_sp500_config_reaches_the_env_and_labels(caplog) -> None:
    from riskppo.cli.main import default_run_dir
    from riskppo.envs.registration import data_kwargs
    from riskppo.evaluation.summary import run_label

    cfg = apply_overrides(DEFAULT, ["data.dataset=sp500", "data.symbol=msft"])
    assert cfg.data.symbol == "MSFT"
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        env = make_trading_env(
            **data_kwargs(cfg.data), part="test", **resolve_overlay(cfg.env.kwargs, cfg.risk)
        )
    assert env.bars_per_year == 252 and env.data_label == "MSFT"
    np.testing.assert_array_equal(env.df["close"], load_dataset("sp500", "MSFT")["close"])
    assert left_out_lines(caplog) == [
        "close-only data (MSFT): features hl_range left out (need high/low)"
    ]
    assert run_label(cfg) == "riskppo/Trading-v0 on MSFT"
    assert default_run_dir(cfg).name.endswith("-riskppo_Trading-v0-sp500_MSFT-s0")
