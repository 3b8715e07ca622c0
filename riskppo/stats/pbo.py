"""The probability of backtest overfitting (PBO) by combinatorially symmetric cross-validation.

Bailey, Borwein, López de Prado & Zhu (2017), "The Probability of Backtest Overfitting",
Journal of Computational Finance 20(4), 39–69, §2.1 (CSCV) and §2.3 (performance degradation).

Given the per-bar returns of ``N`` configurations on the same ``T`` bars, the bars are cut into
``S`` contiguous blocks of equal length (bars past a multiple of ``S`` are dropped from the
end); every choice of ``S/2`` blocks is an in-sample half and its complement the out-of-sample
half. In each of the ``C(S, S/2)`` splits the configuration with the best in-sample metric is
"selected", and its out-of-sample relative rank ``ω = rank / (N + 1)`` (average ranks for ties)
gives the logit ``λ = ln(ω / (1 - ω))``. PBO is the share of splits with ``λ ≤ 0``: the
selected configuration did no better than the median out of sample. If selecting the best
in-sample carries no information, ``ω`` is uniform and PBO ≈ 1/2.

The metric is the per-bar Sharpe ratio ``mean / std(ddof=1)``, the in-sample tie goes to the
first column — both as in ``ffn.core.calc_prob_backtest_overfitting`` (ffn 1.4.1), which the
tests check this module against. One deliberate difference: a configuration whose returns do
not vary within a half (an agent that never traded) has Sharpe ratio 0 there, where ffn makes
the whole PBO undefined.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

__all__ = ["PBO", "cscv_splits", "probability_of_backtest_overfitting"]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class PBO:
    """The outcome of CSCV over ``n_splits = C(S, S/2)`` splits of ``n_bars`` bars.

    ``pbo``: share of splits whose logit is ≤ 0. ``logits``, ``oos_rank``: per split ``[C]``,
    in :func:`cscv_splits` order; ``is_best``/``oos_of_best``: the selected configuration's
    per-bar Sharpe ratio in and out of sample ``[C]``. Performance degradation (§2.3): the OLS
    fit ``oos_of_best = intercept + slope × is_best`` (a negative slope: the better it looked
    in sample, the worse it did out of sample) and ``prob_oos_loss``, the share of splits in
    which the selected configuration lost money out of sample (Sharpe < 0).
    """

    pbo: float
    n_configs: int
    n_bars: int
    n_blocks: int
    logits: Array
    oos_rank: Array
    is_best: Array
    oos_of_best: Array
    slope: float
    intercept: float
    prob_oos_loss: float

    @property
    def n_splits(self) -> int:
        return int(self.logits.size)


def cscv_splits(n_blocks: int) -> NDArray[np.bool_]:
    """``[C(S, S/2), S]``: row ``c`` marks the in-sample blocks of split ``c``, in
    ``itertools.combinations(range(S), S/2)`` order."""
    if n_blocks < 2 or n_blocks % 2:
        raise ValueError(f"n_blocks must be an even integer >= 2, got {n_blocks}")
    combos = itertools.combinations(range(n_blocks), n_blocks // 2)
    out = np.zeros((math.comb(n_blocks, n_blocks // 2), n_blocks), dtype=bool)
    for row, chosen in enumerate(combos):
        out[row, list(chosen)] = True
    return out


def _half_sharpe(count: float, shift: Array, total: Array, total_sq: Array) -> Array:
    """Per-bar Sharpe ``mean / std(ddof=1)`` of each (split, configuration) half ``[C, N]`` from
    its bar ``count`` and the sum and sum of squares of its returns less ``shift`` ``[N]`` (each
    column's overall mean: the variance is computed from small numbers, so it stays accurate);
    0 where the half does not vary."""
    centred_mean = total / count
    var = np.maximum(total_sq - count * centred_mean**2, 0.0) / (count - 1.0)
    std = np.sqrt(var)
    mean = shift + centred_mean
    flat = std <= 1e-12 * np.maximum(np.abs(mean), 1e-300)
    return np.where(flat, 0.0, mean / np.where(flat, 1.0, std))


def probability_of_backtest_overfitting(returns: ArrayLike, n_blocks: int = 16) -> PBO:
    """CSCV PBO of the ``[T, N]`` per-bar returns of ``N ≥ 2`` configurations (columns) on the
    same ``T`` bars (rows, oldest first); ``n_blocks`` ``S``: even, ``2 ≤ S ≤ T``. Returns are
    simple or log, per bar; only their Sharpe ratios enter. ``ValueError`` on non-finite
    values or a shape that cannot be split."""
    m = np.asarray(returns, dtype=np.float64)
    if m.ndim != 2 or m.shape[1] < 2:
        raise ValueError(f"returns must be a [T, N] matrix with N >= 2 columns, got {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError("returns must be finite")
    splits = cscv_splits(n_blocks)
    block = m.shape[0] // n_blocks
    if block < 1:
        raise ValueError(f"{m.shape[0]} bars cannot be cut into {n_blocks} blocks")
    m = m[: block * n_blocks]
    shift = m.mean(axis=0)
    centred = (m - shift).reshape(n_blocks, block, -1)
    sums, squares = centred.sum(axis=1), (centred**2).sum(axis=1)  # [S, N] per block
    count = float(block * (n_blocks // 2))
    is_w, oos_w = splits.astype(np.float64), (~splits).astype(np.float64)  # [C, S]
    is_perf = _half_sharpe(count, shift, is_w @ sums, is_w @ squares)
    oos_perf = _half_sharpe(count, shift, oos_w @ sums, oos_w @ squares)
    return _pbo_from_halves(is_perf, oos_perf, m.shape[0], n_blocks)


def _pbo_from_halves(is_perf: Array, oos_perf: Array, n_bars: int, n_blocks: int) -> PBO:
    """The PBO record from each split's in-sample and out-of-sample metric ``[C, N]``."""
    n = is_perf.shape[1]
    best = np.argmax(is_perf, axis=1)  # first column on ties
    ranks = sps.rankdata(oos_perf, method="average", axis=1)
    rows = np.arange(is_perf.shape[0])
    omega = ranks[rows, best] / (n + 1.0)
    logits = np.log(omega / (1.0 - omega))
    is_best, oos_best = is_perf[rows, best], oos_perf[rows, best]
    slope, intercept = _ols(is_best, oos_best)
    return PBO(
        pbo=float(np.mean(logits <= 0.0)),
        n_configs=n,
        n_bars=n_bars,
        n_blocks=n_blocks,
        logits=logits,
        oos_rank=omega,
        is_best=is_best,
        oos_of_best=oos_best,
        slope=slope,
        intercept=intercept,
        prob_oos_loss=float(np.mean(oos_best < 0.0)),
    )


def _ols(x: Array, y: Array) -> tuple[float, float]:
    """``(slope, intercept)`` of ``y = intercept + slope × x``; slope ``nan`` if ``x`` is
    constant."""
    dx = x - x.mean()
    sxx = float(dx @ dx)
    slope = float(dx @ (y - y.mean())) / sxx if sxx > 0 else math.nan
    intercept = float(y.mean() - (slope if math.isfinite(slope) else 0.0) * x.mean())
    return slope, intercept
