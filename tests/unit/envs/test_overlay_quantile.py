"""The overlay's VaR counterpart of its tail multiplier (riskppo.envs.execution.overlay): the
expanding quantile against a sort per prefix, q_t by a direct loop over the sums known at t
(causal, floored, never above k_t), and the unit forecast equal to the env's own tables."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from riskppo.envs.execution.overlay import (
    RiskOverlay,
    expanding_quantile,
    gaussian_tail_quantile,
    overlay_table,
    tail_quantile,
    unit_forecast,
)


def _closes(n: int, seed: int = 0) -> np.ndarray:
    """Drifting volatility and a 6% fall on 4% of the bars: a left tail beyond the normal one."""
    rng = np.random.default_rng(seed)
    vol = 0.01 * np.exp(np.cumsum(0.05 * rng.standard_normal(n)))
    jumps = np.where(rng.random(n) < 0.04, -0.06, 0.0)
    return 100 * np.exp(np.cumsum(vol * rng.standard_normal(n) + jumps))


def test_gaussian_quantile() -> None:
    assert gaussian_tail_quantile(0.05) == pytest.approx(-sps.norm.ppf(0.05), rel=1e-12)
    assert gaussian_tail_quantile(0.05) == pytest.approx(1.644854, abs=1e-6)


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.5])
def test_expanding_quantile_equals_a_sort_per_prefix(alpha: float) -> None:
    v = np.random.default_rng(1).standard_normal(300)
    got = expanding_quantile(v, alpha)
    for i in range(len(v)):
        own = np.sort(v[: i + 1])
        assert got[i] == own[math.ceil(alpha * (i + 1)) - 1]


@pytest.mark.parametrize("delay", [0, 1])
def test_tail_quantile_by_a_direct_loop(delay: int) -> None:
    close = _closes(700)
    ov = RiskOverlay(limit=-0.04, horizon=5, min_history=40, slow_span=20)
    f = unit_forecast(close, ov, delay=delay)
    floor = gaussian_tail_quantile(ov.alpha)
    for t in range(len(close)):
        known = [s for s in range(len(close)) if s + delay + ov.horizon <= t]
        z = f.z[known]
        z = z[~np.isnan(z)]
        assert f.n_known[t] == len(z)
        want = floor
        if len(z) >= ov.min_history:
            want = max(-np.sort(z)[math.ceil(ov.alpha * len(z)) - 1], floor)
        assert f.quantile[t] == pytest.approx(want, rel=1e-12), t
    assert (f.quantile <= f.multiplier + 1e-12).all()
    assert (f.quantile > floor + 0.05).mean() > 0.5  # the empirical quantile is used


def test_a_later_close_changes_no_earlier_forecast() -> None:
    close = _closes(600, seed=4)
    ov = RiskOverlay(limit=-0.04, horizon=10, min_history=30, slow_span=20)
    t = 400
    moved = close.copy()
    moved[t + 1 :] *= np.exp(-0.5)  # a crash right after bar t
    a, b = unit_forecast(close, ov, delay=1), unit_forecast(moved, ov, delay=1)
    for name in ("sigma", "multiplier", "quantile", "n_known"):
        np.testing.assert_array_equal(getattr(a, name)[: t + 1], getattr(b, name)[: t + 1])
    assert not np.array_equal(a.z[: t + 1], b.z[: t + 1])  # the outcomes see it


def test_unit_forecast_is_the_envs_table() -> None:
    close = _closes(900, seed=2)
    ov = RiskOverlay(limit=-0.04, min_history=100)
    for delay in (0, 1):
        table = overlay_table(close, ov, delay=delay)
        f = unit_forecast(close, ov, delay=delay)
        np.testing.assert_array_equal(f.sigma, table.sigma)
        np.testing.assert_array_equal(f.multiplier, table.multiplier)
        q = tail_quantile(f.z, ov, delay=delay)
        np.testing.assert_array_equal(f.quantile, q)
