"""Analytic statistics of a return record: Sharpe, PSR, DSR, MinTRL, paired Sharpe tests, alpha.

The closed-form half of :mod:`riskppo.stats` (the resampling half is
:mod:`riskppo.stats.bootstrap`, the random-timing null :mod:`riskppo.stats.null`).

Conventions, for every function here:

* ``r``, ``a``, ``b`` are 1-D arrays of per-bar **net returns**, simple or log (the caller
  decides; nothing here compounds). Paired functions take equal-length ``a`` and ``b`` aligned
  bar by bar. Every value must be finite; anything else is a ``ValueError`` naming the argument.
* ``periods_per_year`` annualises (252 for daily stock bars). A Sharpe ratio is
  ``mean / std(ddof=1) × sqrt(periods_per_year)`` with a zero risk-free rate; a series without
  any variation has a ``nan`` Sharpe ratio (never an exception).
* Sharpe ratios passed **in** (benchmarks, targets, the variance of the trials' Sharpe ratios) are
  in **annual** units and converted to per-bar units inside (``SR_bar = SR_year /
  sqrt(periods_per_year)``, ``Var_bar = Var_year / periods_per_year``). The ``*_from_moments``
  cores work in per-bar units throughout, so a paper's worked example can be fed to them as
  printed.
* Skewness is the sample's third standardised moment and kurtosis its **non-excess** fourth
  standardised moment (3 for a normal distribution), both with population (biased) moments, as
  in Bailey & López de Prado (2012).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

__all__ = [
    "TEST_PHRASES",
    "AlphaBeta",
    "Interval",
    "Moments",
    "PairedTest",
    "Verdict",
    "adjust_p",
    "as_pair",
    "as_returns",
    "deflated_sharpe",
    "dsr_from_moments",
    "expected_max_sharpe",
    "format_p",
    "hac_alpha_beta",
    "information_ratio",
    "long_run_variance",
    "min_track_record_length",
    "min_trl_from_moments",
    "moments",
    "newey_west_lags",
    "normal_test",
    "per_bar_sharpe",
    "probabilistic_sharpe",
    "psr_from_moments",
    "scale_to_exposure",
    "sharpe",
    "sharpe_difference_hac",
    "sharpe_difference_influence",
    "sharpe_difference_test",
    "tracking_error",
    "verdict",
]

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval ``[low, high]`` at ``level``."""

    estimate: float
    low: float
    high: float
    level: float


@dataclass(frozen=True)
class PairedTest:
    """A test of H0: Sharpe(a) <= Sharpe(b) against H1: Sharpe(a) > Sharpe(b).

    ``diff`` is the annualised Sharpe difference ``Sharpe(a) - Sharpe(b)``; ``statistic`` the
    unit-free studentised difference; ``p_two_sided`` tests H0: Sharpe(a) = Sharpe(b).
    """

    diff: float
    statistic: float
    p_one_sided: float
    p_two_sided: float
    method: str


@dataclass(frozen=True)
class AlphaBeta:
    """OLS ``a = alpha + beta * b + e`` with Newey–West standard errors.

    ``alpha_annual`` is the per-bar intercept × ``periods_per_year``; ``alpha_t`` its t statistic
    and ``alpha_p_one_sided`` the normal p-value of H1: alpha > 0; ``lags`` the Newey–West lags.
    """

    alpha_annual: float
    alpha_t: float
    alpha_p_one_sided: float
    beta: float
    beta_se: float
    lags: int


@dataclass(frozen=True)
class Moments:
    """What PSR, DSR and MinTRL need of a record: per-bar Sharpe ratio, skewness, non-excess
    kurtosis and the number of bars."""

    sharpe: float
    skew: float
    kurtosis: float
    n: int


# -- validation ------------------------------------------------------------------------------


