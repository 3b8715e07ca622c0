"""PortfolioEnv: weights and caps, costs per asset, accounting, causality of features and
covariance, API conformance and speed-independent invariants."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

from riskppo.envs.market.estimators import ewm_covariance, ledoit_wolf_covariance
from riskppo.envs.portfolio.data import PortfolioData, load_portfolio
from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.envs.portfolio.math import (
    long_only_weights,
    long_short_weights,
    rebalance_step,
)

FEATS = ("ret_1", "ret_5", "vol_20", "ewmvol_20", "vret_5")


def _data(closes: np.ndarray, opens: np.ndarray | None = None) -> PortfolioData:
    """``[T, N]`` closes (and opens) as PortfolioData on business days."""
    idx = pd.bdate_range("2020-01-01", periods=len(closes), name="timestamp")
    frames = []
    for i in range(closes.shape[1]):
        cols = {"close": closes[:, i]}
        if opens is not None:
            cols = {"open": opens[:, i], **cols}
        frames.append(pd.DataFrame(cols, index=idx))
    syms = tuple(f"A{i}" for i in range(closes.shape[1]))
    return PortfolioData(tuple(frames), syms, "test")


def _walk(n_bars: int = 300, n: int = 4, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 100.0 * np.exp(np.cumsum(rng.normal(0, 0.01, (n_bars, n)), axis=0))


def _env(closes: np.ndarray, **kw: object) -> PortfolioEnv:
    kw = {"features": FEATS, "vol_span": 20, "episode_length": None, "random_start": False, **kw}
    return PortfolioEnv(_data(closes), **kw)  # type: ignore[arg-type]


def test_long_only_weights_on_simplex() -> None:
    rng = np.random.default_rng(1)
    for a in rng.uniform(-3, 3, (50, 7)):
        w = long_only_weights(a, 3.0)
        assert w.sum() == pytest.approx(1.0) and (w > 0).all()
    assert np.allclose(long_only_weights(np.zeros(5), 3.0), 0.2)  # zero action: equal weight
    hi = long_only_weights(np.array([1.0, -1.0, -1.0]), 3.0)  # the box bounds the ratio
    assert hi[0] / hi[1] == pytest.approx(math.exp(6.0))


def test_long_short_weights_respect_gross_cap() -> None:
    rng = np.random.default_rng(2)
    for a in rng.uniform(-2, 2, (50, 6)):
        w = long_short_weights(a, 1.5)
        assert np.abs(w).sum() <= 1.5 + 1e-12
        assert np.all(np.abs(w) <= 1.0)
    small = np.array([0.1, -0.2, 0.3])
    assert np.array_equal(long_short_weights(small, 1.5), small)  # under the cap: unchanged


@pytest.mark.parametrize("long_only", [True, False])
def test_held_weights_respect_caps_in_env(long_only: bool) -> None:
    env = _env(_walk(), long_only=long_only, max_gross=1.2, vol_target=0.5, max_leverage=0.9)
    env.reset()
    rng = np.random.default_rng(3)
    for _ in range(100):
        a = rng.uniform(-1, 1, 4).astype(np.float32)
        w = env.signal_weights(a)
        _, _, _, trunc, info = env.step(a)
        h = info["weights"]
        assert info["scale"] <= 0.9 + 1e-12
        assert np.allclose(h, w * info["scale"])
        if long_only:
            assert w.sum() == pytest.approx(1.0) and (h >= 0).all()
            assert h.sum() <= 0.9 + 1e-12
        else:
            assert np.abs(h).sum() <= 1.2 * 0.9 + 1e-12
        if trunc:
            env.reset()


def test_vol_target_scales_to_the_covariance() -> None:
    env = _env(_walk(), vol_target=0.05, max_leverage=5.0)
    env.reset()
    t = env.trading_range[0]
    _, _, _, _, info = env.step(np.zeros(4, np.float32))
    w = np.full(4, 0.25)
    cov = env.covariance_table
    assert cov is not None
    vol = math.sqrt(w @ cov[t] @ w * 252)
    assert info["scale"] == pytest.approx(0.05 / vol)


def test_costs_per_asset_on_flat_prices() -> None:
    """No price moves: the fee is fee x each asset's |Δweight|, summed over the assets."""
    closes = np.full((200, 3), 50.0)
    env = _env(closes, sizing="none", long_only=False, max_gross=3.0, fee=0.001)
    env.reset()
    w1, w2 = np.array([0.5, -0.25, 0.0]), np.array([0.1, 0.25, -0.3])
    i1 = env.step(w1.astype(np.float32))[4]
    assert i1["fee_cost"] == pytest.approx(0.001 * (0.5 + 0.25 + 0.0))
    _, r2, _, _, i2 = env.step(w2.astype(np.float32))
    assert i2["fee_cost"] == pytest.approx(0.001 * (0.4 + 0.5 + 0.3))
    assert i2["gross_return"] == 0.0
    per_bar = 0.01 / 252
    assert i2["borrow_cost"] == pytest.approx(per_bar * 0.25)  # short held over the bar: w1's
    assert r2 == pytest.approx(-(i2["fee_cost"] + i2["borrow_cost"]))


