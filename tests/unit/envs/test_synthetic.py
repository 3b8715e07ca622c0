"""R-TRADE-1: seeded synthetic OHLCV generators."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from riskppo.envs import (
    Regime,
    gbm,
    regime_switching,
    regime_switching_with_states,
    validate_ohlcv,
)


def excess_kurtosis(x: np.ndarray) -> float:
    z = (x - x.mean()) / x.std()
    return float((z**4).mean() - 3.0)


def log_returns(df: pd.DataFrame) -> np.ndarray:
    return np.diff(np.log(df["close"].to_numpy()))


@pytest.mark.parametrize("gen", [gbm, regime_switching])
def test_same_seed_same_frame_different_seed_different(gen):
    a, b, c = gen(500, seed=7), gen(500, seed=7), gen(500, seed=8)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["close"], c["close"])


@pytest.mark.parametrize("gen", [gbm, regime_switching])
def test_frames_are_canonical_and_valid(gen):
    df = gen(2000, seed=0)
    assert list(df.columns) == ["open", "high", "low", "close", "volume"]
    assert isinstance(df.index, pd.DatetimeIndex) and df.index.name == "timestamp"
    assert (df.index.day_of_week < 5).all()  # business days by default
    pd.testing.assert_frame_equal(validate_ohlcv(df), df, check_freq=False)
    assert df.index.dtype == "datetime64[ns]"
    assert (df["high"] >= df[["open", "close"]].max(axis=1)).all()
    assert (df["low"] <= df[["open", "close"]].min(axis=1)).all()


def test_hourly_index():
    df = gbm(48, seed=0, freq="h", start="2017-01-01")
    assert (np.diff(df.index.asi8) == 3600 * 10**9).all()
    with pytest.raises(ValueError, match="bars_per_year"):
        gbm(10, freq="7min")
    assert len(gbm(10, freq="7min", bars_per_year=1000)) == 10


def test_no_global_rng_use():
    np.random.seed(123)
    state = np.random.get_state()[1].copy()
    gbm(100, seed=1)
    regime_switching(100, seed=1)
    assert (np.random.get_state()[1] == state).all()


def test_gbm_moments_match_parameters():
    mu, sigma = 0.1, 0.3
    r = log_returns(gbm(200_000, mu=mu, sigma=sigma, seed=3, freq="h", bars_per_year=252))
    dt = 1 / 252
    assert r.std() == pytest.approx(sigma * np.sqrt(dt), rel=0.01)
    assert r.mean() == pytest.approx((mu - sigma**2 / 2) * dt, abs=4 * sigma * np.sqrt(dt / len(r)))
    assert abs(excess_kurtosis(r)) < 0.1


def test_regime_switching_has_fatter_tails_than_gbm():
    for seed in range(3):
        k_rs = excess_kurtosis(log_returns(regime_switching(5000, seed=seed)))
        k_gbm = excess_kurtosis(log_returns(gbm(5000, seed=seed)))
        assert k_rs > 2.0 > 0.5 > k_gbm


def test_regime_path_follows_the_chain():
    regimes = (Regime("calm", 0.0, 0.1), Regime("wild", 0.0, 0.8))
    df, states = regime_switching_with_states(
        20_000, seed=0, regimes=regimes, transitions=((0.99, 0.01), (0.05, 0.95)), jump_rate=0.0
    )
    assert set(np.unique(states)) == {0, 1}
    # stationary share of "wild" = 0.01 / (0.01 + 0.05)
    assert states.mean() == pytest.approx(1 / 6, abs=0.05)
    r = log_returns(df)
    s = states[1:]
    assert r[s == 1].std() > 5 * r[s == 0].std()


def test_invalid_parameters():
    with pytest.raises(ValueError, match="rows summing to 1"):
        regime_switching(10, transitions=((0.5, 0.4, 0.0), (0, 1, 0), (0, 0, 1)))
    with pytest.raises(ValueError, match="3x3"):
        regime_switching(10, transitions=((1.0,),))
    with pytest.raises(ValueError, match="s0"):
        gbm(10, s0=0)
    with pytest.raises(ValueError, match="positive int"):
        gbm(0)
    with pytest.raises(ValueError, match="higher freq"):
        gbm(200_000)
