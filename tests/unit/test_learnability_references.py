"""The learnability suite's ``fitted`` reference (``benchmarks/_planted_refs.py``): the planted
model family with its numbers estimated on the training rows alone."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from tests.benchmark_modules import import_benchmark


@pytest.fixture(scope="module")
def refs() -> ModuleType:
    return import_benchmark("_planted_refs")


@pytest.mark.parametrize("market", ["regime250", "ar0.15"])
def test_the_fitted_forecast_reads_no_bar_after_its_training_rows(refs, market):
    """Prices after the training rows change neither the fitted numbers nor any earlier
    forecast; over its training rows the forecast follows the planted information."""
    df, planted = refs.make_market(market, 1500, 2)
    lo, hi = 100, 1000
    base = refs.fitted_forecast(market, df, lo, hi)
    later = df.copy()
    drift = np.exp(0.01 * np.arange(len(df) - hi))[:, None]
    later.iloc[hi:, :4] = later.iloc[hi:, :4].to_numpy() * drift  # open, high, low, close
    moved = refs.fitted_forecast(market, later, lo, hi)
    np.testing.assert_array_equal(moved[:hi], base[:hi])
    assert not np.array_equal(moved[hi:], base[hi:])
    assert np.corrcoef(base[lo:hi], planted.info[lo:hi])[0, 1] > 0.3
