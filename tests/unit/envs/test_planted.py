"""The planted markets carry exactly the edge they say they carry, in a frame the loader accepts."""

from __future__ import annotations

import numpy as np
import pytest

from riskppo.envs import validate_ohlcv
from riskppo.envs.market.planted import signal_market


def _next_returns(df):
    return np.diff(np.log(df["close"].to_numpy()))


@pytest.mark.parametrize("ic", [0.0, 0.08, -0.1])
def test_the_signal_column_predicts_the_next_standardised_return_with_its_ic(ic):
    """Pooled over seeds, corr(s_t, (r_{t+1} − m)/σ_{t+1}) is ``ic`` within three standard
    errors; the column says nothing about the return of its own bar (no look-ahead planted)."""
    ahead, same = [], []
    for seed in range(8):
        df, pl = signal_market(4000, ic=ic, seed=seed)
        r = _next_returns(df)  # r[t-1] is the log return of bar t
        z = (r[1:] - 0.06 / 252) / pl.sigma[1:-1]  # bar t+1, t = 1..n-2
        s = df["signal"].to_numpy()
        ahead.append(np.corrcoef(s[1:-1], z)[0, 1])
        same.append(np.corrcoef(s[1:], r)[0, 1])
    se = 1.0 / np.sqrt(8 * 4000)
    assert abs(np.mean(ahead) - ic) < 3 * se
    assert abs(np.mean(same)) < 3 * se


def test_the_conditional_mean_is_what_the_column_plants():
    df, pl = signal_market(500, ic=0.1, seed=1)
    s = df["signal"].to_numpy()
    np.testing.assert_allclose(pl.cond_mean, 0.06 / 252 + 0.1 * pl.sigma * s, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(pl.info, s)


def test_the_frame_passes_the_data_checks_and_is_seeded():
    df, _ = signal_market(300, ic=0.05, seed=4, column="my_forecast")
    validate_ohlcv(df)
    assert "my_forecast" in df.columns
    again, _ = signal_market(300, ic=0.05, seed=4, column="my_forecast")
    assert df.equals(again)
    with pytest.raises(ValueError, match="ic must be in"):
        signal_market(300, ic=1.0)


def _filter_by_enumeration(r, sigma, drifts, p, nu):
    """E[r_{t+1} | r_0..r_t] by summing over every hidden path (2^(t+1) of them): the filter's
    independent reference on a short series."""
    from itertools import product

    from scipy.stats import t as student

    unit = np.sqrt((nu - 2.0) / nu)
    out = []
    for t in range(len(r)):
        weight = np.zeros(2)
        for path in product((0, 1), repeat=t + 1):
            prob, prev = 1.0, 0  # the chain is in state 0 before the first bar
            for k, s in enumerate(path):
                prob *= (1 - p) if s == prev else p
                prob *= student.pdf((r[k] - drifts[s]) / (sigma[k] * unit), nu)
                prev = s
            weight[path[-1]] += prob
        last = weight / weight.sum()
        move = np.array([[1 - p, p], [p, 1 - p]])
        out.append(float(last @ move @ drifts))
    return np.array(out)


def test_the_regime_filter_is_the_posterior_over_every_hidden_path():
    from riskppo.envs.market.planted import regime_filter

    rng = np.random.default_rng(3)
    drifts = np.array([0.01, -0.02])
    sigma = 0.01 + 0.01 * rng.random(9)
    r = rng.normal(0.0, 0.015, 9)
    got = regime_filter(r, sigma, drifts, 0.1, 5.0)
    np.testing.assert_allclose(got, _filter_by_enumeration(r, sigma, drifts, 0.1, 5.0), rtol=1e-9)


def test_the_regime_markets_forecast_uses_the_prices_alone_and_tracks_the_regime():
    """The filter's forecast follows the hidden drift (correlation well above 0) but knows less
    than the oracle that sees the regime; where nothing is hidden the forecast is the oracle's."""
    from riskppo.envs.market.planted import ar_market, regime_market

    _, planted = regime_market(3000, duration=250, seed=2)
    corr = np.corrcoef(planted.forecast[1:], planted.info[1:])[0, 1]
    assert 0.3 < corr < 0.95
    assert np.std(planted.forecast) < np.std(planted.cond_mean)
    _, ar = ar_market(500, phi=0.1, seed=1)
    assert ar.forecast is ar.cond_mean


def _returns_and_sigma(df, planted):
    """Each bar's log return and the volatility it was drawn with (known before the bar)."""
    r = np.concatenate(([np.nan], np.diff(np.log(df["close"].to_numpy()))))
    return r, np.concatenate(([np.nan], planted.sigma[:-1]))


def test_the_fitted_regime_filter_is_the_maximum_likelihood_and_follows_the_true_one():
    """Fitted on a long file's returns alone: the drifts have the planted signs, the likelihood
    is at least the true model's (the fit is its maximum), and the fitted filter's forecast
    follows the filter that knows the model."""
    from riskppo.envs.market.planted import (
        _filter_pass,
        fit_regime_filter,
        regime_filter,
        regime_market,
    )

    df, planted = regime_market(4000, duration=250, seed=5)
    r, sigma = _returns_and_sigma(df, planted)
    fit = fit_regime_filter(r, sigma, 5.0)
    assert fit.drifts[0] > 0 > fit.drifts[1]
    assert 1 / 1000 < fit.p < 1 / 40
    true = np.array([0.30, -0.20]) / 252
    assert fit.loglik >= _filter_pass(r, sigma, true, 1 / 250, 5.0, 0.5)[1]
    for drifts, p in (  # a maximum: every nearby model is less likely
        (fit.drifts * [1.1, 1.0], fit.p),
        (fit.drifts * [0.9, 1.0], fit.p),
        (fit.drifts * [1.0, 1.1], fit.p),
        (fit.drifts * [1.0, 0.9], fit.p),
        (fit.drifts, fit.p * 1.3),
        (fit.drifts, fit.p / 1.3),
    ):
        assert _filter_pass(r, sigma, drifts, p, 5.0, 0.5)[1] < fit.loglik
    forecast = regime_filter(r, sigma, fit.drifts, fit.p, 5.0, start=0.5)
    assert np.corrcoef(forecast[1:], planted.forecast[1:])[0, 1] > 0.9


def test_the_regime_filter_reads_no_later_bar_and_skips_unknown_ones():
    from riskppo.envs.market.planted import regime_filter

    rng = np.random.default_rng(0)
    r, sigma = rng.normal(0, 0.01, 200), np.full(200, 0.01)
    drifts = np.array([0.002, -0.002])
    base = regime_filter(r, sigma, drifts, 0.01, 5.0, start=0.5)
    later = r.copy()
    later[120:] += 0.05
    np.testing.assert_array_equal(
        regime_filter(later, sigma, drifts, 0.01, 5.0, start=0.5)[:120], base[:120]
    )
    gap = sigma.copy()
    gap[50] = np.nan  # a bar without a volatility tells nothing: the chain only moves on
    got = regime_filter(r, gap, drifts, 0.01, 5.0, start=0.5)
    np.testing.assert_array_equal(got[:50], base[:50])
    q = (base[49] - drifts[1]) / (drifts[0] - drifts[1])  # P(state 0) one bar after bar 49
    q2 = q * 0.99 + (1 - q) * 0.01
    assert got[50] == pytest.approx(q2 * drifts[0] + (1 - q2) * drifts[1], rel=1e-12)
