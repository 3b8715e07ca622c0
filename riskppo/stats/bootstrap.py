"""Block-bootstrap statistics of a return record: a Sharpe interval and a paired Sharpe test.

The resampling half of :mod:`riskppo.stats` (conventions there and in
:mod:`~riskppo.stats.core`). Stationary-bootstrap indices (Politis & Romano 1994) come from
``arch``'s ``StationaryBootstrap``; circular block indices (Politis & Romano 1992) from
:func:`circular_indices` (uniform block starts, whole blocks laid end to end, as ``arch``'s
``CircularBlockBootstrap`` lays them, drawn for a whole chunk at once). Seeded; every statistic is
computed on whole rows of a ``[rows, T]`` resample matrix at once, in chunks of :data:`CHUNK`
rows to bound memory.

Default block length: the largest Politis & White (2004) optimal length (with the correction of
Patton, Politis & White 2009; ``arch.bootstrap.optimal_block_length``) over the returns **and
their squares**: a Sharpe ratio depends on the second moment too, and the squares carry the
volatility clustering that the (nearly uncorrelated) returns do not show. The paired test keeps
its blocks at least :func:`min_block_length` long.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from riskppo.stats.core import (
    Interval,
    PairedTest,
    as_pair,
    as_returns,
    normal_test,
    per_bar_sharpe,
    sharpe_difference_influence,
)

__all__ = [
    "CHUNK",
    "block_variance",
    "bootstrap_indices",
    "circular_indices",
    "default_block_length",
    "min_block_length",
    "sharpe_ci",
    "sharpe_difference_bootstrap",
]

Array = NDArray[np.float64]
CHUNK = 1000
"""Resamples evaluated per vectorised chunk (a ``[CHUNK, T]`` float array at a time)."""

_METHODS = ("stationary", "circular")


def default_block_length(series: Array, method: str) -> int:
    """Block length for ``series`` ``[T, k]`` (columns: the returns and their squares): the
    largest Politis–White optimal length over the columns for ``method``, rounded up and kept
    in ``[1, T // 4]``."""
    from arch.bootstrap import optimal_block_length  # arch: ~1.5 s to import

    table = optimal_block_length(series)
    column = "stationary" if method == "stationary" else "circular"
    best = float(np.nanmax(table[column].to_numpy())) if table[column].notna().any() else 1.0
    return int(min(max(math.ceil(best), 1), max(series.shape[0] // 4, 1)))


def _check_block(block: int | None, n: int) -> int | None:
    if block is None:
        return None
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or not 1 <= block <= n:
        raise ValueError(f"block must be an integer in [1, {n}], got {block!r}")
    return int(block)


def _check_ppy(periods_per_year: float) -> float:
    if not periods_per_year > 0 or not math.isfinite(periods_per_year):
        raise ValueError(f"periods_per_year must be a positive number, got {periods_per_year!r}")
    return float(periods_per_year)


def _check_resamples(n_resamples: int) -> int:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)):
        raise ValueError(f"n_resamples must be an integer >= 100, got {n_resamples!r}")
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be an integer >= 100, got {n_resamples!r}")
    return int(n_resamples)


def min_block_length(n: int) -> int:
    """The paired test's shortest block for ``n`` bars: ``round(n^(1/3))`` (7 at 350 bars, 11 at
    1,250), the rate at which the block bootstrap's optimal block grows for a variance (Hall,
    Horowitz & Jing 1995). Measured on GARCH(1,1)-t pairs of 350 bars
    (``benchmarks/stats_calibration.py``): Politis–White alone picks 2–4 bars for some records,
    blocks too short to carry their volatility clustering, and the test then rejects a true null
    more often than its level."""
    return max(1, round(n ** (1.0 / 3.0)))


def circular_indices(
    n: int, n_resamples: int, block: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """``[n_resamples, n]`` circular block bootstrap indices (Politis & Romano 1992): each row
    is ``ceil(n / block)`` blocks of ``block`` consecutive bars (wrapping past the end) with
    starts ``rng.integers(0, n)``, drawn row by row in one call, laid end to end from column 0 and
    cut at ``n``."""
    n_blocks = -(-n // block)
    starts = rng.integers(0, n, size=(n_resamples, n_blocks))
    idx = (starts[:, :, None] + np.arange(block)) % n
    return idx.reshape(n_resamples, n_blocks * block)[:, :n]


def bootstrap_indices(
    n: int, n_resamples: int, block: int, method: str, seed: int
) -> NDArray[np.int64]:
    """``[n_resamples, n]`` resample indices from arch's stationary bootstrap (mean block
    ``block``) or :func:`circular_indices` (fixed block ``block``), seeded with
    ``np.random.default_rng(seed)``."""
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    rng = np.random.default_rng(seed)
    if method == "circular":
        return circular_indices(n, n_resamples, block, rng)
    from arch.bootstrap import StationaryBootstrap

    sampler = StationaryBootstrap(block, np.arange(n), seed=rng)
    return np.stack([sampler.update_indices() for _ in range(n_resamples)])


def _row_sharpes(rows: Array) -> Array:
    """Per-bar Sharpe ratio (ddof=1) of each row of ``[R, T]``; ``nan`` for a constant row."""
    sd = rows.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.ptp(rows, axis=1) > 0.0, rows.mean(axis=1) / sd, np.nan)


def sharpe_ci(
    r: ArrayLike,
    periods_per_year: float,
    *,
    n_resamples: int = 5000,
    block: int | None = None,
    method: str = "stationary",
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Annualised Sharpe ratio of ``r`` with a block-bootstrap percentile interval at ``level``.

    ``method="stationary"`` resamples blocks of geometric length with mean ``block`` (Politis &
    Romano 1994); ``"circular"`` fixed blocks with wrap-around. ``block=None`` picks the
    Politis–White length (module docstring). Seeded: the same inputs give the same interval.
    """
    x = as_returns(r, "r")
    _check_ppy(periods_per_year)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    reps = _check_resamples(n_resamples)
    ann = math.sqrt(periods_per_year)
    estimate = per_bar_sharpe(x) * ann
    if math.isnan(estimate):
        return Interval(math.nan, math.nan, math.nan, level)
    blk = _check_block(block, x.size) or default_block_length(np.column_stack([x, x * x]), method)
    idx = bootstrap_indices(x.size, reps, blk, method, seed)
    sharpes = np.concatenate([_row_sharpes(x[idx[i : i + CHUNK]]) for i in range(0, reps, CHUNK)])
    low, high = np.nanquantile(sharpes * ann, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return Interval(estimate=estimate, low=float(low), high=float(high), level=level)


def block_variance(v: Array, block: int) -> float:
    """The circular block bootstrap's own variance of ``mean(v*)`` for a series ``v`` ``[T]``
    that sums to zero: ``Σ_i S_i² / (block · T²)``, ``S_i`` the sum of ``block`` consecutive
    values from bar ``i`` (wrapping), i.e. the Bartlett-kernel long-run variance with circular
    autocovariances and lag window ``block``, over ``T``. Studentising the observed statistic
    with it and each resample with its own blocks (:func:`_studentised_rows`) is Götze & Künsch's
    (1996) pairing, under which the studentised block bootstrap is second-order correct."""
    n = v.size
    cum = np.concatenate([[0.0], np.cumsum(np.concatenate([v, v[: block - 1]]))])
    sums = cum[block : block + n] - cum[:n]
    return float(sums @ sums) / (block * n * n)


def _studentised_rows(xs: Array, ys: Array, block: int, observed: float) -> Array:
    """``(Δ* - Δ̂) / se*`` for each resampled pair of rows ``[R, T]``: Δ* the per-bar Sharpe
    difference of the rows, se* Ledoit & Wolf's (2008, §3.2) "natural" block standard error
    ``sqrt(Σ_j S_j² / T²)``, ``S_j`` the sum of the rows' influence values
    (:func:`~riskppo.stats.core.sharpe_difference_influence`) over bootstrap block j. ``nan``
    where a row has no spread."""

    def part(rows: Array) -> Array:
        mu, sd = rows.mean(axis=1, keepdims=True), rows.std(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = (rows - mu) / sd
            return u - 0.5 * (mu / sd) * (u * u - 1.0)

    n_rows, n = xs.shape
    v = part(xs) - part(ys)
    n_blocks = -(-n // block)
    padded = np.zeros((n_rows, n_blocks * block))
    padded[:, :n] = v
    sums = padded.reshape(n_rows, n_blocks, block).sum(axis=2)
    se = np.sqrt((sums * sums).sum(axis=1)) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        return (_row_sharpes(xs) - _row_sharpes(ys) - observed) / se


def sharpe_difference_bootstrap(
    a: ArrayLike,
    b: ArrayLike,
    periods_per_year: float,
    *,
    n_resamples: int = 5000,
    block: int | None = None,
    seed: int = 0,
) -> PairedTest:
    """Ledoit & Wolf (2008, §3.2) studentised circular block bootstrap test of equal Sharpe
    ratios: the same block indices resample ``a`` and ``b`` together.

    The observed statistic is ``t = Δ̂ / sqrt(block_variance(v))``, Δ̂ the per-bar Sharpe
    difference (ddof=1) and ``v`` its influence series (:func:`block_variance`: Götze & Künsch
    1996); each resample's ``t* = (Δ* - Δ̂)/se*`` is centred at the **observed** difference Δ̂
    (so the resamples mimic the null's sampling distribution) and studentised by its own block
    standard error. Ledoit & Wolf's (Remark 3.2) p-value, one-sided: ``p_one_sided = (1 + #{t* >=
    t}) / (R + 1)`` over the R resamples with a defined ``t*``; ``p_two_sided`` likewise with
    ``|t*| >= |t|``. ``block=None``: the Politis–White length (module docstring), at least
    :func:`min_block_length`. Records whose influence series is 0 throughout (equal Sharpe
    ratios and standardised returns, e.g. identical records) give ``t = 0``, ``p = 0.5``, as the
    HAC test does. Seeded: ``np.random.default_rng(seed)`` draws the chunks' indices in turn.
    """
    ppy = _check_ppy(periods_per_year)
    x, y = as_pair(a, b)
    reps = _check_resamples(n_resamples)
    method = "ledoit-wolf-bootstrap"
    sa, sb = per_bar_sharpe(x), per_bar_sharpe(y)
    v = sharpe_difference_influence(x, y)
    if math.isnan(sa) or math.isnan(sb) or not np.any(v):
        return normal_test(sa - sb, 0.0 if sa == sb else math.nan, ppy, method)
    cols = np.column_stack([x, y, x * x, y * y])
    blk = _check_block(block, x.size) or max(
        default_block_length(cols, "circular"), min_block_length(x.size)
    )
    delta = sa - sb
    t_obs = delta / math.sqrt(block_variance(v, blk))
    rng = np.random.default_rng(seed)
    chunks = (
        circular_indices(x.size, min(CHUNK, reps - i), blk, rng) for i in range(0, reps, CHUNK)
    )
    t_star = np.concatenate([_studentised_rows(x[j], y[j], blk, delta) for j in chunks])
    t_star = t_star[np.isfinite(t_star)]
    if t_star.size == 0:
        return PairedTest(delta * math.sqrt(ppy), t_obs, math.nan, math.nan, method)
    p_one = (1.0 + np.count_nonzero(t_star >= t_obs)) / (t_star.size + 1.0)
    p_two = (1.0 + np.count_nonzero(np.abs(t_star) >= abs(t_obs))) / (t_star.size + 1.0)
    return PairedTest(delta * math.sqrt(ppy), t_obs, float(p_one), float(p_two), method)
