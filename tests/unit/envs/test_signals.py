"""A user's own numeric columns (``signals``) as observations: read from CSV, Parquet and a
DataFrame, through the same NaN policy as the prices, one line per bad input, and observed at
the bar whose close they belong to (not one bar early or late)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.config import Config, ConfigError, apply_overrides
from riskppo.envs import DataError, TradingEnv, load_ohlcv, make_trading_env, validate_ohlcv
from riskppo.envs.kwargs_check import check_env_kwargs
from riskppo.envs.registration import TRADING_ID


def prices(n: int = 400, seed: int = 3) -> pd.DataFrame:
    """``n`` business days of a random walk as a user writes them: a ``Date`` column, OHLCV, and
    two extra columns: ``idx`` (the bar's position) and ``sentiment``."""
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, n)))
    return pd.DataFrame(
        {
            "Date": pd.date_range("2019-01-01", periods=n, freq="B").strftime("%Y-%m-%d"),
            "Open": close,
            "High": close * 1.01,
            "Low": close * 0.99,
            "Close": close,
            "Volume": 1000.0,
            "idx": np.arange(n, dtype=float),
            "sentiment": rng.normal(0.0, 1.0, n),
        }
    )


def write(df: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("kind", ["csv", "parquet", "frame"])
def test_signal_columns_are_read_after_the_prices(tmp_path: Path, kind: str) -> None:
    raw = prices()
    if kind == "frame":
        got = validate_ohlcv(raw, signals=["sentiment", "idx"])
    else:
        got = load_ohlcv(write(raw, tmp_path / f"p.{kind}"), signals=["sentiment", "idx"])
    assert list(got.columns) == ["open", "high", "low", "close", "volume", "sentiment", "idx"]
    np.testing.assert_array_equal(got["sentiment"].to_numpy(), raw["sentiment"].to_numpy())
    np.testing.assert_array_equal(got["idx"].to_numpy(), np.arange(len(raw)))
    assert got["idx"].dtype == np.float64


def test_without_signals_extra_columns_are_still_dropped(tmp_path: Path) -> None:
    got = load_ohlcv(write(prices(), tmp_path / "p.csv"))
    assert list(got.columns) == ["open", "high", "low", "close", "volume"]


def test_sorted_rows_keep_each_signal_on_its_bar(tmp_path: Path) -> None:
    raw = prices(50)
    shuffled = raw.iloc[np.random.default_rng(0).permutation(len(raw))]
    got = load_ohlcv(write(shuffled, tmp_path / "p.csv"), signals=["idx"], sort=True)
    np.testing.assert_array_equal(got["idx"].to_numpy(), np.arange(len(raw)))


# ----------------------------------------------------------------------------- the NaN policy


def test_a_missing_signal_value_raises_like_a_missing_price(tmp_path: Path) -> None:
    raw = prices(50)
    raw.loc[10, "sentiment"] = np.nan
    path = write(raw, tmp_path / "p.csv")
    with pytest.raises(DataError, match=r"data row 11 .*NaN in column 'sentiment'.*nan_policy="):
        load_ohlcv(path, signals=["sentiment"])


def test_ffill_fills_a_signal_from_its_previous_bar(tmp_path: Path) -> None:
    raw = prices(50)
    raw.loc[10:11, "sentiment"] = np.nan
    path = write(raw, tmp_path / "p.csv")
    got = load_ohlcv(path, signals=["sentiment"], nan_policy="ffill")["sentiment"].to_numpy()
    assert got[10] == got[11] == raw.loc[9, "sentiment"]
    np.testing.assert_array_equal(got[12:], raw["sentiment"].to_numpy()[12:])
    with pytest.raises(DataError, match=r"'sentiment'.*longer than the forward-fill limit of 1"):
        load_ohlcv(path, signals=["sentiment"], nan_policy="ffill", ffill_limit=1)


def test_ffill_cannot_fill_a_signal_that_starts_missing(tmp_path: Path) -> None:
    raw = prices(50)
    raw.loc[0, "sentiment"] = np.nan
    path = write(raw, tmp_path / "p.csv")
    with pytest.raises(DataError, match=r"'sentiment'.*the first row has no earlier value"):
        load_ohlcv(path, signals=["sentiment"], nan_policy="ffill")


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("change", "signals", "message"),
    [
        (None, ["sentimnt"], r"p\.csv: signal column 'sentimnt' is not among its columns "
         r"\(Date, Open, .*sentiment\); did you mean 'sentiment'\?$"),
        ("text", ["sentiment"], r"p\.csv: data row 3 .*non-numeric value 'high' in column "
         "'sentiment'"),
        ("empty", ["sentiment"], r"p\.csv: signal column 'sentiment' has no value: every cell "
         "is missing"),
        ("inf", ["sentiment"], r"p\.csv: data row 5: signal column 'sentiment' holds an "
         r"infinite value \(inf\)"),
        (None, ["Close"], r"p\.csv: signal column 'Close' is read as the close; signals are "
         "the other numeric columns"),
        (None, ["Date"], "signal column 'Date' is read as the timestamp"),
    ],
)  # fmt: skip
def test_each_bad_signal_column_is_one_line_naming_column_and_file(
    tmp_path: Path, change: str | None, signals: list[str], message: str
) -> None:
    raw = prices(20)
    if change == "text":
        raw["sentiment"] = raw["sentiment"].astype(object)
        raw.loc[2, "sentiment"] = "high"
    elif change == "empty":
        raw["sentiment"] = np.nan
    elif change == "inf":
        raw.loc[4, "sentiment"] = np.inf
    path = write(raw, tmp_path / "p.csv")
    with pytest.raises(DataError, match=message) as info:
        load_ohlcv(path, signals=signals, nan_policy="ffill")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("signals", "message"),
    [
        ("sentiment", r"must be a list of column names, e.g. \[sentiment\]"),
        (["idx", "idx"], "column 'idx' is named twice"),
        ([""], "is not a column name"),
    ],
)
def test_bad_signal_lists(signals: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_ohlcv(prices(20), signals=signals)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=f"data.signals.*{message}"):
        Config.build({"data": {"signals": signals}})


