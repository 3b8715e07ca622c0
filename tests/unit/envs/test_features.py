"""R-TRADE-2: the trading features (vret_k, macd_f_s, ewmvol_k, TRADING_FEATURES) against slow
plain-loop references; causality, look-back and use in TradingEnv."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from riskppo.envs import (
    DEFAULT_FEATURES,
    TRADING_FEATURES,
    TradingEnv,
    compute_features,
    load_dataset,
    make_trading_env,
    regime_switching,
)
from riskppo.envs.causality import perturb_after
from riskppo.envs.features import feature_lookback

NAN = math.nan
NEW_FEATURES = (
    "vret_1",
    "vret_7",
    "vret_60",
    "vret_250",
    "ewmvol_2",
    "ewmvol_20",
    "ewmvol_60",
    "macd_1_2",
    "macd_8_24",
    "macd_16_48",
    "macd_32_96",
    "macd_70_200",
)
EXPECTED_LOOKBACK = {
    "vret_1": 60,
    "vret_7": 60,
    "vret_60": 60,
    "vret_250": 250,
    "ewmvol_2": 2,
    "ewmvol_20": 20,
    "ewmvol_60": 60,
    "macd_1_2": 62 + 251,
    "macd_8_24": 62 + 251,
    "macd_16_48": 62 + 251,
    "macd_32_96": 95 + 251,
    "macd_70_200": 199 + 251,
}


@pytest.fixture(scope="module")
def synth() -> pd.DataFrame:
    return regime_switching(900, seed=5)


@pytest.fixture(scope="module")
def googl() -> pd.DataFrame:
    return load_dataset("googl")


# ----------------------------------------------------------------------------- slow references


def ref_std(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def ref_ewmvol(c: list[float], span: int) -> list[float]:
    w = 1.0 - 2.0 / (span + 1)
    s = n = 0.0
    out = [NAN]
    for t in range(1, len(c)):
        r = math.log(c[t] / c[t - 1])
        s, n = w * s + r * r, w * n + 1.0
        out.append(math.sqrt(s / n) if t >= span else NAN)
    return out


def ref_vret(c: list[float], k: int) -> list[float]:
    sigma = ref_ewmvol(c, 60)
    out = []
    for t in range(len(c)):
        if t < max(k, 60):
            out.append(NAN)
        elif sigma[t] == 0.0:
            out.append(0.0)
        else:
            out.append(math.log(c[t] / c[t - k]) / (sigma[t] * math.sqrt(k)))
    return out


def ref_ema(c: list[float], n: int) -> list[float]:
    w = 1.0 - 1.0 / n
    s = norm = 0.0
    out = []
    for x in c:
        s, norm = w * s + x, w * norm + 1.0
        out.append(s / norm)
    return out


def ref_macd(c: list[float], f: int, s: int) -> list[float]:
    fast, slow = ref_ema(c, f), ref_ema(c, s)
    first_q = max(s - 1, 62)
    q = [NAN] * len(c)
    for t in range(first_q, len(c)):
        window = c[t - 62 : t + 1]
        sd = ref_std(window)
        q[t] = 0.0 if sd <= 1e-12 * abs(sum(window) / 63) else (fast[t] - slow[t]) / sd
    out = [NAN] * len(c)
    for t in range(first_q + 251, len(c)):
        window = q[t - 251 : t + 1]
        sd = ref_std(window)
        flat = sd <= 1e-12 * max(abs(sum(window) / 252), 1.0)
        out[t] = 0.0 if flat else q[t] / sd
    return out


def reference(name: str, c: list[float]) -> list[float]:
    kind, *p = name.split("_")
    if kind == "vret":
        return ref_vret(c, int(p[0]))
    if kind == "ewmvol":
        return ref_ewmvol(c, int(p[0]))
    return ref_macd(c, int(p[0]), int(p[1]))


def flat_frame(n: int) -> pd.DataFrame:
    idx = pd.date_range("2020-01-01", periods=n, freq="B", name="timestamp")
    c = np.full(n, 3.0)
    return pd.DataFrame(
        {"open": c, "high": c * 1.01, "low": c * 0.99, "close": c, "volume": np.full(n, 5.0)},
        index=idx,
    )


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize("name", NEW_FEATURES)
def test_feature_matches_slow_reference(synth, name):
    close = synth["close"].tolist()
    got = compute_features(synth, (name,)).values[:, 0]
    ref = np.array(reference(name, close))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-9)
    assert np.abs(ref[~np.isnan(ref)]).max() > 0  # not trivially zero


@pytest.mark.parametrize("name", NEW_FEATURES)
def test_lookback_is_the_first_complete_row(synth, name):
    fm = compute_features(synth, (name,))
    lookback = feature_lookback(name)
    assert lookback == EXPECTED_LOOKBACK[name] == fm.warmup
    assert np.isnan(fm.values[:lookback]).all()
    assert np.isfinite(fm.values[lookback:]).all()


def test_flat_prices_give_zero_not_nan():
    df = flat_frame(500)
    names = ("vret_5", "macd_8_24", "macd_32_96", "ewmvol_20")
    fm = compute_features(df, names)
    assert (fm.values[fm.warmup :] == 0.0).all()


@pytest.mark.parametrize("name", ["macd_24_8", "macd_8_8", "macd_0_5", "macd_8", "ewmvol_1"])
def test_invalid_names(name):
    with pytest.raises(ValueError, match=name):
        feature_lookback(name)


def test_default_features_unchanged():
    assert DEFAULT_FEATURES == (
        "ret_1",
        "ret_5",
        "ret_20",
        "vol_20",
        "zscore_20",
        "rsi_14",
        "volz_20",
        "hl_range",
    )
    assert max(map(feature_lookback, TRADING_FEATURES)) == 346


# ----------------------------------------------------------------------------- causality


@pytest.mark.parametrize("data", ["googl", "synth"])
def test_new_features_are_causal(googl, synth, data):
    df = googl if data == "googl" else synth
    names = tuple(dict.fromkeys(NEW_FEATURES + TRADING_FEATURES))
    base = compute_features(df, names).values
    rng = np.random.default_rng(11)
    cuts = [30, 200, 330, 400, *rng.integers(0, len(df) - 1, size=4).tolist()]
    for t in cuts:
        pert = compute_features(perturb_after(df, int(t), rng), names).values
        np.testing.assert_array_equal(base[: t + 1], pert[: t + 1], err_msg=f"cut at {t}")
        # the change is visible after t (once the features are complete)
        if t + 1 >= 450:
            assert not np.array_equal(base[t + 1], pert[t + 1])


# ----------------------------------------------------------------------------- in the env


@pytest.mark.parametrize("dataset", ["googl", "eurusd"])
@pytest.mark.parametrize("part", ["train", "val", "test"])
@pytest.mark.parametrize("sizing", ["none", "vol_target"])
def test_trading_features_in_the_env(dataset, part, sizing):
    env = make_trading_env(
        dataset=dataset, part=part, features=TRADING_FEATURES, sizing=sizing, window=2
    )
    assert env.feature_names == TRADING_FEATURES
    names = env.observation_names
    assert len(names) == env.observation_space.shape[0] == 2 * len(TRADING_FEATURES) + 1
    assert len(set(names)) == len(names)
    assert names[-1] == "position"
    assert names[len(TRADING_FEATURES) :][:-1] == [f"{f}[t]" for f in TRADING_FEATURES]
    assert names[: len(TRADING_FEATURES)] == [f"{f}[t-1]" for f in TRADING_FEATURES]
    assert env.first_valid_index == 347  # macd_32_96's 346 bars + window 2
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(100):
        assert env.observation_space.contains(obs)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(0, 3)))
        if terminated or truncated:
            obs, _ = env.reset()
    if part != "train":  # the evaluation parts warm up on earlier bars: no bar is lost
        assert env.max_episode_steps >= 300


def test_trading_features_short_frame_error(synth):
    with pytest.raises(ValueError, match="no step"):
        TradingEnv(synth.iloc[:347], features=TRADING_FEATURES, episode_length=None)


WINDOWED = ("vol_252", "rsi_14", "zscore_252", "volz_20", "macd_12_26", "macd_8_24", "vol_2")


def _windowed_columns(df: pd.DataFrame) -> np.ndarray:
    """The float64 columns of WINDOWED (before compute_features rounds them to float32)."""
    from riskppo.envs import features as F

    close = df["close"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logc = np.log(close)
        r1 = np.concatenate(([np.nan], np.diff(logc)))
        hl = np.log(df["high"].to_numpy(np.float64) / df["low"].to_numpy(np.float64))
        lv = np.log1p(df["volume"].to_numpy(np.float64))
        return np.stack([F._one(*F._parse(f), close, logc, r1, hl, lv) for f in WINDOWED], 1)


def _whole_array_vol(r1: np.ndarray, k: int) -> np.ndarray:
    """The rolling std as one [T-k+1, k] array of windows (the memory-hungry reference)."""
    from numpy.lib.stride_tricks import sliding_window_view

    return sliding_window_view(r1, k).std(axis=1, ddof=1)


@pytest.mark.parametrize("dataset", ["googl", "eurusd"])
def test_windowed_features_do_not_depend_on_the_block_size(dataset, monkeypatch):
    """Blocks of windows give the same values as one array of all windows, bundled data."""
    from riskppo.envs import features as F

    df = load_dataset(dataset)
    whole = _windowed_columns(df)
    monkeypatch.setattr(F, "_BLOCK_VALUES", 300)  # blocks of 1 to 150 windows
    assert np.array_equal(_windowed_columns(df), whole, equal_nan=True)
    r1 = np.diff(np.log(df["close"].to_numpy(np.float64)))
    np.testing.assert_allclose(whole[252:, 0], _whole_array_vol(r1, 252), rtol=1e-12, atol=0)


def test_windowed_features_take_memory_linear_in_the_rows():
    """A 252-bar window over 100k rows used to allocate 100k x 252 floats (200 MB)."""
    import tracemalloc

    n = 100_000
    close = 100.0 * np.exp(np.cumsum(np.random.default_rng(0).normal(0.0, 0.01, n)))
    df = pd.DataFrame(
        {"open": close, "high": close * 1.01, "low": close * 0.99, "close": close,
         "volume": np.full(n, 1000.0)},
        index=pd.date_range("2000-01-01", periods=n, freq="min"),
    )  # fmt: skip
    tracemalloc.start()
    try:
        compute_features(df, ["vol_252", "zscore_252", "rsi_252", "macd_12_26"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 * 8 * n, peak  # a few float64 columns and one 8 MiB block
