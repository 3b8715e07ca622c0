"""Registered features (``riskppo.envs.features.register``): usable by name once registered,
refused in one line when they look ahead or return anything but one float per row."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest

from riskppo.envs import TradingEnv, compute_features, gbm, regime_switching
from riskppo.envs.features import (
    feature_lookback,
    register,
    registered_features,
    split_features,
    unregister,
)


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    before = set(registered_features())
    yield
    for name in set(registered_features()) - before:
        unregister(name)


def sma_gap(df: pd.DataFrame) -> np.ndarray:
    """log(close / mean of the last 20 closes): causal, complete from row 19."""
    close = df["close"]
    return np.log(close / close.rolling(20).mean()).to_numpy()


def test_a_causal_feature_is_accepted_and_computed_by_name() -> None:
    assert register("sma_gap", sma_gap, lookback=19) is sma_gap
    df = regime_switching(300, seed=2)
    fm = compute_features(df, ["ret_1", "sma_gap"])
    assert fm.names == ("ret_1", "sma_gap") and fm.warmup == 19 == feature_lookback("sma_gap")
    np.testing.assert_allclose(fm.values[:, 1], sma_gap(df).astype(np.float32))
    assert np.isnan(fm.values[18, 1]) and np.isfinite(fm.values[19:]).all()


def test_register_as_a_decorator_and_in_the_env() -> None:
    @register("range_z", lookback=9, columns=("high", "low"))
    def range_z(df: pd.DataFrame) -> pd.Series:
        hl = np.log(df["high"] / df["low"])
        return (hl - hl.rolling(10).mean()) / hl.rolling(10).std()

    env = TradingEnv(gbm(200, seed=1), features=["ret_1", "range_z"], random_start=False)
    assert env.feature_names == ("ret_1", "range_z") and env.first_valid_index == 9
    obs, _ = env.reset()
    assert np.isfinite(obs).all()
    # close-only data leaves it out like hl_range (it reads high and low)
    assert split_features(["ret_1", "range_z"], ["close"]) == (
        ("ret_1",),
        {"range_z": ("high", "low")},
    )


def fwd_ret(df: pd.DataFrame) -> np.ndarray:
    return np.log(df["close"].shift(-1) / df["close"]).fillna(0.0).to_numpy()


def whole_series_z(df: pd.DataFrame) -> np.ndarray:
    c = df["close"]
    return ((c - c.mean()) / c.std()).to_numpy()


def centred_mean(df: pd.DataFrame) -> np.ndarray:
    return df["close"].rolling(5, center=True, min_periods=1).mean().to_numpy()


@pytest.mark.parametrize("fn", [fwd_ret, whole_series_z, centred_mean])
def test_a_feature_that_looks_ahead_is_refused_in_one_line(fn) -> None:
    with pytest.raises(ValueError, match=r"^feature 'peek' looks ahead: its value at row (\d+) "
                       r"changes when rows after \1 change$"):  # fmt: skip
        register("peek", fn)
    assert "peek" not in registered_features()


def test_a_late_look_ahead_is_found_too() -> None:
    """Only the last bar of the frame is read early: the last cut (n - 2) catches it."""

    def last_bar_leak(df: pd.DataFrame) -> np.ndarray:
        out = np.zeros(len(df))
        out[-2] = df["close"].iloc[-1]
        return out

    with pytest.raises(ValueError, match="looks ahead: its value at row 598 changes when rows "
                       "after 598 change"):  # fmt: skip
        register("leak", last_bar_leak)


@pytest.mark.parametrize(
    ("fn", "kwargs", "message"),
    [
        (lambda d: d["close"].to_numpy()[1:], {}, r"returned shape \(599,\) for a frame of 600 "
         "rows; it must return one float per row"),
        (lambda d: np.arange(len(d)), {}, "returned int64 values; it must return floats"),
        (lambda d: list(d["close"]), {}, "returned a list; it must return a float array"),
        (lambda d: d["close"].pct_change().to_numpy(), {}, r"is nan at row 0 of a synthetic "
         "frame, after its lookback=0; raise lookback"),
        (lambda d: d["sentiment"].to_numpy(), {}, r"fails on a synthetic OHLCV frame \(KeyError: "
         "'sentiment'\\); declare the columns it reads in columns="),
        (sma_gap, {"lookback": -1}, "lookback=-1 must be an int >= 0"),
        (sma_gap, {"columns": "high"}, "columns='high' must be a list of column names"),
        ("not callable", {}, "fn must be a function of the frame"),
    ],
)  # fmt: skip
def test_each_bad_feature_is_one_line(fn, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message) as info:
        register("bad", fn, **kwargs)
    assert str(info.value).startswith("feature 'bad'") and "\n" not in str(info.value)
    assert "bad" not in registered_features()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ret_5", "feature name 'ret_5' is a built-in feature's; choose another"),
        ("macd_8_24", "is a built-in feature's"),
        ("hl_range", "is a built-in feature's"),
        ("2fast", "letters, digits, '_' and '.', not first a digit"),
        ("has space", "letters, digits"),
    ],
)
def test_bad_names(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        register(name, sma_gap, lookback=19)


def test_a_name_is_replaced_only_when_asked() -> None:
    register("gap", sma_gap, lookback=19)
    with pytest.raises(ValueError, match="feature 'gap' is registered already; pass replace=True"):
        register("gap", sma_gap, lookback=19)
    register("gap", lambda d: np.log(d["close"]).diff().to_numpy(), lookback=1, replace=True)
    assert feature_lookback("gap") == 1
    with pytest.raises(ValueError, match="looks ahead"):  # a refused replacement keeps the old one
        register("gap", fwd_ret, replace=True)
    assert feature_lookback("gap") == 1


def test_unknown_names_list_the_registered_ones() -> None:
    register("gap", sma_gap, lookback=19)
    with pytest.raises(ValueError, match=r"unknown feature 'gpa'.*registered: gap"):
        compute_features(gbm(50), ["gpa"])


def test_a_feature_of_a_signal_column() -> None:
    """A feature may read a signal column (declared in ``columns``); the check runs it on a
    synthetic stand-in column, and look-ahead in it is refused too."""

    @register("sent_chg", lookback=1, columns=["sentiment"])
    def sent_chg(df: pd.DataFrame) -> np.ndarray:
        return df["sentiment"].diff().to_numpy()

    with pytest.raises(ValueError, match="'sent_next' looks ahead"):
        register("sent_next", lambda d: d["sentiment"].shift(-1).fillna(0).to_numpy(),
                 columns=["sentiment"])  # fmt: skip
    df = gbm(100, seed=4)
    df["sentiment"] = np.arange(100.0)
    fm = compute_features(df, ["sent_chg"], signals=["sentiment"])
    assert fm.names == ("sent_chg", "sentiment")
    assert (fm.values[1:, 0] == 1.0).all()
    with pytest.raises(ValueError, match="feature 'sent_chg' reads column 'sentiment', which the "
                       "data lacks"):  # fmt: skip
        compute_features(gbm(100), ["sent_chg"])


def test_the_function_cannot_change_the_env_frame() -> None:
    def mutating(df: pd.DataFrame) -> np.ndarray:
        out = np.log(df["close"]).diff().to_numpy()
        df["close"] = 1.0
        return out

    register("mutating", mutating, lookback=1)
    df = gbm(100, seed=1)
    before = df.copy()
    compute_features(df, ["mutating"])
    pd.testing.assert_frame_equal(df, before)
