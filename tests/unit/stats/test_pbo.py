"""CSCV probability of backtest overfitting (Bailey, Borwein, López de Prado & Zhu 2017) against a
maintained implementation and on simulated searches with and without a real edge."""

from __future__ import annotations

import math

import numpy as np
import pytest

from riskppo.stats.pbo import cscv_splits, probability_of_backtest_overfitting

# (seed, T, N, S, edge per bar added to column 0, ties) → (ffn's pbo, ffn's mean_oos_rank).
# Computed with ffn 1.4.1 (pip install ffn; not a dependency of riskppo):
#   m = rng.standard_normal((T, N)) * 0.01
#   (ties: 4 columns drawn so, then repeated as columns [0, 0, 1, 2, 2, 3])
#   m[:, 0] += edge
#   ffn.core.calc_prob_backtest_overfitting(pd.DataFrame(m), n_blocks=S, full_output=True)
# with rng = np.random.default_rng(seed). ffn's default metric (per-bar Sharpe, ddof=1), its
# block cut (np.array_split of the first T // S * S rows), its ranks (average on ties, ω = rank /
# (N + 1)) and its in-sample tie rule (first column) are the ones implemented here; its logits
# equalled ours to 0.0 on every case.
FFN_REFERENCE = [
    ((0, 250, 5, 16, 0.0, False), (0.04685314685314685, 0.7975524475524476)),
    ((1, 1000, 10, 16, 0.0, False), (0.13543123543123542, 0.7004732641096276)),
    ((2, 503, 4, 8, 0.0, False), (0.18571428571428572, 0.6971428571428571)),
    ((3, 600, 6, 10, 0.002, False), (0.0, 0.857142857142857)),
    ((4, 64, 3, 4, 0.0, False), (0.6666666666666666, 0.5)),
    ((5, 400, 6, 8, 0.0, True), (0.5, 0.4683673469387755)),
    ((6, 400, 6, 8, 0.0, True), (0.6714285714285714, 0.3734693877551021)),
]


def _matrix(seed: int, t: int, n: int, edge: float, ties: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ties:  # equal columns: ties in sample (the first wins) and out of sample (average rank)
        m = (rng.standard_normal((t, 4)) * 0.01)[:, [0, 0, 1, 2, 2, 3]]
    else:
        m = rng.standard_normal((t, n)) * 0.01
    m[:, 0] += edge
    return m


@pytest.mark.parametrize(("case", "expected"), FFN_REFERENCE)
def test_pbo_equals_ffn(case, expected):
    seed, t, n, s, edge, ties = case
    out = probability_of_backtest_overfitting(_matrix(seed, t, n, edge, ties), n_blocks=s)
    assert out.pbo == pytest.approx(expected[0], abs=1e-12)
    assert float(out.oos_rank.mean()) == pytest.approx(expected[1], abs=1e-12)
    assert out.n_splits == math.comb(s, s // 2)


def test_splits_are_balanced_and_complements_come_in_pairs():
    splits = cscv_splits(6)
    assert splits.shape == (20, 6) and (splits.sum(axis=1) == 3).all()
    rows = {tuple(r) for r in splits}
    assert all(tuple(~r) in rows for r in splits)


def test_no_skill_search_overfits_about_half_the_time():
    """N configurations of pure noise: selecting the in-sample best tells nothing, PBO ≈ 1/2 or
    more (with few configurations the median rank is often the selected one's)."""
    for n in (5, 20):
        values = [
            probability_of_backtest_overfitting(
                np.random.default_rng(s).standard_normal((1000, n)) * 0.01
            ).pbo
            for s in range(60)
        ]
        assert np.mean(values) >= 0.45, (n, np.mean(values))


def test_one_real_edge_among_noise_gives_a_small_pbo():
    """One configuration with an annual Sharpe ratio of 2 among nine of noise (1,000 bars)."""
    values = []
    for s in range(60):
        m = np.random.default_rng(1000 + s).standard_normal((1000, 10)) * 0.01
        m[:, 3] += 2.0 / math.sqrt(252) * 0.01
        out = probability_of_backtest_overfitting(m)
        values.append(out.pbo)
    assert np.mean(values) < 0.2, np.mean(values)


def test_degradation_and_flat_configuration():
    """The selected configuration's in- and out-of-sample Sharpe ratios are reported; a column
    that never moves has Sharpe 0 (not an undefined PBO)."""
    m = _matrix(7, 320, 4, 0.0, False)
    m[:, 2] = 0.0
    out = probability_of_backtest_overfitting(m, n_blocks=8)
    assert math.isfinite(out.pbo) and math.isfinite(out.slope)
    assert out.is_best.shape == out.oos_of_best.shape == (70,)
    assert 0.0 <= out.prob_oos_loss <= 1.0


@pytest.mark.parametrize(
    ("shape", "blocks", "match"),
    [((100, 1), 4, "N >= 2"), ((3, 2), 4, "cannot be cut"), ((100, 3), 5, "even")],
)
def test_bad_input_is_one_clear_error(shape, blocks, match):
    with pytest.raises(ValueError, match=match):
        probability_of_backtest_overfitting(np.ones(shape), n_blocks=blocks)