def as_returns(x: ArrayLike, name: str) -> Array:
    """``x`` as a 1-D float array of at least 3 finite values, else a ``ValueError`` naming it."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of numbers: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of per-bar returns, got shape {arr.shape}")
    if arr.size < 3:
        raise ValueError(f"{name} needs at least 3 returns, got {arr.size}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name} has a non-finite value {float(arr[bad[0]])} at index {bad[0]}")
    return arr


def as_pair(a: ArrayLike, b: ArrayLike) -> tuple[Array, Array]:
    """Validated ``a`` and ``b`` of equal length."""
    x, y = as_returns(a, "a"), as_returns(b, "b")
    if x.size != y.size:
        raise ValueError(f"a and b must have equal length, got {x.size} and {y.size}")
    return x, y


def _positive(value: float, name: str) -> float:
    if not (isinstance(value, (int, float, np.integer, np.floating)) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _count(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _per_bar(annual_sharpe: float, periods_per_year: float | None, name: str) -> float:
    if not math.isfinite(annual_sharpe):
        raise ValueError(f"{name} must be finite, got {annual_sharpe!r}")
    if annual_sharpe == 0.0 and periods_per_year is None:
        return 0.0
    if periods_per_year is None:
        raise ValueError(f"periods_per_year is needed to convert the annual {name} to per bar")
    return annual_sharpe / math.sqrt(_positive(periods_per_year, "periods_per_year"))


# -- Sharpe ratio and its moments ------------------------------------------------------------


def per_bar_sharpe(r: Array) -> float:
    """``mean / std(ddof=1)`` of a validated series; ``nan`` when it never varies."""
    if np.ptp(r) == 0.0:
        return math.nan
    return float(r.mean() / r.std(ddof=1))


def sharpe(r: ArrayLike, periods_per_year: float) -> float:
    """Annualised Sharpe ratio ``mean / std(ddof=1) × sqrt(periods_per_year)`` (risk-free 0)."""
    ppy = _positive(periods_per_year, "periods_per_year")
    return per_bar_sharpe(as_returns(r, "r")) * math.sqrt(ppy)


def moments(r: ArrayLike) -> Moments:
    """Per-bar Sharpe ratio, skewness and non-excess kurtosis (population moments) of ``r``."""
    x = as_returns(r, "r")
    sr = per_bar_sharpe(x)
    if math.isnan(sr):
        return Moments(math.nan, math.nan, math.nan, x.size)
    skew = float(sps.skew(x, bias=True))
    kurt = float(sps.kurtosis(x, fisher=False, bias=True))
    return Moments(sr, skew, kurt, x.size)


def _sharpe_variance_factor(sr: float, skew: float, kurt: float) -> float:
    """``1 - skew·SR + (kurt - 1)/4 · SR²``: n-1 times the variance of the estimated per-bar
    Sharpe ratio under non-normal iid returns (Bailey & López de Prado 2012, eq. 4 / Mertens
    2002). ``kurt`` is non-excess: the normal case gives ``1 + SR²/2``."""
    return 1.0 - skew * sr + (kurt - 1.0) / 4.0 * sr * sr


def psr_from_moments(sr: float, skew: float, kurt: float, n: int, sr_benchmark: float) -> float:
    """Probabilistic Sharpe ratio from moments, all **per bar** (Bailey & López de Prado 2012):
    ``Φ((SR - SR*) sqrt(n - 1) / sqrt(1 - skew·SR + (kurt - 1)/4·SR²))``, the probability that
    the true Sharpe ratio exceeds ``sr_benchmark``. ``nan`` when undefined."""
    factor = _sharpe_variance_factor(sr, skew, kurt)
    if not factor > 0.0 or n < 2:
        return math.nan
    z = (sr - sr_benchmark) * math.sqrt(n - 1) / math.sqrt(factor)
    return float(sps.norm.cdf(z))


def probabilistic_sharpe(
    r: ArrayLike, benchmark_sharpe: float = 0.0, periods_per_year: float | None = None
) -> float:
    """PSR of ``r`` against ``benchmark_sharpe`` (Bailey & López de Prado 2012, "The Sharpe
    Ratio Efficient Frontier", eq. 11), with the record's skewness and kurtosis.

    ``benchmark_sharpe`` is **annual** and converted to per bar with ``periods_per_year`` (only
    needed when it is not 0; PSR against 0 is unit-free). Returns a probability in [0, 1].
    """
    m = moments(r)
    bench = _per_bar(benchmark_sharpe, periods_per_year, "benchmark_sharpe")
    return psr_from_moments(m.sharpe, m.skew, m.kurtosis, m.n, bench)


def expected_max_sharpe(n_trials: int, trials_sharpe_var: float) -> float:
    """Expected maximum of ``n_trials`` estimated Sharpe ratios whose true value is 0, in the
    units of ``trials_sharpe_var`` (Bailey & López de Prado 2014, "The Deflated Sharpe Ratio",
    eq. 2, after the false-strategy theorem): ``sqrt(V)·((1-γ)Φ⁻¹(1-1/N) + γΦ⁻¹(1-1/(N e)))``
    with γ the Euler–Mascheroni constant. One trial: 0."""
    n = _count(n_trials, "n_trials")
    if not (math.isfinite(trials_sharpe_var) and trials_sharpe_var >= 0.0):
        raise ValueError(f"trials_sharpe_var must be finite and >= 0, got {trials_sharpe_var!r}")
    if n == 1:
        return 0.0
    gamma = float(np.euler_gamma)
    z = (1.0 - gamma) * sps.norm.ppf(1.0 - 1.0 / n) + gamma * sps.norm.ppf(1.0 - 1.0 / (n * math.e))
    return math.sqrt(trials_sharpe_var) * float(z)


def dsr_from_moments(
    sr: float, skew: float, kurt: float, n: int, n_trials: int, trials_sharpe_var: float
) -> float:
    """Deflated Sharpe ratio from per-bar moments: PSR against :func:`expected_max_sharpe`
    (Bailey & López de Prado 2014, eq. 1–2). ``trials_sharpe_var`` is per bar here."""
    return psr_from_moments(sr, skew, kurt, n, expected_max_sharpe(n_trials, trials_sharpe_var))


def deflated_sharpe(
    r: ArrayLike, n_trials: int, trials_sharpe_var: float, periods_per_year: float
) -> float:
    """DSR of the selected record ``r`` after ``n_trials`` trials (Bailey & López de Prado 2014).

    ``trials_sharpe_var`` is the variance of the trials' **annual** Sharpe ratios, converted to
    per bar as ``V / periods_per_year``. ``n_trials = 1`` gives the PSR against 0.
    """
    ppy = _positive(periods_per_year, "periods_per_year")
    if not (math.isfinite(trials_sharpe_var) and trials_sharpe_var >= 0.0):
        raise ValueError(f"trials_sharpe_var must be finite and >= 0, got {trials_sharpe_var!r}")
    m = moments(r)
    return dsr_from_moments(m.sharpe, m.skew, m.kurtosis, m.n, n_trials, trials_sharpe_var / ppy)


def min_trl_from_moments(
    sr: float, skew: float, kurt: float, sr_target: float, level: float
) -> float:
    """Minimum track record length in bars, per-bar inputs (Bailey & López de Prado 2012,
    eq. 13): ``1 + (1 - skew·SR + (kurt-1)/4·SR²)·(Φ⁻¹(level)/(SR - SR*))²``; ``inf`` when
    ``SR <= SR*`` (no record is long enough), ``nan`` when undefined."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if math.isnan(sr):
        return math.nan
    if sr <= sr_target:
        return math.inf
    z = float(sps.norm.ppf(level))
    return 1.0 + _sharpe_variance_factor(sr, skew, kurt) * (z / (sr - sr_target)) ** 2


def min_track_record_length(
    r: ArrayLike,
    target_sharpe: float = 0.0,
    level: float = 0.95,
    periods_per_year: float | None = None,
) -> float:
    """MinTRL of ``r``: the number of **bars** a record with these moments needs before its
    Sharpe ratio exceeds ``target_sharpe`` (**annual**; ``periods_per_year`` converts it) with
    confidence ``level`` (Bailey & López de Prado 2012). ``inf`` when its Sharpe <= target."""
    m = moments(r)
    target = _per_bar(target_sharpe, periods_per_year, "target_sharpe")
    return min_trl_from_moments(m.sharpe, m.skew, m.kurtosis, target, level)


# -- the paired Sharpe tests -----------------------------------------------------------------


def normal_test(diff_bar: float, se_bar: float, periods_per_year: float, method: str) -> PairedTest:
    """A :class:`PairedTest` from a per-bar Sharpe difference and its standard error, with
    standard normal p-values. ``se_bar = 0`` with ``diff_bar = 0`` (identical records) gives a
    statistic of 0; any other undefined case ``nan``."""
    z = diff_bar / se_bar if se_bar > 0.0 else (0.0 if diff_bar == 0.0 else math.nan)
    return PairedTest(
        diff=diff_bar * math.sqrt(periods_per_year),
        statistic=float(z),
        p_one_sided=float(sps.norm.sf(z)),
        p_two_sided=float(2.0 * sps.norm.sf(abs(z))),
        method=method,
    )


def sharpe_difference_test(a: ArrayLike, b: ArrayLike, periods_per_year: float) -> PairedTest:
    """Jobson & Korkie (1981) test of equal Sharpe ratios with Memmel's (2003) correction.

    ``z = (SR_a - SR_b) / sqrt(θ)``, per-bar Sharpe ratios, with
    ``θ = (2 - 2ρ + (SR_a² + SR_b² - 2·SR_a·SR_b·ρ²) / 2) / T`` (Memmel 2003, eq. 2, divided by
    ``σ_a²σ_b²``), ρ the sample correlation of ``a`` and ``b``. It assumes iid normal returns;
    heavy tails and volatility clustering are outside its model (see
    :func:`sharpe_difference_hac`).
    """
    ppy = _positive(periods_per_year, "periods_per_year")
    x, y = as_pair(a, b)
    sa, sb = per_bar_sharpe(x), per_bar_sharpe(y)
    if math.isnan(sa) or math.isnan(sb):
        return normal_test(math.nan, math.nan, ppy, "jobson-korkie-memmel")
    rho = float(np.corrcoef(x, y)[0, 1])
    theta = (2.0 - 2.0 * rho + 0.5 * (sa * sa + sb * sb - 2.0 * sa * sb * rho * rho)) / x.size
    return normal_test(sa - sb, math.sqrt(max(theta, 0.0)), ppy, "jobson-korkie-memmel")


def sharpe_difference_influence(a: Array, b: Array) -> Array:
    """Per-bar influence function of ``SR_a - SR_b`` (delta method, Ledoit & Wolf 2008, §3.1):
    ``v_t = u_a,t - SR_a/2·(u_a,t² - 1) - (u_b,t - SR_b/2·(u_b,t² - 1))`` with
    ``u = (r - mean)/std`` (population moments), so ``Var(SR_a - SR_b) ≈ LRV(v)/T``. It equals
    Ledoit & Wolf's gradient ``∇f(μ_a, μ_b, γ_a, γ_b)`` applied to their centred moments ``y_t``.
    Shape ``[T]``; ``nan`` when a series does not vary."""

    def part(r: Array) -> Array:
        sd = r.std()
        if not sd > 0.0:
            return np.full(r.size, np.nan)
        u = (r - r.mean()) / sd
        return u - 0.5 * (r.mean() / sd) * (u * u - 1.0)

    return part(a) - part(b)


def long_run_variance(v: Array) -> float:
    """Long-run variance of a zero-mean series by the prewhitened quadratic-spectral kernel
    (Andrews & Monahan 1992; the estimator Ledoit & Wolf 2008 use): an AR(1) filter
    ``e_t = v_t - φ v_{t-1}`` (|φ| capped at 0.97), arch's ``QuadraticSpectral`` kernel with its
    automatic bandwidth (Newey & West 1994) on ``e``, recoloured by ``1/(1-φ)²``."""
    lagged, current = v[:-1], v[1:]
    denom = float(lagged @ lagged)
    phi = float(np.clip((lagged @ current) / denom, -0.97, 0.97)) if denom > 0.0 else 0.0
    resid = current - phi * lagged
    from arch.covariance.kernel import QuadraticSpectral  # arch: ~1.5 s to import

    lrv = float(QuadraticSpectral(resid, center=False).cov.long_run[0, 0])
    return lrv / (1.0 - phi) ** 2


def sharpe_difference_hac(a: ArrayLike, b: ArrayLike, periods_per_year: float) -> PairedTest:
    """Ledoit & Wolf (2008) HAC test of equal Sharpe ratios, robust to heavy tails and
    volatility clustering.

    The per-bar difference ``SR_a - SR_b`` (ddof=1 Sharpe ratios) is studentised by the delta
    method standard error ``sqrt(LRV(v)/T)``, ``v`` the influence series of
    :func:`sharpe_difference_influence` and LRV the prewhitened QS kernel estimate of
    :func:`long_run_variance` (Ledoit & Wolf 2008, §3.1, with Andrews & Monahan 1992). p-values
    from the standard normal.
    """
    ppy = _positive(periods_per_year, "periods_per_year")
    x, y = as_pair(a, b)
    sa, sb = per_bar_sharpe(x), per_bar_sharpe(y)
    if math.isnan(sa) or math.isnan(sb):
        return normal_test(math.nan, math.nan, ppy, "ledoit-wolf-hac")
    v = sharpe_difference_influence(x, y)
    se = math.sqrt(max(long_run_variance(v), 0.0) / x.size) if np.any(v != 0.0) else 0.0
    return normal_test(sa - sb, se, ppy, "ledoit-wolf-hac")


def newey_west_lags(n: int) -> int:
    """The Newey–West (1994) rule of thumb ``floor(4 (T/100)^(2/9))``."""
    return math.floor(4.0 * (n / 100.0) ** (2.0 / 9.0))


def hac_alpha_beta(
    a: ArrayLike, b: ArrayLike, periods_per_year: float, lags: int | None = None
) -> AlphaBeta:
    """OLS ``a_t = α + β b_t + ε_t`` with Newey & West (1987) HAC (Bartlett) standard errors,
    through statsmodels (``cov_type="HAC"``, its default small-sample correction).

    ``lags`` defaults to ``floor(4 (T/100)^(2/9))``. The one-sided p-value of H1: α > 0 uses the
    normal distribution, as statsmodels does for HAC. A ``b`` without variation has no β: all
    ``nan``.
    """
    ppy = _positive(periods_per_year, "periods_per_year")
    x, y = as_pair(a, b)
    lag = newey_west_lags(x.size) if lags is None else lags
    if isinstance(lag, bool) or not isinstance(lag, (int, np.integer)) or lag < 0:
        raise ValueError(f"lags must be an integer >= 0, got {lags!r}")
    if np.ptp(y) == 0.0:
        nan = math.nan
        return AlphaBeta(nan, nan, nan, nan, nan, int(lag))
    design = np.column_stack([np.ones(x.size), y])
    from statsmodels.regression.linear_model import OLS

    res = OLS(x, design).fit(cov_type="HAC", cov_kwds={"maxlags": int(lag)})
    t_alpha = float(res.tvalues[0])
    return AlphaBeta(
        alpha_annual=float(res.params[0]) * ppy,
        alpha_t=t_alpha,
        alpha_p_one_sided=float(sps.norm.sf(t_alpha)),
        beta=float(res.params[1]),
        beta_se=float(res.bse[1]),
        lags=int(lag),
    )


# -- relative figures ------------------------------------------------------------------------


def tracking_error(a: ArrayLike, b: ArrayLike, periods_per_year: float) -> float:
    """Annualised tracking error ``std(a - b, ddof=1) × sqrt(periods_per_year)``."""
    ppy = _positive(periods_per_year, "periods_per_year")
    x, y = as_pair(a, b)
    return float((x - y).std(ddof=1)) * math.sqrt(ppy)


def information_ratio(a: ArrayLike, b: ArrayLike, periods_per_year: float) -> float:
    """Annualised information ratio: the Sharpe ratio of the active return ``a - b``."""
    ppy = _positive(periods_per_year, "periods_per_year")
    x, y = as_pair(a, b)
    return per_bar_sharpe(x - y) * math.sqrt(ppy)


def scale_to_exposure(
    bench_returns: ArrayLike, bench_mean_abs_exposure: float, agent_mean_abs_exposure: float
) -> Array:
    """The benchmark scaled to the agent's mean |exposure|: ``k × bench_returns`` with
    ``k = agent_mean_abs_exposure / bench_mean_abs_exposure``.

    An account holding an exposure ``p`` as a share of its equity earns ``p R − fee |Δp|`` in a
    bar whose simple return is ``R`` (rebalanced at the bar's start): scaling every exposure by
    ``k`` scales both terms by ``k`` (exact for such per-bar simple returns; to second order in
    the returns where a bar has two legs or the share drifts between fills). The scaled
    benchmark has the same Sharpe ratio (k > 0) but about ``k`` times the volatility and CVaR,
    so it answers "what would the benchmark have done with the
    agent's average risk budget". Shape ``[T]``.
    """
    r = as_returns(bench_returns, "bench_returns")
    bench = _positive(bench_mean_abs_exposure, "bench_mean_abs_exposure")
    agent = float(agent_mean_abs_exposure)
    if not (math.isfinite(agent) and agent >= 0.0):
        raise ValueError(f"agent_mean_abs_exposure must be finite and >= 0, got {agent!r}")
    return r * (agent / bench)


# -- multiple testing and the verdict --------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Whether the record supports the claim "beats the benchmark", and the one line saying so."""

    claim: bool
    p_adjusted: float
    text: str


def adjust_p(p: float, n_trials: int) -> float:
    """The p-value of the best of ``n_trials`` tries: Šidák (1967) ``1 - (1 - p)^N``.

    Exact when the trials' tests are independent and conservative when they are positively
    dependent, which candidate configurations of one agent are; unlike Bonferroni (``N·p``) it
    stays a probability. ``nan`` stays ``nan``.
    """
    n = _count(n_trials, "n_trials")
    if math.isnan(p):
        return math.nan
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
    if n == 1 or p == 1.0:
        return float(p)
    return float(-math.expm1(n * math.log1p(-p)))


def format_p(p: float) -> str:
    """A p-value with 2 significant digits, positional (``0.012``, ``0.27``, ``0.000031``)."""
    if math.isnan(p):
        return "undefined"
    return np.format_float_positional(p, precision=2, unique=False, fractional=False, trim="-")


TEST_PHRASES = {
    "ledoit-wolf-hac": "the HAC test",
    "ledoit-wolf-bootstrap": "the small-sample bootstrap test",
    "jobson-korkie-memmel": "the Jobson–Korkie–Memmel test",
}
"""How a verdict line names the test behind its p-value (by :attr:`PairedTest.method`)."""


def verdict(test: PairedTest, n_trials: int, benchmark_name: str, alpha: float = 0.05) -> Verdict:
    """The claim "beats ``benchmark_name``" holds when the one-sided p-value, adjusted for the
    ``n_trials`` configurations tried (:func:`adjust_p`), is below ``alpha``. The line names
    the test (:data:`TEST_PHRASES`; nothing for a method not there)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    n = _count(n_trials, "n_trials")
    p_adj = adjust_p(test.p_one_sided, n)
    claim = bool(p_adj < alpha)
    trials = f"N = {n} trial{'s' if n != 1 else ''}"
    # the size of the edge beside its p-value: two near-identical records can make a tiny
    # Sharpe difference "significant", which no reader should mistake for a large one
    size = f"Sharpe difference {test.diff:+.2f}, " if math.isfinite(test.diff) else ""
    by = f" by {TEST_PHRASES[test.method]}" if test.method in TEST_PHRASES else ""
    tail = f"({size}one-sided p = {format_p(p_adj)}{by}, adjusted for {trials})"
    head = f"beats {benchmark_name}" if claim else f"edge over {benchmark_name} not established"
    return Verdict(claim=claim, p_adjusted=p_adj, text=f"{head} {tail}")
