"""Does a trading agent beat its benchmark? The statistics, each from its paper, and a summary.

Pure functions over numpy arrays of per-bar net returns; this is the public face of three
modules (conventions and units in :mod:`riskppo.stats.core`):

* :mod:`~riskppo.stats.core`: :func:`sharpe`, :func:`probabilistic_sharpe` (Bailey &
  López de Prado 2012), :func:`deflated_sharpe` (Bailey & López de Prado 2014),
  :func:`min_track_record_length`, the paired Sharpe tests :func:`sharpe_difference_test`
  (Jobson & Korkie 1981 with Memmel 2003) and :func:`sharpe_difference_hac` (Ledoit & Wolf 2008),
  :func:`hac_alpha_beta` (Newey & West 1987), :func:`information_ratio`,
  :func:`tracking_error`, :func:`scale_to_exposure`, :func:`adjust_p` (Šidák) and
  :func:`verdict`; moment-based cores (:func:`psr_from_moments`, :func:`dsr_from_moments`,
  :func:`min_trl_from_moments`) take a paper's numbers directly;
* :mod:`~riskppo.stats.bootstrap`: :func:`sharpe_ci` and
  :func:`sharpe_difference_bootstrap` (block bootstraps through ``arch``);
* :mod:`~riskppo.stats.null`: :func:`random_timing_null`, :func:`matched_smoothness`;
* :mod:`~riskppo.stats.pbo`: :func:`probability_of_backtest_overfitting` (Bailey, Borwein,
  López de Prado & Zhu 2017), over the records of several configurations on the same bars;
* :mod:`~riskppo.stats.spa`: :func:`superior_ability`, Hansen's (2005) test of superior
  predictive ability and Romano & Wolf's (2005) StepM: does any of several records beat the
  benchmark (and which), with their dependence in the bootstrap;
* :mod:`~riskppo.stats.es_backtest`: backtests of a VaR / expected-shortfall forecast,
  :func:`kupiec_test` (Kupiec 1995) and :func:`z2_test` (Acerbi & Székely 2014) with its
  p-value simulated under the forecast's own model, both in :func:`es_backtest`;
* :mod:`~riskppo.stats.paired`: :func:`paired_sharpe_test`, THE paired test of every verdict.

The verdict's test, :func:`paired_sharpe_test`: the studentised circular block bootstrap
(:func:`sharpe_difference_bootstrap`, 5,000 resamples, the verdict's seed) on a record shorter
than :data:`SMALL_SAMPLE_BARS` (1,000) bars, Ledoit & Wolf's HAC test from there on. Measured by
``benchmarks/stats_calibration.py`` (GARCH(1,1)-t pairs, ν = 5, persistence 0.97, innovations
correlated ρ; nominal one-sided 5%; bootstrap 999 resamples; 1,500 pairs per scenario at 350
bars, 1,000 at 1,250, 200 at 5,000; Monte Carlo SE 0.5–0.7 points, 1.5 at 5,000)::

    bars   ρ     size: JK–Memmel  HAC   bootstrap  │ power (SR 1.0 vs 0.5): HAC  bootstrap
    350    0.9   4.9%             5.3%  4.7%       │ 40.6%                       37.4%
    350    0.99  4.7%             5.7%  4.7%       │ 96.9%                       93.9%
    1,250  0.9   5.2%             5.6%  5.5%       │ 77.6%                       72.6%
    1,250  0.99  4.0%             4.7%  3.5%       │ 99.9%                       98.3%
    5,000  0.9   5.0%             4.5%  4.0%       │ 99.5%                       99.0%
    5,000  0.99  5.0%             5.0%  4.5%       │ 100%                        99.5%

Over all the null pairs of 350 bars simulated while choosing (about 16,000 per ρ, several seeds)
HAC rejected 6.0% at both correlations; the bootstrap 5.3% ± 0.4 (ρ 0.9) and 4.7% ± 0.3 (ρ 0.99)
on the 4,000 pairs it met in its final form (HAC on those: 6.2%, 5.4%). On a short record the HAC
standard error, a long-run variance of a few hundred heavy-tailed, volatility-clustered bars, is
too small on average and too variable for the normal reference; a t reference does not fix it
(2,000 pairs per ρ, HAC 6.6% / 6.8%: T - 1 degrees of freedom 6.5% / 6.6%, the QS kernel's
equivalent T / bandwidth 6.4% / 6.2%). At 700 bars HAC still rejected 5.2% / 5.9% (7,000 pairs
per ρ), the bootstrap 4.8% / 5.7% (2,000) at 6 points less power (52.5% against 58.6%, ρ 0.9).
From 1,000 bars on the HAC test meets the long-record target (size ≤ 6.5%, power ≥ 75% at 1,250
bars, ρ 0.9) with 5 points more power than the bootstrap, and needs no resampling. JK–Memmel
holds its size on these pairs too (at daily Sharpe ratios its normal-theory terms are tiny and
GARCH returns are serially uncorrelated), but its variance assumes iid returns, and a trading
record's need not be (held positions, overlapping costs). docs/risk.md, "Small samples", has the
whole table.

:func:`summarize` runs all of them for an agent against a benchmark and against the benchmark
scaled to the agent's mean exposure::

    from riskppo.stats import summarize

    s = summarize(agent, bench, periods_per_year=252, agent_exposure=0.6,
                  benchmark_exposure=1.0, n_trials=3)
    print(s.verdict.text)   # "beats vol-targeted buy-and-hold (one-sided p = 0.012, ...)"
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from riskppo.stats.bootstrap import sharpe_ci, sharpe_difference_bootstrap
from riskppo.stats.core import (
    AlphaBeta,
    Interval,
    Moments,
    PairedTest,
    Verdict,
    adjust_p,
    as_pair,
    deflated_sharpe,
    dsr_from_moments,
    expected_max_sharpe,
    hac_alpha_beta,
    information_ratio,
    min_track_record_length,
    min_trl_from_moments,
    moments,
    probabilistic_sharpe,
    psr_from_moments,
    scale_to_exposure,
    sharpe,
    sharpe_difference_hac,
    sharpe_difference_test,
    tracking_error,
    verdict,
)
from riskppo.stats.es_backtest import (
    EmpiricalNull,
    EsBacktest,
    ForecastRecord,
    KupiecTest,
    ParametricNull,
    Z2Test,
    es_backtest,
    kupiec_test,
    standard_var_es,
    z2_statistic,
    z2_test,
)
from riskppo.stats.null import RandomTiming, matched_smoothness, random_timing_null
from riskppo.stats.paired import SMALL_SAMPLE_BARS, paired_sharpe_test
from riskppo.stats.pbo import PBO, probability_of_backtest_overfitting
from riskppo.stats.spa import SuperiorAbility, superior_ability

__all__ = [
    "PBO",
    "SMALL_SAMPLE_BARS",
    "AlphaBeta",
    "Comparison",
    "EmpiricalNull",
    "EsBacktest",
    "ForecastRecord",
    "Interval",
    "KupiecTest",
    "Moments",
    "PairedTest",
    "ParametricNull",
    "RandomTiming",
    "SeriesFigures",
    "StatsSummary",
    "SuperiorAbility",
    "Verdict",
    "Z2Test",
    "adjust_p",
    "deflated_sharpe",
    "dsr_from_moments",
    "es_backtest",
    "expected_max_sharpe",
    "hac_alpha_beta",
    "information_ratio",
    "kupiec_test",
    "matched_smoothness",
    "min_track_record_length",
    "min_trl_from_moments",
    "moments",
    "paired_sharpe_test",
    "probabilistic_sharpe",
    "probability_of_backtest_overfitting",
    "psr_from_moments",
    "random_timing_null",
    "scale_to_exposure",
    "sharpe",
    "sharpe_ci",
    "sharpe_difference_bootstrap",
    "sharpe_difference_hac",
    "sharpe_difference_test",
    "standard_var_es",
    "summarize",
    "superior_ability",
    "tracking_error",
    "verdict",
    "z2_statistic",
    "z2_test",
]


@dataclass(frozen=True)
class SeriesFigures:
    """One return series' own figures.

    ``sharpe``: annualised Sharpe ratio with its block-bootstrap 95% interval; ``psr_zero``:
    P(true Sharpe > 0); ``annual_volatility``: ``std(ddof=1) × sqrt(periods_per_year)`` of the
    returns as given; ``max_drawdown``: the largest fall of equity from a previous peak as a
    negative fraction; ``cvar_95``: the mean of the worst 5% of simple per-bar returns (the
    lowest ``int((T-1)·0.05) + 1``, empyrical's historical CVaR), typically negative.
    """

    sharpe: Interval
    psr_zero: float
    annual_volatility: float
    max_drawdown: float
    cvar_95: float


@dataclass(frozen=True)
class Comparison:
    """The agent against one benchmark series.

    ``jk_memmel``, ``hac``, ``bootstrap``: the three paired Sharpe tests; ``verdict`` rests on
    :func:`paired_sharpe_test` (the bootstrap below :data:`SMALL_SAMPLE_BARS` bars, else HAC),
    ``test_method`` says which (its :attr:`PairedTest.method`). ``psr_vs_benchmark``: P(agent's
    true Sharpe > the benchmark's observed Sharpe); ``min_track_record_bars``: bars the agent's
    record would need to beat the benchmark's Sharpe at 95%.
    """

    jk_memmel: PairedTest
    hac: PairedTest
    bootstrap: PairedTest
    alpha_beta: AlphaBeta
    information_ratio: float
    tracking_error: float
    psr_vs_benchmark: float
    min_track_record_bars: float
    verdict: Verdict
    test_method: str


Row = tuple[str, float | None, float | None, float | None, str]
"""One row of :meth:`StatsSummary.rows`: label, agent, benchmark, scaled benchmark, note."""
_FloatRow = tuple[str, float, float, float, str]


@dataclass
class StatsSummary:
    """Everything :func:`summarize` computed; ``to_dict()`` for JSON, ``rows()`` for a table.

    ``exposure_scale`` is ``k = agent_exposure / benchmark_exposure``; ``scaled_benchmark`` is the
    benchmark times k (:func:`scale_to_exposure`): same Sharpe ratio, the agent's mean exposure,
    so its paired tests differ from the unscaled ones only through costs and its risk figures
    are the like-for-like ones. ``deflated_sharpe`` is ``nan`` when ``n_trials > 1`` came without
    ``trials_sharpe_var``.
    """

    benchmark_name: str
    periods_per_year: float
    n_bars: int
    n_trials: int
    exposure_scale: float
    agent: SeriesFigures
    benchmark: SeriesFigures
    scaled_benchmark: SeriesFigures
    deflated_sharpe: float
    min_track_record_bars: float
    vs_benchmark: Comparison
    vs_scaled_benchmark: Comparison

    @property
    def verdict(self) -> Verdict:
        """The verdict against the (unscaled) benchmark."""
        return self.vs_benchmark.verdict

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: plain floats, ints, strings and bools; ``nan`` and ``±inf`` → ``None``
        (an infinite MinTRL means no record length is enough)."""
        return _plain(asdict(self))

    def rows(self) -> list[Row]:
        """``(label, agent, benchmark, scaled benchmark, note)`` rows; a comparison's figure
        sits in the column of the benchmark it compares with; ``None`` where undefined."""
        nan = math.nan
        own = [
            (
                f"deflated Sharpe (N = {self.n_trials})",
                self.deflated_sharpe,
                nan,
                nan,
                "Bailey & López de Prado 2014",
            ),
            ("MinTRL vs 0 (bars)", self.min_track_record_bars, nan, nan, "at 95%"),
            (
                "exposure scale k",
                nan,
                nan,
                self.exposure_scale,
                "agent / benchmark mean |exposure|",
            ),
        ]
        table = _series_rows(self) + own + _comparison_rows(self)
        return [(label, _num(x), _num(y), _num(z), note) for label, x, y, z, note in table]


def _series_rows(s: StatsSummary) -> list[_FloatRow]:
    """The figures of each series: agent, benchmark, scaled benchmark."""
    level = f"{s.agent.sharpe.level:.0%}"
    table: list[tuple[str, Callable[[SeriesFigures], float], str]] = [
        ("Sharpe (annual)", lambda f: f.sharpe.estimate, "mean / std × √periods, risk-free 0"),
        (
            f"Sharpe {level} CI low",
            lambda f: f.sharpe.low,
            "block bootstrap (Politis & Romano 1994)",
        ),
        (f"Sharpe {level} CI high", lambda f: f.sharpe.high, ""),
        ("PSR vs 0", lambda f: f.psr_zero, "P(true Sharpe > 0), Bailey & López de Prado 2012"),
        ("annual volatility", lambda f: f.annual_volatility, ""),
        ("max drawdown", lambda f: f.max_drawdown, "negative fraction"),
        ("CVaR 95% (per bar)", lambda f: f.cvar_95, "mean of the worst 5% of bars"),
    ]
    a, b, c = s.agent, s.benchmark, s.scaled_benchmark
    return [(label, get(a), get(b), get(c), note) for label, get, note in table]


def _comparison_rows(s: StatsSummary) -> list[_FloatRow]:
    """The agent against each benchmark, in that benchmark's column (nan in the agent's); the
    note of the verdict's test (:func:`paired_sharpe_test`) says so."""
    vb, vs = s.vs_benchmark, s.vs_scaled_benchmark

    def verdicts(test: PairedTest) -> str:
        return "; the verdict's test" if test.method == vb.test_method else ""

    table: list[tuple[str, Callable[[Comparison], float], str]] = [
        ("Sharpe difference (agent − column)", lambda c: c.hac.diff, "annual"),
        (
            "p one-sided, Jobson–Korkie–Memmel",
            lambda c: c.jk_memmel.p_one_sided,
            "iid-normal variance (Memmel 2003)",
        ),
        ("p one-sided, HAC", lambda c: c.hac.p_one_sided, "Ledoit & Wolf 2008" + verdicts(vb.hac)),
        (
            "p one-sided, bootstrap",
            lambda c: c.bootstrap.p_one_sided,
            "studentised circular block bootstrap" + verdicts(vb.bootstrap),
        ),
        (
            f"p adjusted for N = {s.n_trials}",
            lambda c: c.verdict.p_adjusted,
            "Šidák; claim an edge only below 0.05",
        ),
        ("PSR vs column's Sharpe", lambda c: c.psr_vs_benchmark, ""),
        ("MinTRL vs column's Sharpe (bars)", lambda c: c.min_track_record_bars, "at 95%"),
        ("alpha (annual)", lambda c: c.alpha_beta.alpha_annual, "OLS, Newey–West errors"),
        ("alpha t", lambda c: c.alpha_beta.alpha_t, ""),
        ("beta", lambda c: c.alpha_beta.beta, ""),
        ("information ratio", lambda c: c.information_ratio, "annual"),
        ("tracking error", lambda c: c.tracking_error, "annual"),
    ]
    return [(label, math.nan, get(vb), get(vs), note) for label, get, note in table]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    return value


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _max_drawdown(r: np.ndarray, log_returns: bool) -> float:
    log_equity = np.cumsum(r) if log_returns else np.cumsum(np.log1p(r))
    peak = np.maximum.accumulate(np.concatenate([[0.0], log_equity]))[1:]
    return float(np.min(np.expm1(log_equity - peak), initial=0.0))


def _cvar_95(r: np.ndarray, log_returns: bool) -> float:
    simple = np.expm1(r) if log_returns else r
    worst = np.sort(simple)[: int((simple.size - 1) * 0.05) + 1]
    return float(worst.mean())


def _figures(r: np.ndarray, ppy: float, log_returns: bool, reps: int, seed: int) -> SeriesFigures:
    return SeriesFigures(
        sharpe=sharpe_ci(r, ppy, n_resamples=reps, seed=seed),
        psr_zero=probabilistic_sharpe(r),
        annual_volatility=float(r.std(ddof=1)) * math.sqrt(ppy),
        max_drawdown=_max_drawdown(r, log_returns),
        cvar_95=_cvar_95(r, log_returns),
    )


def _compare(
    agent: np.ndarray, bench: np.ndarray, ppy: float, n_trials: int, name: str, reps: int, seed: int
) -> Comparison:
    hac = sharpe_difference_hac(agent, bench, ppy)
    test = paired_sharpe_test(agent, bench, ppy, seed=seed, n_resamples=reps)
    bench_sharpe = sharpe(bench, ppy)
    target = 0.0 if math.isnan(bench_sharpe) else bench_sharpe
    return Comparison(
        jk_memmel=sharpe_difference_test(agent, bench, ppy),
        hac=hac,
        bootstrap=sharpe_difference_bootstrap(agent, bench, ppy, n_resamples=reps, seed=seed),
        alpha_beta=hac_alpha_beta(agent, bench, ppy),
        information_ratio=information_ratio(agent, bench, ppy),
        tracking_error=tracking_error(agent, bench, ppy),
        psr_vs_benchmark=probabilistic_sharpe(agent, target, ppy),
        min_track_record_bars=min_track_record_length(agent, target, 0.95, ppy),
        verdict=verdict(test, n_trials, name),
        test_method=test.method,
    )


def summarize(
    agent: ArrayLike,
    benchmark: ArrayLike,
    *,
    periods_per_year: float,
    agent_exposure: float,
    benchmark_exposure: float,
    n_trials: int = 1,
    trials_sharpe_var: float | None = None,
    benchmark_name: str = "vol-targeted buy-and-hold",
    n_resamples: int = 5000,
    seed: int = 0,
    log_returns: bool = True,
) -> StatsSummary:
    """All the statistics of ``agent`` against ``benchmark`` and the exposure-scaled benchmark.

    ``agent``, ``benchmark``: aligned per-bar net returns ``[T]`` (log returns unless
    ``log_returns=False``; only the drawdown and CVaR care). ``agent_exposure`` and
    ``benchmark_exposure``: mean |exposure| of each over the record. ``n_trials``: the
    configurations tried to pick the agent (the verdict's multiple-testing adjustment);
    ``trials_sharpe_var``: the variance of their annual Sharpe ratios (for the DSR). Seeded.
    """
    a, b = as_pair(agent, benchmark)
    ppy = float(periods_per_year)
    scaled = scale_to_exposure(b, benchmark_exposure, agent_exposure)
    k = float(agent_exposure) / float(benchmark_exposure)
    if trials_sharpe_var is None:
        dsr = probabilistic_sharpe(a) if n_trials == 1 else math.nan
    else:
        dsr = deflated_sharpe(a, n_trials, trials_sharpe_var, ppy)
    name_scaled = f"{benchmark_name} scaled to the agent's exposure"
    return StatsSummary(
        benchmark_name=benchmark_name,
        periods_per_year=ppy,
        n_bars=int(a.size),
        n_trials=int(n_trials),
        exposure_scale=k,
        agent=_figures(a, ppy, log_returns, n_resamples, seed),
        benchmark=_figures(b, ppy, log_returns, n_resamples, seed),
        scaled_benchmark=_figures(scaled, ppy, log_returns, n_resamples, seed),
        deflated_sharpe=dsr,
        min_track_record_bars=min_track_record_length(a),
        vs_benchmark=_compare(a, b, ppy, n_trials, benchmark_name, n_resamples, seed),
        vs_scaled_benchmark=_compare(a, scaled, ppy, n_trials, name_scaled, n_resamples, seed),
    )
