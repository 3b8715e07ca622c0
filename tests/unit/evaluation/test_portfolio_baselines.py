"""skfolio baselines: valid weights, fitted on the training window only, held with the agent's
fills, costs and volatility targeting."""

from __future__ import annotations

import numpy as np
import pytest

from riskppo.envs.portfolio.data import PortfolioData, load_portfolio
from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.evaluation.portfolio.baselines import (
    BASELINES,
    baseline_records,
    fit_baselines,
    training_returns,
)

SYMS = ["AAPL", "JNJ", "XOM", "WMT"]
TRAIN, TEST = (1000, 1500), (1500, 1620)
ENV = {"features": ["ret_1", "vol_20"], "vol_span": 20, "fee": 0.001}


@pytest.fixture(scope="module")
def data() -> PortfolioData:
    return load_portfolio(dataset="sp500", symbols=SYMS)


def test_weights_are_long_only_and_fully_invested(data: PortfolioData) -> None:
    fitted = fit_baselines(data.close(), TRAIN)
    assert tuple(fitted) == BASELINES
    for name, w in fitted.items():
        assert w.shape == (4,) and (w >= 0).all(), name
        assert w.sum() == pytest.approx(1.0), name
    assert np.allclose(fitted["equal_weight"], 0.25)
    assert len({tuple(np.round(w, 6)) for w in fitted.values()}) == len(BASELINES)


def test_fitted_on_the_training_window_only(data: PortfolioData) -> None:
    close = data.close()
    base = fit_baselines(close, TRAIN)
    later = close.copy()
    later[TRAIN[1] :, 0] *= np.linspace(1.5, 3.0, len(later) - TRAIN[1])  # after the window
    earlier = close.copy()
    earlier[: TRAIN[0], 1] *= 2.0  # before it
    for changed in (later, earlier):
        for name, w in fit_baselines(changed, TRAIN).items():
            np.testing.assert_array_equal(w, base[name], err_msg=name)
    inside = close.copy()
    inside[TRAIN[0] + 200 :, 2] *= np.exp(
        np.random.default_rng(0).normal(0, 0.03, len(inside) - TRAIN[0] - 200)
    )
    moved = fit_baselines(inside, TRAIN)
    assert not np.allclose(moved["inverse_volatility"], base["inverse_volatility"])


def test_training_returns_window() -> None:
    close = np.arange(1.0, 11.0)[:, None] * np.ones((1, 2))
    r = training_returns(close, 2, 6)
    np.testing.assert_allclose(r[:, 0], [4 / 3 - 1, 5 / 4 - 1, 6 / 5 - 1])
    with pytest.raises(ValueError, match="fewer than two closes"):
        training_returns(close, 5, 6)


def test_records_hold_targets_with_the_agents_costs(data: PortfolioData) -> None:
    recs = baseline_records(data, train=TRAIN, test=TEST, names=["equal_weight", "hrp"], **ENV)
    ew = recs["equal_weight"]
    n = TEST[1] - 1 - TEST[0]
    assert ew.weights.shape == (n, 4) and ew.log_returns.shape == (n,)
    assert ew.bars[0] == TEST[0] and ew.bars[-1] == TEST[1] - 2
    scale = ew.weights.sum(axis=1)
    assert (scale > 0).all() and (scale <= 1.0 + 1e-12).all()
    np.testing.assert_allclose(
        ew.weights, np.repeat(scale[:, None] / 4, 4, axis=1)
    )  # vol-targeted 1/N
    assert ew.turnover[0] == pytest.approx(scale[0])  # from cash into the portfolio
    np.testing.assert_allclose(ew.costs, 0.001 * ew.turnover)
    # the same weights in the env directly: the same net log returns
    env = PortfolioEnv(
        data.head(TEST[1]),
        start=TEST[0],
        end=TEST[1],
        random_start=False,
        episode_length=None,
        **ENV,
    )  # type: ignore[arg-type]
    env.reset()
    total = 0.0
    for _ in range(n):
        total += float(env.step_weights(np.full(4, 0.25))[1])
    assert ew.log_returns.sum() == pytest.approx(total)
    assert (ew.turnover[1:] > 0).all()  # drift and scale changes are rebalanced and paid


def test_unsized_baseline_is_fully_invested(data: PortfolioData) -> None:
    recs = baseline_records(data, train=TRAIN, test=TEST, names=["min_cvar"], sizing="none", **ENV)
    rec = recs["min_cvar"]
    np.testing.assert_allclose(rec.weights, np.broadcast_to(rec.target, rec.weights.shape))


def test_train_overlapping_test_is_refused(data: PortfolioData) -> None:
    with pytest.raises(ValueError, match="overlap the test period"):
        baseline_records(data, train=(1000, 1600), test=TEST)
