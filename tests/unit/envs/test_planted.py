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
