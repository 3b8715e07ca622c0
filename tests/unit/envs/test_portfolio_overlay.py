"""The pre-trade risk overlay of the portfolio env: the cap by hand, causality, the exposure never
above the cap, the env unchanged without it, its limit from the risk section, and its binding
share pooled over training envs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from riskppo.config import Config, apply_overrides
from riskppo.envs.execution.overlay import RiskOverlay, binding_stats
from riskppo.envs.portfolio.data import PortfolioData
from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.envs.portfolio.factory import make_portfolio_env
from riskppo.envs.portfolio.overlay import portfolio_cap, portfolio_overlay_tables
from riskppo.envs.registration import portfolio_data_kwargs, resolve_overlay
from riskppo.walkforward.portfolio import portfolio_rows, training_binding

FEATS = ("ret_1", "ret_5", "ewmvol_20")
SP20 = Path(__file__).resolve().parents[3] / "riskppo" / "configs" / "portfolio_sp20.yaml"
GAUSS_5 = 2.0627128075074  # φ(Φ⁻¹(0.05)) / 0.05


def _data(closes: np.ndarray) -> PortfolioData:
    idx = pd.bdate_range("2010-01-01", periods=len(closes), name="timestamp")
    frames = tuple(pd.DataFrame({"close": closes[:, i]}, index=idx) for i in range(closes.shape[1]))
    return PortfolioData(frames, tuple(f"A{i}" for i in range(closes.shape[1])), "test")


def _env(closes: np.ndarray, **kw: object) -> PortfolioEnv:
    kw = {"features": FEATS, "vol_span": 20, "episode_length": None, "random_start": False, **kw}
    return PortfolioEnv(_data(closes), **kw)  # type: ignore[arg-type]


def _fat_walk(n_bars: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 100.0 * np.exp(np.cumsum(rng.standard_t(4, (n_bars, n)) * 0.01, axis=0))


@pytest.mark.parametrize("sizing", ["none", "vol_target"])
def test_cap_by_hand_two_assets(sizing: str) -> None:
    """Returns ``s_t·(a, −b)`` with ``s_t = ±1``: every EWM covariance is ``[[a², −ab], [−ab,
    b²]]``, the equal-weight targets' volatility ``(b − a)/2``, the multiplier the Gaussian one
    (fewer sums than ``min_history``)."""
    a, b = 0.01, 0.03
    s = np.where(np.arange(200) % 2 == 0, 1.0, -1.0)
    closes = 100.0 * np.exp(np.cumsum(np.stack([s * a, -s * b], axis=1), axis=0))
    ov = {"limit": -0.04, "horizon": 20, "fast_span": 5, "slow_span": 20, "margin": 1.3}
    env = _env(closes, sizing=sizing, vol_target=0.10, overlay=ov)
    env.reset()
    info = env.step(np.zeros(2, dtype=np.float32))[4]  # zero action: equal weight
    cap = 0.04 / (1.3 * GAUSS_5 * ((b - a) / 2) * math.sqrt(20))  # = 0.3336
    uncapped = 1.0 if sizing == "none" else 0.10 / ((b - a) / 2 * math.sqrt(252))  # 0.63
    assert info["overlay_cap"] == pytest.approx(cap, rel=1e-9)
    assert info["uncapped_scale"] == pytest.approx(uncapped, rel=1e-9)
    assert info["scale"] == pytest.approx(cap, rel=1e-9)
    assert info["gross_exposure"] == pytest.approx(cap, rel=1e-9)
    np.testing.assert_allclose(info["weights"], [cap / 2, cap / 2], rtol=1e-9)


def test_cap_takes_the_larger_of_the_two_forecasts() -> None:
    fast = np.diag([4e-4, 1e-4])
    slow = np.diag([1e-4, 9e-4])
    ov = RiskOverlay(limit=-0.04, horizon=20, margin=1.5)
    for w, var in (([0.5, 0.5], 2.5e-4), ([0.9, 0.1], 3.25e-4)):  # slow larger, fast larger
        want = 0.04 / (1.5 * 2.5 * math.sqrt(var * 20))
        assert portfolio_cap(np.array(w), fast, slow, 2.5, ov) == pytest.approx(want, rel=1e-12)
    assert portfolio_cap(np.zeros(2), fast, slow, 2.5, ov) == math.inf


@pytest.mark.parametrize("delay", [0, 1])
def test_changing_a_future_bar_changes_no_cap(delay: int) -> None:
    closes = _fat_walk(700, 3, seed=1)
    ov = RiskOverlay(limit=-0.04, slow_span=20, min_history=100)
    base = portfolio_overlay_tables(closes, ov, delay=delay)
    assert (base.multiplier[400:] > GAUSS_5 + 1e-9).any()  # the empirical multiplier is in play
    rng = np.random.default_rng(3)
    walk = np.exp(rng.normal(0, 0.2, (len(closes), 3)).cumsum(axis=0))
    for t in (300, 500):
        for change in (walk[: len(closes) - t - 1], 0.5):  # a random path, a crash at t + 1
            moved = closes.copy()
            moved[t + 1 :] *= change
            other = portfolio_overlay_tables(moved, ov, delay=delay)
            for x, y in zip(base, other, strict=True):
                np.testing.assert_array_equal(x[: t + 1], y[: t + 1])
                assert not np.array_equal(x[t + 1 :], y[t + 1 :])


def test_env_caps_are_causal() -> None:
    """The same actions in an env whose prices differ after bar ``t`` give the same caps up to
    ``t`` (next-close fill: the env's own fill delay)."""
    closes = _fat_walk(500, 3, seed=4)
    moved = closes.copy()
    t = 350
    moved[t + 1 :, 0] *= 1.5
    caps = []
    for c in (closes, moved):
        env = _env(c, overlay={"limit": -0.04, "min_history": 100})
        env.reset()
        rng = np.random.default_rng(5)
        for _ in range(env.max_episode_steps):
            env.step(rng.uniform(-1, 1, 3).astype(np.float32))
        assert env.overlay_cap is not None
        caps.append(env.overlay_cap)
    np.testing.assert_array_equal(caps[0][: t + 1], caps[1][: t + 1])
    assert not np.array_equal(caps[0][t + 1 :], caps[1][t + 1 :])


@pytest.mark.parametrize("long_only", [True, False])
def test_gross_exposure_never_above_the_cap(long_only: bool) -> None:
    closes = _fat_walk(600, 4, seed=2)
    env = _env(
        closes,
        long_only=long_only,
        max_gross=1.5,
        vol_target=0.06,
        max_leverage=2.0,
        overlay={"limit": -0.05, "min_history": 100},
    )
    env.reset()
    rng = np.random.default_rng(6)
    for _ in range(env.max_episode_steps):
        a = rng.uniform(-1, 1, 4).astype(np.float32)
        w = env.signal_weights(a)
        info = env.step(a)[4]
        cap, gross = info["overlay_cap"], info["gross_exposure"]
        assert gross <= cap * np.abs(w).sum() * (1 + 1e-12)
        assert info["scale"] == min(cap, info["uncapped_scale"])
        np.testing.assert_allclose(info["weights"], w * info["scale"], rtol=1e-12)
    stats = env.overlay_binding()
    assert 0 < stats["binding_share"] < 1 and 0 < stats["mean_cut"] < 1
    assert stats["limit"] == -0.05 and stats["fast_span"] == 5


def test_overlay_off_leaves_the_env_unchanged() -> None:
    """Without an overlay: no overlay info keys nor tables, and the same range, observations,
    rewards and weights as with an overlay whose cap never binds."""
    closes = _fat_walk(400, 3, seed=7)
    off = _env(closes, vol_span=60)
    loose = _env(closes, vol_span=60, overlay={"limit": -1e6})
    assert off.trading_range == loose.trading_range
    assert off.overlay_binding() == {} and off.overlay_cap is None
    o1, i1 = off.reset(seed=3)
    o2, _ = loose.reset(seed=3)
    np.testing.assert_array_equal(o1, o2)
    assert "overlay_cap" not in i1 and "uncapped_scale" not in i1
    rng = np.random.default_rng(8)
    for _ in range(off.max_episode_steps):
        a = rng.uniform(-1, 1, 3).astype(np.float32)
        s1, s2 = off.step(a), loose.step(a)
        np.testing.assert_array_equal(s1[0], s2[0])
        assert s1[1] == s2[1]
        np.testing.assert_array_equal(s1[4]["weights"], s2[4]["weights"])
    assert loose.overlay_binding()["binding_share"] == 0.0


def test_portfolio_overlay_takes_its_limit_from_the_risk_section() -> None:
    cfg = apply_overrides(
        Config.from_yaml(SP20),
        ["env.kwargs.symbols=[AAPL,KO,XOM]", "risk.cvar_limit=-0.03", "risk.cvar_horizon=10"],
    )
    kwargs = resolve_overlay(cfg.env.kwargs, cfg.risk)
    want = {
        "fast_span": 5,
        "margin": 1.3,
        "mode": "scale",
        "limit": -0.03,
        "alpha": 0.05,
        "horizon": 10,
    }
    assert kwargs["overlay"] == want
    env = make_portfolio_env(**kwargs, **portfolio_data_kwargs(cfg.data), part="val")
    assert env.overlay == RiskOverlay(**want)
    assert portfolio_rows(cfg) == len(env.data.index)  # the schedule's env resolves it too


def test_training_binding_pools_the_envs() -> None:
    closes = _fat_walk(500, 3, seed=9)
    ov = {"limit": -0.05, "min_history": 100}
    kw = {"overlay": ov, "episode_length": 60, "random_start": True, "vol_target": 0.06}
    envs = [_env(closes, **kw) for _ in range(2)]
    venv = DummyVecEnv([lambda e=e: e for e in envs])  # type: ignore[misc]
    venv.seed(0)
    venv.reset()
    rng = np.random.default_rng(10)
    for _ in range(150):
        venv.step(rng.uniform(-1, 1, (2, 3)).astype(np.float32))
    got = training_binding(venv)
    assert got is not None
    lo, hi = envs[0].trading_range
    u = np.concatenate([e.uncapped_scale[lo:hi] for e in envs])  # type: ignore[index]
    c = np.concatenate([e.overlay_cap[lo:hi] for e in envs])  # type: ignore[index]
    assert got == {**RiskOverlay(**ov).to_dict(), **binding_stats(u, c)}  # type: ignore[arg-type]
    assert 0 < got["binding_share"] < 1
    assert training_binding(DummyVecEnv([lambda: _env(closes)])) is None


def test_backtest_holds_the_agent_under_the_overlay() -> None:
    """The agent's backtest env gets the risk section's limit and reports the binding; the
    baselines are held without the overlay."""
    from riskppo.agent import DistributionalPPO
    from riskppo.evaluation.portfolio.backtest import portfolio_backtest

    over = ["env.kwargs.symbols=[AAPL,KO,XOM]", "env.n_envs=2", "risk.cvar_limit=-0.03"]
    cfg = apply_overrides(Config.from_yaml(SP20), over)
    model = DistributionalPPO(config=cfg)
    try:
        bt = portfolio_backtest(model, "val", names=("equal_weight",))
    finally:
        model.close()
    assert bt.overlay is not None and bt.overlay["limit"] == -0.03
    assert 0 < bt.overlay["binding_share"] <= 1
    agent, ew = bt.frames["agent"]["gross_exposure"], bt.frames["equal_weight"]["gross_exposure"]
    assert agent.mean() < ew.mean()  # equal weight at the 8% target, uncapped