def test_data_signals_from_the_command_line_words() -> None:
    cfg = apply_overrides(Config(), ["data.signals=[my_forecast, sentiment]"])
    assert cfg.data.signals == ("my_forecast", "sentiment")
    assert Config().data.signals == ()  # bundled configs: no signals


def test_a_bundled_dataset_has_no_signal_columns() -> None:
    with pytest.raises(ConfigError, match=r"data.signals=\['x'\]: the bundled dataset GOOGL has "
                       "no columns of yours; point data.path at your file"):  # fmt: skip
        make_trading_env(dataset="googl", signals=["x"])


def test_env_kwargs_signals_points_at_data_signals() -> None:
    with pytest.raises(ConfigError, match=r"env\.kwargs\.signals: set data\.signals instead"):
        check_env_kwargs(TRADING_ID, {"signals": ["x"]})


def test_a_signal_beyond_the_observation_bound_is_refused_not_clipped() -> None:
    raw = prices(100)
    raw.loc[50, "sentiment"] = 5e7
    with pytest.raises(ValueError, match=r"signal column 'sentiment' reaches 5e\+07, beyond"):
        TradingEnv(raw, signals=["sentiment"], features=["ret_1"])


# ----------------------------------------------------------------------------- observations


@pytest.mark.parametrize("window", [1, 3])
def test_a_signal_is_observed_at_the_decision_of_its_own_bar(window: int) -> None:
    """``idx`` equals the bar's position: the observation of the decision at bar t (whose bar
    the info names) holds idx = t in its newest slot, and t - lag in older ones."""
    env = TradingEnv(
        prices(), signals=["idx"], features=["ret_1"], window=window, random_start=False
    )
    names = env.observation_names
    slots = {lag: names.index(f"idx[t-{lag}]" if lag else "idx[t]") for lag in range(window)}
    obs, info = env.reset()
    seen = 0
    while True:
        t = info["bar"]
        for lag, j in slots.items():
            assert obs[j] == t - lag, (t, lag)
        seen += 1
        obs, _, terminated, truncated, info = env.step(1)
        if terminated or truncated:
            break
    assert seen == env.max_episode_steps
    assert env.feature_names == ("ret_1", "idx")


def test_signals_through_the_factory_on_the_test_part(tmp_path: Path) -> None:
    path = write(prices(), tmp_path / "p.csv")
    env = make_trading_env(path=str(path), part="test", signals=["idx", "sentiment"])
    assert env.feature_names[-2:] == ("idx", "sentiment")
    assert env.observation_names[-4:-1] == ["hl_range[t]", "idx[t]", "sentiment[t]"]
    obs, info = env.reset()
    assert obs[env.observation_names.index("idx[t]")] == info["bar"] == env.trading_range[0]
    np.testing.assert_array_equal(env.feature_matrix.values[:, -2], np.arange(len(env.df)))


def test_a_dataframe_through_the_factory(tmp_path: Path) -> None:
    raw = prices().set_index(pd.DatetimeIndex(prices()["Date"])).drop(columns="Date")
    env = make_trading_env(frame=raw, signals=["sentiment"], part="val")
    assert env.data_label == "<DataFrame>" and env.feature_names[-1] == "sentiment"
    lo, hi = env.trading_range
    np.testing.assert_array_equal(
        env.feature_matrix.values[lo : hi + 1, -1],
        raw["sentiment"].to_numpy(np.float32)[lo : hi + 1],
    )
