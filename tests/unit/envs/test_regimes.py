"""The two-state regime filter (Hamilton 1989), its maximum-likelihood fit, and the causal
``regime_k`` feature built from them."""

from __future__ import annotations

import numpy as np
import pytest

from riskppo.envs.features import compute_features
from riskppo.envs.market.planted import regime_market


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
    from riskppo.envs.market.regimes import regime_filter

    rng = np.random.default_rng(3)
    drifts = np.array([0.01, -0.02])
    sigma = 0.01 + 0.01 * rng.random(9)
    r = rng.normal(0.0, 0.015, 9)
    got = regime_filter(r, sigma, drifts, 0.1, 5.0)
    np.testing.assert_allclose(got, _filter_by_enumeration(r, sigma, drifts, 0.1, 5.0), rtol=1e-9)


def _returns_and_sigma(df, planted):
    """Each bar's log return and the volatility it was drawn with (known before the bar)."""
    r = np.concatenate(([np.nan], np.diff(np.log(df["close"].to_numpy()))))
    return r, np.concatenate(([np.nan], planted.sigma[:-1]))


def test_the_fitted_regime_filter_is_the_maximum_likelihood_and_follows_the_true_one():
    """Fitted on a long file's returns alone: the drifts have the planted signs, the likelihood
    is at least the true model's (the fit is its maximum), and the fitted filter's forecast
    follows the filter that knows the model."""
    from riskppo.envs.market.regimes import _filter_pass, fit_regime_filter, regime_filter

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
    from riskppo.envs.market.regimes import regime_filter

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


def test_a_bounded_fit_keeps_regimes_where_a_short_sample_fits_a_flip_flop():
    """On 500 bars of a slow regime file the unbounded fit can prefer a state that flips almost
    every bar (it fits noise); ``max_p`` keeps the switching probability a regime's, and the
    bounded fit is still a likelihood maximum inside its bound."""
    from riskppo.envs.market.estimators import ewm_volatility
    from riskppo.envs.market.regimes import _filter_pass, fit_regime_filter

    df, _ = regime_market(2600, duration=250, seed=2)
    close = df["close"].to_numpy()[:500]
    r = np.concatenate(([np.nan], np.diff(np.log(close))))
    sigma = np.concatenate(([np.nan], ewm_volatility(close, 60, 1.0)[:-1]))
    free = fit_regime_filter(r, sigma, 5.0)
    bounded = fit_regime_filter(r, sigma, 5.0, max_p=0.05)
    assert free.p > 0.5  # the flip-flop
    assert bounded.p <= 0.05 and bounded.loglik < free.loglik
    for scale in (1.1, 0.9):
        drifts = bounded.drifts * [scale, 1.0]
        assert _filter_pass(r, sigma, drifts, bounded.p, 5.0, 0.5)[1] < bounded.loglik
    with pytest.raises(ValueError, match="max_p must be in"):
        fit_regime_filter(r, sigma, 5.0, max_p=0.0)


def _perturb_after(df, t, rng):
    out = df.copy()
    out.iloc[t + 1 :, :] *= np.exp(rng.normal(0.0, 0.02, (len(df) - t - 1, 1)))
    return out


def test_the_regime_feature_reads_no_later_bar_across_its_refits():
    """Bars after ``t`` changed (prices scaled by a random walk from ``t + 1`` on) leave every
    value at rows ``<= t`` unchanged, for ``t`` on both sides of a refit; later rows move."""
    df, _ = regime_market(600, duration=100, seed=1)
    base = compute_features(df, ["regime_120"])
    assert base.warmup == 120
    assert np.isnan(base.values[:120]).all() and np.isfinite(base.values[120:]).all()
    rng = np.random.default_rng(0)
    for t in (119, 120, 239, 240, 241, 450):
        moved = compute_features(_perturb_after(df, t, rng), ["regime_120"]).values
        np.testing.assert_array_equal(moved[: t + 1], base.values[: t + 1], err_msg=f"t={t}")
        assert not np.array_equal(moved[t + 1 :], base.values[t + 1 :])
    with pytest.raises(ValueError, match="needs k >= 110"):
        compute_features(df, ["regime_100"])


def test_each_regime_value_is_the_filter_of_the_last_fit_before_it():
    """Row ``t`` is the filter's forecast, with the model fitted on ``r_1 … r_s`` for the last
    refit bar ``s <= t``, per the EWM volatility at ``t``; and on a long regime file it follows
    the filter that knows the true model."""
    from riskppo.envs.market.estimators import ewm_volatility
    from riskppo.envs.market.regimes import fit_regime_filter, regime_filter

    df, planted = regime_market(3000, duration=250, seed=5)
    got = compute_features(df, ["regime_250"]).values[:, 0]
    close = df["close"].to_numpy()
    r = np.concatenate(([np.nan], np.diff(np.log(close))))
    vol = ewm_volatility(close, 60, 1.0)
    before = np.concatenate(([np.nan], vol[:-1]))
    for t in (250, 499, 500, 1777, 2999):
        s = t // 250 * 250
        fit = fit_regime_filter(r[: s + 1], before[: s + 1], 5.0, max_p=0.05)
        want = regime_filter(r[: t + 1], before[: t + 1], fit.drifts, fit.p, 5.0, start=0.5)[t]
        assert got[t] == pytest.approx(want / vol[t], rel=1e-5)  # float32 feature matrix
    late = slice(1000, None)
    assert np.corrcoef(got[late], planted.forecast[late] / vol[late])[0, 1] > 0.7
