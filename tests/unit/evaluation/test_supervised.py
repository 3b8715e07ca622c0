"""The supervised baseline: the ridge against scikit-learn's, its cross-validated penalty, the
signal map, and on a planted market a forecast that finds the planted information."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from riskppo.envs import TradingEnv
from riskppo.envs.market.planted import ar_market
from riskppo.evaluation.supervised import fit_ridge, forecast_signals, supervised_signals


def test_the_ridge_is_scikit_learns_on_standardised_features():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5)) * [1.0, 3.0, 0.1, 2.0, 1.0] + 4.0
    y = x @ [0.5, 0.0, 2.0, -0.3, 0.0] + rng.normal(size=400)
    fit = fit_ridge(x, y)
    z = (x - x.mean(0)) / x.std(0)
    ref = Ridge(alpha=fit.penalty * len(y)).fit(z, y)
    np.testing.assert_allclose(fit.w, ref.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fit.predict(x), ref.predict(z), rtol=1e-8, atol=1e-10)


def test_cross_validation_shrinks_noise_and_keeps_a_signal():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(600, 8))
    noise_fit = fit_ridge(x, rng.normal(size=600))
    signal_fit = fit_ridge(x, x[:, 0] + 0.5 * rng.normal(size=600))
    assert noise_fit.penalty > signal_fit.penalty
    assert np.argmax(np.abs(signal_fit.w)) == 0
    with pytest.raises(ValueError, match="fit_ridge: need >= 10 rows"):
        fit_ridge(x[:5], x[:5, 0])


def test_forecasts_map_into_the_band():
    f = np.array([-1.0, 0.0, 0.5, 1.0, 10.0])
    s = forecast_signals(f, 0.5, (0.25, 1.0))
    np.testing.assert_allclose(s, [0.25, 0.625, 0.8125, 1.0, 1.0])
    assert forecast_signals(np.array([0.1, -0.1]), 0.0, (0.0, 1.0)).tolist() == [1.0, 0.0]


def test_on_a_planted_momentum_the_forecast_follows_the_last_return():
    df, planted = ar_market(2500, phi=0.15, seed=2)
    kwargs = {"continuous": True, "long_only": True, "min_signal": 0.25, "random_start": False,
              "features": ["vret_1", "vret_20", "vret_250", "rsi_14"]}  # fmt: skip
    train = TradingEnv(df, start=0, end=1800, **kwargs)
    test = TradingEnv(df, start=1800, **kwargs)
    signals, fit = supervised_signals(train, test)
    lo, hi = test.trading_range
    corr = np.corrcoef(signals[lo:hi], planted.info[lo:hi])[0, 1]
    assert corr > 0.6, corr
    assert fit.w[list(train.feature_names).index("vret_1")] > 0
