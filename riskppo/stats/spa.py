"""Does any of K candidates beat a benchmark, and which do? Hansen's (2005) test of superior
predictive ability and Romano & Wolf's (2005) StepM, with the candidates' dependence left in.

Part of :mod:`riskppo.stats` (conventions in :mod:`~riskppo.stats.core`). Šidák's adjustment
(:func:`~riskppo.stats.core.adjust_p`) treats N tries as independent and is conservative for
configurations of one agent, whose records move together; these tests resample all K records
with the same bootstrap indices, so their correlation is in the null distribution.

* Hansen, P. R. (2005), "A Test for Superior Predictive Ability", Journal of Business &
  Economic Statistics 23(4), 365–380: H0 "no candidate beats the benchmark", statistic
  ``max_k √T d̄_k / ω̂_k`` over the candidates' mean loss differentials ``d̄_k``, each recentred
  in the bootstrap only when it is not far below zero (the *consistent* p-value; *lower* never
  recentres a candidate worse than the benchmark, *upper* recentres all: White's 2000 Reality
  Check with studentised differentials).
* Romano, J. P. & Wolf, M. (2005), "Stepwise Multiple Testing as Formalized Data Snooping",
  Econometrica 73(4), 1237–1282: the candidates that beat the benchmark, with the familywise
  error rate held at ``size`` (step down: reject, drop the rejected, test the rest again).

Both run on ``arch.bootstrap.SPA`` (stationary bootstrap, Politis & Romano 1994), StepM's
steps written out in :func:`_step_down`. arch (8.0) recentres but does not divide by ``ω̂_k``
(its ``studentize`` flag only names the method), so the differentials are studentised here
before they are passed in:
``z_k = d_k / ω̂_k``, with ``ω̂_k²`` Hansen's stationary-bootstrap long-run variance
(:func:`stationary_bootstrap_variance`). arch then sees a zero benchmark and candidate losses
``-z_k``; its consistency threshold on ``z`` is Hansen's on ``d``.

The loss (:func:`sharpe_differentials`): each candidate's returns scaled to the benchmark's
volatility, ``d_k,t = r_k,t · σ̂_b / σ̂_k − r_b,t``. Its mean is exactly ``σ̂_b (SR̂_k − SR̂_b)``
(per-bar Sharpe ratios, ``std(ddof=1)``), so "some candidate has a higher mean risk-adjusted
return" is "some candidate has a higher Sharpe ratio". A Sharpe ratio does not change with
leverage, so comparing raw mean returns would reward the candidate that took more risk; the
volatility scaling removes that. The bootstrap holds ``σ̂_b / σ̂_k`` fixed: the sampling error
of the volatilities adds ``SR_bar² / 2`` (normal returns) to the variance of a per-bar Sharpe
ratio, which is below 1% of it for annual Sharpe ratios under 2 on daily bars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from riskppo.stats.bootstrap import _check_block, _check_resamples, default_block_length
from riskppo.stats.core import as_returns

if TYPE_CHECKING:
    from arch.bootstrap import SPA

__all__ = [
    "SuperiorAbility",
    "sharpe_differentials",
    "stationary_bootstrap_variance",
    "superior_ability",
]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class SuperiorAbility:
    """Hansen's SPA and Romano & Wolf's StepM over ``n_candidates`` candidates against one
    benchmark on the same ``n_bars`` bars.

    ``p_consistent`` (the test's p-value), ``p_lower``, ``p_upper``: SPA p-values of H0 "no
    candidate's Sharpe ratio exceeds the benchmark's" (module docstring), each
    ``(1 + #{T* > T}) / (n_resamples + 1)`` (Phipson & Smyth 2010). ``superior``: the column
    indices (ascending) that StepM finds better than the benchmark with familywise error
    ``size``. ``sharpe_diff`` ``[K]``: annual ``Sharpe(candidate) − Sharpe(benchmark)``;
    ``t_stats`` ``[K]``: ``√T d̄_k / ω̂_k`` (0 for a candidate no different from the benchmark).
    ``block``: the stationary bootstrap's mean block length in bars.
    """

    p_consistent: float
    p_lower: float
    p_upper: float
    superior: tuple[int, ...]
    sharpe_diff: Array
    t_stats: Array
    size: float
    n_candidates: int
    n_bars: int
    block: int
    n_resamples: int


def _as_candidates(candidates: ArrayLike, n_bars: int) -> Array:
    """``candidates`` as a finite ``[T, K]`` float array (``K ≥ 1``), else a ``ValueError``."""
    try:
        m = np.asarray(candidates, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"candidates must be an array of numbers: {exc}") from None
    if m.ndim != 2 or m.shape[1] < 1 or m.shape[0] != n_bars:
        raise ValueError(
            f"candidates must be a [T, K] matrix with T = {n_bars} rows (the benchmark's bars) "
            f"and K >= 1 columns, got shape {m.shape}"
        )
    bad = np.argwhere(~np.isfinite(m))
    if bad.size:
        t, k = bad[0]
        raise ValueError(f"candidates has a non-finite value {m[t, k]} at bar {t}, column {k}")
    return m


def sharpe_differentials(benchmark: Array, candidates: Array) -> Array:
    """``[T, K]`` per-bar loss differentials ``d_k,t = r_k,t · σ̂_b / σ̂_k − r_b,t`` (benchmark
    loss minus candidate loss, losses ``−return``; σ̂: ``std(ddof=1)``). A candidate whose
    returns never vary takes no risk: its scaled return is 0 (a Sharpe ratio of 0, as
    :mod:`~riskppo.stats.pbo` scores a flat half). ``ValueError`` for a constant benchmark."""
    if np.ptp(benchmark) == 0.0:
        raise ValueError("benchmark never varies: it has no Sharpe ratio to beat")
    sd_b = float(benchmark.std(ddof=1))
    sd = candidates.std(axis=0, ddof=1)
    flat = np.ptp(candidates, axis=0) == 0.0
    scale = np.where(flat, 0.0, sd_b / np.where(flat, 1.0, sd))
    return candidates * scale - benchmark[:, None]


def stationary_bootstrap_variance(d: Array, block: float) -> Array:
    """``[K]`` long-run variances ``ω̂²`` of the columns of ``d`` ``[T, K]`` that the stationary
    bootstrap with mean block ``block`` implies (Politis & Romano 1994; Hansen 2005, eq. 6):
    ``γ̂_0 + 2 Σ_{i=1}^{T-1} κ_i γ̂_i``, ``κ_i = (1 − i/T)(1 − q)^i + (i/T)(1 − q)^{T−i}``,
    ``q = 1/block``, ``γ̂_i`` the biased (``/T``) sample autocovariances (by FFT)."""
    t = d.shape[0]
    x = d - d.mean(axis=0)
    n_fft = 1 << (2 * t - 1).bit_length()
    spectrum = np.fft.rfft(x, n=n_fft, axis=0)
    acov = np.fft.irfft(spectrum * np.conj(spectrum), n=n_fft, axis=0)[:t] / t
    i = np.arange(1, t, dtype=np.float64)
    keep = 1.0 - 1.0 / float(block)
    kappa = (1.0 - i / t) * keep**i + (i / t) * keep ** (t - i)
    return np.asarray(acov[0] + 2.0 * (kappa @ acov[1:]), dtype=np.float64)


def _studentised(d: Array, block: int, scale: float) -> tuple[Array, Array]:
    """``(z [T, K], t_stats [K])``: ``z = d / ω̂`` and ``√T d̄ / ω̂``; a column whose ``ω̂`` is
    below ``1e-9 × scale`` (the benchmark's volatility: a candidate equal to the benchmark after
    scaling, up to rounding) is all zeros."""
    var = stationary_bootstrap_variance(d, block)
    nil = var <= (1e-9 * scale) ** 2
    omega = np.sqrt(np.where(nil, 1.0, var))
    z = np.where(nil, 0.0, d / omega)
    return z, math.sqrt(d.shape[0]) * z.mean(axis=0)


def _step_down(spa: SPA, size: float) -> tuple[int, ...]:
    """Romano & Wolf's (2005) StepM on a computed ``spa``: reject every candidate still in
    whose differential exceeds the ``1 − size`` quantile of the bootstrap maximum over those
    still in (consistent recentring), drop them, and repeat until a step rejects none or none
    is left. The rejected, ascending. (arch 8.0's ``StepM`` runs the same steps but fails when
    the last candidates are rejected in a later step than the first: it then tests an empty
    set.)"""
    active = np.ones(spa.k, dtype=np.bool_)
    while active.any():
        spa.subset(active)
        spa.compute()
        better = spa.better_models(size, "consistent")
        if better.size == 0:
            break
        active[better] = False
    spa.subset(np.ones(spa.k, dtype=np.bool_))
    return tuple(int(k) for k in np.flatnonzero(~active))


def _p(raw: float, reps: int) -> float:
    """arch's share ``#{T* > T} / R`` as ``(1 + #) / (R + 1)`` (Phipson & Smyth 2010)."""
    return (1.0 + round(raw * reps)) / (reps + 1.0)


def superior_ability(
    benchmark: ArrayLike,
    candidates: ArrayLike,
    periods_per_year: float,
    *,
    size: float = 0.05,
    n_resamples: int = 1000,
    block: int | None = None,
    seed: int = 0,
) -> SuperiorAbility:
    """Does any column of ``candidates`` ``[T, K]`` have a higher Sharpe ratio than
    ``benchmark`` ``[T]`` (per-bar net returns on the same bars)? Hansen's SPA p-values and
    StepM's superior set at ``size`` (module docstring).

    ``block=None``: the largest Politis & White (2004) stationary-bootstrap length over the
    K differentials (:func:`~riskppo.stats.bootstrap.default_block_length`), in
    ``[1, T // 4]``. Seeded: SPA and StepM draw the same resamples from
    ``np.random.default_rng(seed)``, and the same inputs give the same result."""
    b = as_returns(benchmark, "benchmark")
    c = _as_candidates(candidates, b.size)
    if not 0.0 < size < 1.0:
        raise ValueError(f"size must be in (0, 1), got {size!r}")
    if not (periods_per_year > 0 and math.isfinite(periods_per_year)):
        raise ValueError(f"periods_per_year must be a positive number, got {periods_per_year!r}")
    reps = _check_resamples(n_resamples)
    d = sharpe_differentials(b, c)
    blk = _check_block(block, b.size) or default_block_length(d, "stationary")
    sd_b = float(b.std(ddof=1))
    z, t_stats = _studentised(d, blk, sd_b)
    from arch.bootstrap import SPA  # arch: ~1.5 s to import

    spa = SPA(np.zeros(b.size), -z, blk, reps, "stationary", seed=np.random.default_rng(seed))
    spa.compute()
    p = spa.pvalues  # over all K candidates: StepM's steps below re-compute on subsets
    return SuperiorAbility(
        p_consistent=_p(float(p["consistent"]), reps),
        p_lower=_p(float(p["lower"]), reps),
        p_upper=_p(float(p["upper"]), reps),
        superior=_step_down(spa, size),
        sharpe_diff=d.mean(axis=0) / sd_b * math.sqrt(periods_per_year),
        t_stats=t_stats,
        size=float(size),
        n_candidates=int(c.shape[1]),
        n_bars=int(b.size),
        block=int(blk),
        n_resamples=reps,
    )