def test_rebalance_step_matches_a_brute_force_portfolio() -> None:
    """Value-level bookkeeping: holdings in currency units, prices moved, rebalanced, charged."""
    rng = np.random.default_rng(4)
    h_prev, h_new = np.array([0.3, 0.2, 0.4]), np.array([0.1, 0.5, 0.3])
    r_old, r_new = rng.normal(0, 0.02, 3), rng.normal(0, 0.02, 3)
    acct = rebalance_step(
        h_prev,
        h_new,
        np.expm1(r_old),
        np.expm1(r_new),
        fee=0.002,
        borrow_per_bar=0.0,
        delayed=False,
    )
    value = 1.0
    hold = h_prev * value * np.exp(r_old)  # currency in each asset after the old move
    cash = value * (1 - h_prev.sum())
    value = hold.sum() + cash
    traded = np.abs(h_new * value - hold).sum() / value
    assert acct.turnover == pytest.approx(traded)
    hold = h_new * value * np.exp(r_new)
    cash = value * (1 - h_new.sum())
    assert acct.gross == pytest.approx(math.log(hold.sum() + cash))
    assert np.allclose(acct.held_after, hold / (hold.sum() + cash))
    want = h_prev * np.expm1(r_old) + h_new * np.expm1(r_new)
    np.testing.assert_allclose(acct.contributions, want)


def test_rewards_sum_to_log_equity() -> None:
    env = _env(_walk(seed=5), fee=0.001)
    env.reset()
    rng = np.random.default_rng(5)
    total, trunc = 0.0, False
    while not trunc:
        _, r, _, trunc, info = env.step(rng.uniform(-1, 1, 4).astype(np.float32))
        total += float(r)
    assert total == pytest.approx(info["log_equity"])
    assert info["equity"] == pytest.approx(math.exp(total))


@pytest.mark.parametrize("covariance", ["ewm", "ledoit_wolf"])
def test_features_and_covariance_are_causal(covariance: str) -> None:
    """Changing bar k's prices leaves every observation and covariance before bar k unchanged."""
    closes = _walk(n_bars=260, n=3, seed=6)
    k = 200
    bumped = closes.copy()
    bumped[k:, 1] *= 1.3
    bumped[k, 0] *= 0.8
    a = _env(closes, covariance=covariance)
    b = _env(bumped, covariance=covariance)
    ca, cb = a.covariance_table, b.covariance_table
    assert ca is not None and cb is not None
    np.testing.assert_array_equal(ca[:k], cb[:k])
    assert not np.allclose(ca[k], cb[k])
    np.testing.assert_array_equal(a._table[:k], b._table[:k])
    assert not np.array_equal(a._table[k], b._table[k])


def test_ewm_covariance_matches_pandas() -> None:
    closes = _walk(n_bars=120, n=3, seed=7)
    cov = ewm_covariance(closes, 10)
    r = np.diff(np.log(closes), axis=0)
    t = 80  # returns r_1..r_80 -> rows 0..79 of the diff
    decay = 1 - 2 / 11
    wts = decay ** np.arange(t - 1, -1, -1)
    want = (r[:t] * wts[:, None]).T @ r[:t] / wts.sum()
    np.testing.assert_allclose(cov[t], want, rtol=1e-10)
    assert np.isnan(cov[9]).all() and not np.isnan(cov[10]).any()


def test_ledoit_wolf_uses_the_window_only() -> None:
    from sklearn.covariance import ledoit_wolf

    closes = _walk(n_bars=100, n=3, seed=8)
    cov = ledoit_wolf_covariance(closes, 30)
    r = np.diff(np.log(closes), axis=0)
    np.testing.assert_allclose(cov[60], ledoit_wolf(r[30:60])[0])


def test_next_open_fill_with_opens() -> None:
    closes = _walk(n_bars=200, n=2, seed=9)
    opens = closes * np.exp(np.random.default_rng(9).normal(0, 0.002, closes.shape))
    env = PortfolioEnv(
        _data(closes, opens),
        features=FEATS,
        vol_span=20,
        episode_length=None,
        random_start=False,
        sizing="none",
    )
    assert env.fill == "next_open"
    env.reset()
    t = env.trading_range[0]
    info = env.step(np.zeros(2, np.float32))[4]
    session = np.log(closes[t + 1] / opens[t + 1])
    assert info["gross_return"] == pytest.approx(math.log(1 + 0.5 * np.expm1(session).sum()))


def test_bad_action_is_one_line() -> None:
    env = _env(_walk())
    env.reset()
    with pytest.raises(ValueError, match="action must be 4 finite numbers"):
        env.step(np.array([0.0, np.nan, 0.0, 0.0]))
    with pytest.raises(ValueError, match="action must be 4 finite numbers"):
        env.step(np.zeros(3))


