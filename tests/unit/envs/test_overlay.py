"""The pre-trade risk overlay (riskppo.envs.execution.overlay): hand-computed caps, causality, the
expanding tail estimate against a sort per prefix, and the env keeping |exposure| <= cap."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from riskppo.config import ConfigError, RiskConfig
from riskppo.envs.execution.overlay import (
    RiskOverlay,
    binding_stats,
    expanding_tail_mean,
    gaussian_tail_multiplier,
    overlay_table,
)
from riskppo.envs.registration import resolve_overlay
from riskppo.envs.trading.env import TradingEnv


def _alternating(n: int, r: float) -> np.ndarray:
    """Closes whose log returns alternate +r, -r: every EWM of r² is exactly r²."""
    steps = np.where(np.arange(n - 1) % 2 == 0, r, -r)
    return 100.0 * np.exp(np.concatenate(([0.0], np.cumsum(steps))))


def _frame(close: np.ndarray) -> pd.DataFrame:
    idx = pd.date_range("2000-01-03", periods=len(close), freq="B", name="date")
    return pd.DataFrame({"close": close}, index=idx)


def test_gaussian_multiplier_is_the_normal_cvar() -> None:
    # -CVaR_5% of N(0, 1) = phi(1.6449) / 0.05 = 2.0627 (tabulated); at 50%: 2 phi(0) = 0.7979
    assert gaussian_tail_multiplier(0.05) == pytest.approx(2.062713, abs=1e-6)
    assert gaussian_tail_multiplier(0.5) == pytest.approx(2 / math.sqrt(2 * math.pi), rel=1e-12)


def test_cap_by_hand_with_the_gaussian_multiplier() -> None:
    r, limit, margin, h = 0.01, -0.04, 1.3, 20
    close = _alternating(120, r)
    ov = RiskOverlay(limit=limit, horizon=h, fast_span=5, slow_span=10, margin=margin)
    table = overlay_table(close, ov, delay=0)  # 120 bars: far fewer than min_history sums
    expected = 0.04 / (margin * 2.0627128 * r * math.sqrt(h))  # = 0.3450
    assert np.isnan(table.cap[:10]).all()  # before the slow EWM has 10 returns
    np.testing.assert_allclose(table.sigma[10:], r, rtol=1e-12)
    np.testing.assert_allclose(table.cap[10:], expected, rtol=1e-6)


def test_cap_by_hand_with_the_empirical_multiplier() -> None:
    # horizon 1: z_s = r_{s+1} / sigma_s = +-1, alternating; for n >= 6 the lowest ceil(0.4 n)
    # of them are all -1, so k = max(1, 0.966) = 1 once min_history = 6 sums are known, and the
    # cap is |L| / (margin r).
    r = 0.02
    close = _alternating(60, r)
    ov = RiskOverlay(limit=-0.03, alpha=0.4, horizon=1, fast_span=2, slow_span=4, margin=1.5)
    ov = RiskOverlay(**{**ov.to_dict(), "min_history": 6})
    table = overlay_table(close, ov, delay=0)
    first_z = 4  # sigma defined from bar 4 on; z_4 is known at bar 5
    ready = first_z + 1 + ov.min_history - 1  # the bar at which 6 sums are known
    assert table.multiplier[ready - 1] == pytest.approx(gaussian_tail_multiplier(0.4))
    np.testing.assert_allclose(table.multiplier[ready:], 1.0, rtol=1e-9)
    np.testing.assert_allclose(table.cap[ready:], 0.03 / (1.5 * r), rtol=1e-9)


def test_multiplier_never_below_the_gaussian_one() -> None:
    rng = np.random.default_rng(3)
    close = 50 * np.exp(np.cumsum(rng.uniform(-0.01, 0.01, 800)))  # thin tails
    ov = RiskOverlay(limit=-0.04, min_history=50)
    mult = overlay_table(close, ov, delay=0).multiplier
    assert mult.min() >= gaussian_tail_multiplier(0.05) - 1e-12
    fat = close.copy()
    fat[400:] *= np.exp(-0.3)  # one crash: the tail after it is heavier than the normal one
    assert overlay_table(fat, ov, delay=0).multiplier[-1] > gaussian_tail_multiplier(0.05) + 0.1


def test_expanding_tail_mean_equals_a_sort_per_prefix() -> None:
    rng = np.random.default_rng(0)
    v = np.round(rng.standard_t(3, 700), 2)  # ties included
    for alpha in (0.05, 0.2, 0.5):
        got = expanding_tail_mean(v, alpha)
        ref = [np.sort(v[: i + 1])[: math.ceil(alpha * (i + 1))].mean() for i in range(len(v))]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("delay", [0, 1])
def test_changing_a_future_bar_changes_no_cap(delay: int) -> None:
    rng = np.random.default_rng(1)
    close = 100 * np.exp(np.cumsum(rng.standard_t(4, 900) * 0.01))
    ov = RiskOverlay(limit=-0.04, min_history=100)
    base = overlay_table(close, ov, delay=delay)
    for t in (300, 600):
        moved = close.copy()
        moved[t + 1 :] *= np.exp(rng.normal(0, 0.2, len(close) - t - 1).cumsum())
        other = overlay_table(moved, ov, delay=delay)
        for a, b in zip(base, other, strict=True):
            np.testing.assert_array_equal(a[: t + 1], b[: t + 1])
        assert not np.array_equal(base.cap[t + 1 :], other.cap[t + 1 :])


@pytest.mark.parametrize("mode", ["clip", "scale"])
def test_env_exposure_stays_within_the_cap_and_keeps_the_signal(mode: str) -> None:
    """``clip`` holds the sized position unless it exceeds the cap, then the cap; ``scale``
    holds the signal times the capped scale. Both: |exposure| <= cap on every bar."""
    rng = np.random.default_rng(2)
    close = 100 * np.exp(np.cumsum(rng.standard_t(4, 700) * 0.012))
    kw = {"continuous": True, "sizing": "vol_target", "vol_target": 0.3, "random_start": False}
    plain = TradingEnv(_frame(close), **kw)
    env = TradingEnv(
        _frame(close), overlay={"limit": -0.03, "min_history": 100, "mode": mode}, **kw
    )
    assert env.trading_range == plain.trading_range
    env.reset()
    signals, clipped = [], []
    for _ in range(env.max_episode_steps):
        a = rng.uniform(-1, 1, 1).astype(np.float32)
        info = env.step(a)[4]
        bar = info["bar"] - 1  # the bar the exposure was decided at
        cap, scale, sig = env.overlay_cap[bar], env.uncapped_scale[bar], info["signal"]
        assert abs(info["position"]) <= cap * (1 + 1e-12)
        want = float(np.clip(sig * scale, -cap, cap)) if mode == "clip" else sig * min(cap, scale)
        assert info["position"] == pytest.approx(want, rel=1e-12)
        signals.append(sig)
        clipped.append(abs(sig) * scale > cap)
    held = env.overlay_binding(*env.trading_range, signals=np.array(signals))
    full = env.overlay_binding()  # a full signal's binding
    assert 0 < full["binding_share"] <= 1 and 0 < full["mean_cut"] < 1
    assert full["limit"] == -0.03 and full["mode"] == mode
    if mode == "clip":  # the signals held bind less often than a full one
        assert held["binding_share"] == pytest.approx(np.mean(clipped), rel=1e-12)
        assert held["binding_share"] < full["binding_share"]
    else:  # the cap scales every signal: it binds where a full signal's would
        assert held == full


def test_a_full_signal_holds_the_same_position_in_both_modes() -> None:
    rng = np.random.default_rng(5)
    close = 100 * np.exp(np.cumsum(rng.standard_t(4, 600) * 0.015))
    kw = {"continuous": True, "sizing": "vol_target", "vol_target": 0.3, "random_start": False}
    envs = [
        TradingEnv(_frame(close), overlay={"limit": -0.03, "mode": m}, **kw)
        for m in ("clip", "scale")
    ]
    for e in envs:
        e.reset()
    for a in rng.choice([-1.0, 1.0], envs[0].max_episode_steps):
        infos = [e.step(np.array([a], np.float32))[4] for e in envs]
        assert infos[0]["position"] == infos[1]["position"]


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="overlay mode='cap' is invalid: must be one of clip"):
        RiskOverlay(limit=-0.04, mode="cap")


def test_binding_stats_by_hand() -> None:
    stats = binding_stats(np.array([1.0, 1.0, np.nan, 0.5]), np.array([0.5, 2.0, 0.1, 0.25]))
    assert stats == {"binding_share": pytest.approx(2 / 3), "mean_cut": pytest.approx(0.5)}
    assert binding_stats(np.ones(3), np.full(3, 2.0)) == {"binding_share": 0.0, "mean_cut": 1.0}


def test_overlay_takes_its_limit_from_the_risk_section() -> None:
    risk = RiskConfig(cvar_limit=-0.02, cvar_alpha=0.1, cvar_horizon=10)
    got = resolve_overlay({"fee": 0.001, "overlay": {"margin": 1.5}}, risk)
    assert got == {
        "fee": 0.001,
        "overlay": {"margin": 1.5, "limit": -0.02, "alpha": 0.1, "horizon": 10},
    }
    assert resolve_overlay({"overlay": {"limit": -0.05}}, risk)["overlay"]["limit"] == -0.05
    assert "overlay" not in resolve_overlay({"overlay": False}, risk)
    with pytest.raises(ConfigError, match=r"env.kwargs.overlay needs a limit: set risk.cvar_limit"):
        resolve_overlay({"overlay": True}, RiskConfig())


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"limit": 0.04}, "overlay limit=0.04 is invalid: must be a finite number < 0"),
        (
            {"limit": -0.04, "margin": 0.5},
            "overlay margin=0.5 is invalid: must be a finite number >= 1",
        ),
        ({"limit": -0.04, "marg": 2}, r"overlay has unknown settings \['marg'\]"),
        ({"limit": -0.04, "fast_span": 1}, "overlay fast_span=1 is invalid: must be an int >= 2"),
        ({"margin": 1.5}, r"overlay needs a limit \(a CVaR of log returns < 0, e.g. -0.04\)"),
    ],
)
def test_bad_overlay_settings_get_one_line(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TradingEnv(_frame(_alternating(300, 0.01)), continuous=True, overlay=settings)
