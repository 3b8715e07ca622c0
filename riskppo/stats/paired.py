"""The verdict's paired Sharpe test: the one every caller uses, chosen by the record's length.

A record shorter than :data:`SMALL_SAMPLE_BARS` bars is judged by the studentised circular block
bootstrap (:func:`~riskppo.stats.bootstrap.sharpe_difference_bootstrap`, Ledoit & Wolf 2008,
§3.2), a longer one by Ledoit & Wolf's HAC test (:func:`~riskppo.stats.core.
sharpe_difference_hac`). On short records the HAC test's standard error is too small and too
variable for the normal reference (volatility clustering and heavy tails leave few effective
observations for the long-run variance), so it rejects a true null too often; the bootstrap
holds its level there at a small cost in power. Both figures, measured by
``benchmarks/stats_calibration.py``, are in :mod:`riskppo.stats` and docs/risk.md ("Small
samples"). Which test judged a record is :attr:`PairedTest.method <riskppo.stats.core.PairedTest>`
(``"ledoit-wolf-bootstrap"`` or ``"ledoit-wolf-hac"``).
"""

from __future__ import annotations

from numpy.typing import ArrayLike

from riskppo.stats.bootstrap import sharpe_difference_bootstrap
from riskppo.stats.core import PairedTest, as_pair, sharpe_difference_hac

__all__ = ["SMALL_SAMPLE_BARS", "SMALL_SAMPLE_RESAMPLES", "paired_sharpe_test"]

SMALL_SAMPLE_BARS = 1000
"""Records with fewer bars than this are judged by the bootstrap, longer ones by the HAC test."""

SMALL_SAMPLE_RESAMPLES = 5000
"""The bootstrap's resamples in the verdict (as :func:`riskppo.stats.summarize`'s default, so
its bootstrap row is the verdict's test on a short record)."""


def paired_sharpe_test(
    a: ArrayLike,
    b: ArrayLike,
    periods_per_year: float,
    *,
    seed: int = 0,
    n_resamples: int = SMALL_SAMPLE_RESAMPLES,
) -> PairedTest:
    """THE paired test of H1: Sharpe(a) > Sharpe(b) of every verdict: the studentised block
    bootstrap below :data:`SMALL_SAMPLE_BARS` bars (``seed`` and ``n_resamples`` are its own),
    Ledoit & Wolf's HAC test from there on. ``a``, ``b``: aligned per-bar returns ``[T]``;
    deterministic for a fixed ``seed``."""
    x, y = as_pair(a, b)
    if x.size < SMALL_SAMPLE_BARS:
        return sharpe_difference_bootstrap(
            x, y, periods_per_year, n_resamples=n_resamples, seed=seed
        )
    return sharpe_difference_hac(x, y, periods_per_year)