def test_gymnasium_api_and_observation_names() -> None:
    env = PortfolioEnv(load_portfolio(dataset="sp500", symbols=["AAPL", "KO", "XOM"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env, skip_render_check=True)
    assert len(env.observation_names) == env.observation_space.shape[0]
    assert env.observation_names[-1] == "weight.XOM"
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)


def test_same_seed_same_episode() -> None:
    runs = []
    for _ in range(2):
        env = _env(_walk(seed=11), episode_length=50, random_start=True)
        obs, _ = env.reset(seed=7)
        rng = np.random.default_rng(3)
        steps = [env.step(rng.uniform(-1, 1, 4).astype(np.float32)) for _ in range(50)]
        assert [s[3] for s in steps] == [False] * 49 + [True]  # truncated after episode_length
        runs.append((obs, [float(s[1]) for s in steps]))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]


def test_contributions_add_up_to_the_step_return() -> None:
    env = _env(_walk(seed=12), fee=0.0)  # close-only: next-close fills, one leg per step
    env.reset()
    rng = np.random.default_rng(12)
    for _ in range(30):
        info = env.step(rng.uniform(-1, 1, 4).astype(np.float32))[4]
        assert info["contributions"].sum() == pytest.approx(math.expm1(info["gross_return"]))


@pytest.mark.parametrize("overlay", [None, {"limit": -0.04, "margin": 1.3, "mode": "scale"}])
def test_exposure_signal_scales_the_sized_portfolio(overlay: dict | None) -> None:
    """The exposure signal holds a share ``s`` of the sized (and capped) portfolio: ``x = 1``
    holds what the env without the signal holds, bit for bit; ``x = -1`` holds ``min_signal``
    of it; in between linearly; the weights still come from the first ``N`` components."""
    closes = _walk()
    plain = _env(closes, overlay=overlay)
    sig = _env(closes, overlay=overlay, exposure_signal=True, min_signal=0.25)
    assert sig.action_space.shape == (5,) and plain.action_space.shape == (4,)
    plain.reset(), sig.reset()
    rng = np.random.default_rng(3)
    for x in (1.0, -1.0, 0.0, 0.5):
        a = rng.uniform(-1, 1, 4)
        _, _, _, _, ip = plain.step(a)
        _, _, _, _, i_s = sig.step(np.append(a, x))
        s = 0.25 + 0.75 * (x + 1) / 2
        assert i_s["signal"] == s and ip["signal"] == 1.0
        if x == 1.0:
            assert np.array_equal(i_s["weights"], ip["weights"])
        else:
            assert np.allclose(i_s["weights"], s * ip["weights"], rtol=1e-12, atol=0)
        sig.step_weights(sig.signal_weights(np.append(a, 1.0)))  # the same weights again,
        plain.step_weights(plain.signal_weights(a))  # to keep both at the same holdings


def test_a_clipping_overlay_caps_the_portfolio_held() -> None:
    """With ``mode="clip"`` the exposure signal's share of the sized portfolio is held unless
    its forecast CVaR exceeds the limit; then the cap. A full signal holds what ``scale`` holds."""
    closes = _walk()
    envs = {
        m: _env(
            closes,
            overlay={"limit": -0.06, "margin": 1.3, "mode": m},
            exposure_signal=True,
            min_signal=0.25,
        )
        for m in ("clip", "scale")
    }
    plain = _env(closes, exposure_signal=True, min_signal=0.25)
    for e in (*envs.values(), plain):
        e.reset()
    rng = np.random.default_rng(4)
    n_clipped = n_free = 0
    for x in rng.uniform(-1, 1, 60):
        a = np.append(rng.uniform(-1, 1, 4), x)
        (_, _, _, _, ic), (_, _, _, _, isc), (_, _, _, _, ip) = (
            e.step(a) for e in (*envs.values(), plain)
        )
        cap, uncapped = ic["overlay_cap"], ic["uncapped_scale"]  # uncapped: sized times s
        w = ip["weights"] / (ic["signal"] * ip["scale"])  # the signal weights
        assert uncapped == pytest.approx(ic["signal"] * ip["scale"], rel=1e-12)
        np.testing.assert_allclose(ic["weights"], w * min(uncapped, cap), rtol=1e-12)
        n_clipped += uncapped > cap
        n_free += uncapped <= cap
        if x == 1.0:
            np.testing.assert_array_equal(ic["weights"], isc["weights"])
        for e in (*envs.values(), plain):  # the same weights again, to keep the same holdings
            e.step_weights(e.signal_weights(a), 1.0)
    assert n_clipped > 0 and n_free > 0


def test_exposure_signal_arguments_are_checked() -> None:
    closes = _walk(120, 3)
    with pytest.raises(ValueError, match=r"min_signal=0\.25 needs exposure_signal=True"):
        _env(closes, min_signal=0.25)
    with pytest.raises(ValueError, match="min_signal"):
        _env(closes, exposure_signal=True, min_signal=1.0)
    env = _env(closes, exposure_signal=True)
    env.reset()
    with pytest.raises(ValueError, match=r"4 finite numbers \(one per asset and the exposure"):
        env.step(np.zeros(3))
