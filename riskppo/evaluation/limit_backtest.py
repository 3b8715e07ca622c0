"""Is the risk limit's forecast right? Expected-shortfall backtests of the pre-trade overlay's
forecast on an out-of-sample record (:mod:`riskppo.stats.es_backtest` has the tests).

**The forecast.** At each decision bar ``t`` the overlay (:mod:`riskppo.envs.execution.overlay`)
forecasts the ``h``-bar log return of one unit of the asset by filtered historical simulation
(Barone-Adesi, Giannopoulos & Vosper 1999): ``CVaR_t = -k_t σ̂_t √h`` and, from the same
standardised sums, ``VaR_t = -q_t σ̂_t √h`` (:func:`~riskppo.envs.execution.overlay.tail_quantile`).
A position ``p_t`` decided at ``t`` forecasts ``|p_t|`` times both. This is the forecast itself,
without the overlay's ``margin`` (a declared pessimism on top of it: the cap, and the "forecast
CVaR" ``riskppo signal`` prints, are ``margin`` times more cautious than what is tested here).
Everything at ``t`` uses closes ``<= t`` only (the env's own tables).

**The outcome** is the *hypothetical* P&L of the forecast's own object: ``p_t`` held over the
``h`` bars it covers, ``X_t = p_t (log c_{t+d+h} - log c_{t+d})`` (``d`` = 1 for a next-close
fill, else 0; the return the overlay's standardised sums measure) — positions frozen, as in the
backtests of a bank's VaR model (Basel Committee, *Supervisory framework for the use of
"backtesting"*, 1996). What the agent did within the window is not part of the forecast.

**Windows.** Overlapping ``h``-bar windows (one per bar) share ``h - 1`` bars of return, so their
exceedances come in clusters and neither Kupiec's χ² (independent Bernoulli exceedances) nor
the Z2 simulation (independent outcomes) would hold. The test uses non-overlapping windows:
every ``h``-th decision bar from the record's first one (phase 0). The other ``h - 1`` phases
are equally valid tests on other windows but not independent of phase 0 or of each other;
pooling them would need the exceedances' serial dependence, which is what the tests cannot
assume. They are reported only as a robustness count ("rejects in k of h phases"), never as a
test. A window with no exposure carries no risk to forecast and is left out (the exposure was
decided at ``t``: leaving it out looks at no outcome).

**H0 of the Z2 p-value**: the overlay's model itself — the window's standardised sum is a draw,
uniform, from the sums known at ``t`` (those ``k_t`` and ``q_t`` were estimated from), or
standard normal where fewer than ``min_history`` were known (the overlay's Gaussian multiplier
then). Where the Gaussian floor raised ``k_t`` above the empirical tail the forecast is more
cautious than its null, which can only make the one-sided test reject less.

Per market: the number of windows, exceedances observed and expected, Kupiec's p, Z2 and its p;
pooled over a universe's markets (:func:`pooled_limit`, anti-conservative where markets crash
together).
"""

from __future__ import annotations

import dataclasses
import html
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from riskppo.config import Config
from riskppo.envs.execution.overlay import UnitForecast, unit_forecast
from riskppo.envs.registration import data_kwargs, env_kind, resolve_overlay
from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.trading.factory import make_trading_env
from riskppo.jsonable import jsonable
from riskppo.stats.es_backtest import EmpiricalNull, EsBacktest, ForecastRecord, es_backtest

__all__ = [
    "LIMIT_SIMS",
    "LimitBacktest",
    "LimitWindows",
    "backtest_windows",
    "cell_limit",
    "decision_bars",
    "forecast_env",
    "has_overlay",
    "limit_html",
    "limit_line",
    "pooled_limit",
    "record_limit",
    "record_windows",
    "risk_line",
    "walkforward_limit",
]

LIMIT_SIMS = 2000  # Z2 simulations per test: p-values to about ±0.005 at 5%
_GAUSS_POINTS = 4000  # the standard normal null as this many equally likely quantiles
Array = NDArray[np.float64]


class LimitWindows(NamedTuple):
    """One phase's non-overlapping windows of a record (``W`` of them): ``bars`` ``[W]`` the
    decision bars (positions in the data), ``exposure`` ``[W]`` the position decided there,
    the :class:`~riskppo.stats.es_backtest.ForecastRecord` to test (log returns over ``h``
    bars: the realised hypothetical P&L, the VaR and CVaR forecasts, the overlay's null), and
    ``flat``: the phase's decision bars left out for holding nothing."""

    bars: NDArray[np.int64]
    exposure: Array
    record: ForecastRecord
    flat: int


@dataclass(frozen=True)
class LimitBacktest:
    """The ES backtest of one record (or of pooled records); module docstring.

    ``windows``: phase-0 windows tested; ``flat_windows``: phase-0 decision bars without
    exposure (left out); ``exceedances`` / ``expected``: realised returns below the VaR
    forecast, observed and ``α · windows``; ``kupiec_p``, ``z2``, ``z2_p`` and the rejections at
    5%; ``phases``: the phases looked at (``h``, fewer on a short record; 1 when pooled), of
    which ``kupiec_reject_phases`` / ``z2_reject_phases`` rejected (phase 0 included);
    ``mean_forecast_cvar``: the mean CVaR forecast of the windows, ``mean_tail_return``: the
    mean realised return of the exceedances (log returns over ``horizon`` bars; ``nan`` without
    any); ``n_sims``: Z2 simulations; ``markets``: records pooled (1 for one market).
    """

    horizon: int
    alpha: float
    windows: int
    flat_windows: int
    exceedances: int
    expected: float
    kupiec_p: float
    z2: float
    z2_p: float
    kupiec_reject: bool
    z2_reject: bool
    phases: int
    kupiec_reject_phases: int
    z2_reject_phases: int
    mean_forecast_cvar: float
    mean_tail_return: float
    n_sims: int
    markets: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``nan`` → ``None``."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


def decision_bars(data_index: pd.Index, record_index: pd.Index, delay: int) -> NDArray[np.int64]:
    """``[R]`` the bar (position in the data) at which each record row's position was decided:
    a row is the bar its return is realised at, one bar after the decision, two with a
    next-close fill (``delay`` 1; :func:`~riskppo.evaluation.baselines.strategy_frame`).
    ``ValueError`` if a row's bar is not in the data (the data changed since the run)."""
    rows = np.asarray(pd.Index(data_index).get_indexer(pd.Index(record_index)), dtype=np.int64)
    if (rows < 0).any():
        first = record_index[int(np.flatnonzero(rows < 0)[0])]
        raise ValueError(f"the record's bar {first} is not in the data (it changed since the run)")
    return rows - 1 - int(delay)


def record_windows(
    forecast: UnitForecast,
    horizon: int,
    min_history: int,
    bars: NDArray[np.int64],
    exposure: Array,
    phase: int = 0,
) -> LimitWindows:
    """Phase ``phase`` of the record whose rows decided ``exposure`` ``[R]`` at ``bars`` ``[R]``
    (ascending): every ``horizon``-th bar from ``bars[0] + phase`` where the position is not
    flat and the outcome is in the data; forecasts from ``forecast`` (module docstring)."""
    b = np.asarray(bars, dtype=np.int64)
    p = np.asarray(exposure, dtype=np.float64)
    keep = (b >= 0) & ((b - b[0]) % horizon == phase) if len(b) else np.zeros(0, dtype=bool)
    b, p = b[keep], p[keep]
    flat = int(np.sum(p == 0))
    f = forecast
    ok = (p != 0) & np.isfinite(f.z[b]) & (f.sigma[b] > 0) & np.isfinite(f.multiplier[b])
    b, p = b[ok], p[ok]
    unit = f.sigma[b] * math.sqrt(horizon)  # the unit's h-bar volatility forecast
    record = ForecastRecord(
        realised=p * f.z[b] * unit,
        var=-np.abs(p) * f.quantile[b] * unit,
        es=-np.abs(p) * f.multiplier[b] * unit,
        null=_fhs_null(f, b, p * unit, min_history),
    )
    return LimitWindows(b, p, record, flat)


def _fhs_null(
    f: UnitForecast, bars: NDArray[np.int64], scale: Array, min_history: int
) -> EmpiricalNull:
    """The overlay's model as an :class:`EmpiricalNull`: the sums known at each bar, or a
    standard normal (equally likely quantiles after them in the pool) before ``min_history``."""
    known = f.z[~np.isnan(f.z)]
    nd = NormalDist()
    gauss = np.array([nd.inv_cdf((i + 0.5) / _GAUSS_POINTS) for i in range(_GAUSS_POINTS)])
    pool = np.concatenate([known, gauss])
    n = f.n_known[bars]
    empirical = n >= min_history
    lo = np.where(empirical, 0, len(known)).astype(np.int64)
    hi = np.where(empirical, n, len(pool)).astype(np.int64)
    return EmpiricalNull(pool=pool, lo=lo, hi=hi, scale=scale)


def backtest_windows(
    phases: list[LimitWindows],
    horizon: int,
    alpha: float,
    *,
    n_sims: int = LIMIT_SIMS,
    seed: int = 0,
) -> LimitBacktest:
    """The :class:`LimitBacktest` of one record's phases: ``phases[0]`` is the test, every phase
    counts towards the robustness counts."""
    tests = [
        es_backtest(w.record, alpha, n_sims=n_sims, seed=seed + i) for i, w in enumerate(phases)
    ]
    return _summary([phases[0].record], tests, horizon, alpha, phases[0].flat, n_sims)


def pooled_limit(
    records: list[ForecastRecord],
    horizon: int,
    alpha: float,
    *,
    flat_windows: int = 0,
    n_sims: int = LIMIT_SIMS,
    seed: int = 0,
) -> LimitBacktest:
    """Both tests over the phase-0 windows of several markets' ``records`` (one test; the Z2
    simulation draws each market from its own null, independently)."""
    test = es_backtest(records, alpha, n_sims=n_sims, seed=seed)
    out = _summary(records, [test], horizon, alpha, flat_windows, n_sims)
    return dataclasses.replace(out, markets=len(records))


def _summary(
    records: list[ForecastRecord],
    tests: list[EsBacktest],
    horizon: int,
    alpha: float,
    flat: int,
    n_sims: int,
) -> LimitBacktest:
    """:class:`LimitBacktest` of ``tests[0]`` (on ``records``), with every test's rejections."""
    x = np.concatenate([r.realised for r in records])
    v = np.concatenate([r.var for r in records])
    e = np.concatenate([r.es for r in records])
    k, z = tests[0]
    return LimitBacktest(
        horizon=horizon,
        alpha=alpha,
        windows=k.n,
        flat_windows=flat,
        exceedances=k.exceedances,
        expected=k.expected,
        kupiec_p=k.p_value,
        z2=z.z2,
        z2_p=z.p_value,
        kupiec_reject=k.reject,
        z2_reject=z.reject,
        phases=len(tests),
        kupiec_reject_phases=sum(t.kupiec.reject for t in tests),
        z2_reject_phases=sum(t.z2.reject for t in tests),
        mean_forecast_cvar=float(e.mean()) if len(e) else math.nan,
        mean_tail_return=float(x[x < v].mean()) if (x < v).any() else math.nan,
        n_sims=n_sims,
    )


def record_limit(
    env: TradingEnv,
    index: pd.Index,
    positions: Array,
    *,
    n_sims: int = LIMIT_SIMS,
    seed: int = 0,
) -> tuple[LimitBacktest, LimitWindows] | None:
    """The ES backtest of a record of ``env``'s data: rows ``index`` ``[R]`` (the bars their
    returns are realised at) holding ``positions`` ``[R]`` (a strategy frame's ``position``);
    with the phase-0 windows. ``None`` without an overlay or a row. Forecasts from ``env``'s
    overlay, fill and bars."""
    o = env.overlay
    if o is None or not len(index):
        return None
    delay = int(env.fill == "next_close")
    f = unit_forecast(env.df["close"].to_numpy(np.float64), o, delay=delay)
    bars = decision_bars(env.df.index, index, delay)
    p = np.asarray(positions, dtype=np.float64)
    phases = [
        record_windows(f, o.horizon, o.min_history, bars, p, k)
        for k in range(min(o.horizon, len(bars)))
    ]
    return backtest_windows(phases, o.horizon, o.alpha, n_sims=n_sims, seed=seed), phases[0]


def forecast_env(cfg: Config, part: str) -> TradingEnv:
    """The trading env of ``cfg`` on ``part`` (its overlay resolved, run start to end): its
    data, fill and overlay are what the forecasts come from."""
    kwargs = resolve_overlay(cfg.env.kwargs, cfg.risk)
    kwargs["random_start"] = False
    return make_trading_env(**data_kwargs(cfg.data), part=part, **kwargs)


def has_overlay(cfg: Config) -> bool:
    """Whether ``cfg`` trades one asset under the risk overlay."""
    kind = env_kind(cfg.env.id)
    single = kind is not None and kind.single_asset
    return single and bool(resolve_overlay(cfg.env.kwargs, cfg.risk).get("overlay"))


def walkforward_limit(
    cfg: Config, frame: pd.DataFrame, *, n_sims: int = LIMIT_SIMS, seed: int = 0
) -> dict[str, Any] | None:
    """The ES backtest block of a walk-forward's stitched record ``frame`` (``agent_position``
    per realised bar), forecasts from ``cfg``'s data and overlay: ``None`` without an overlay,
    ``{"error": ...}`` when the data no longer holds the record's bars."""
    if not has_overlay(cfg):
        return None
    try:
        out = record_limit(
            forecast_env(cfg, "train"),
            frame.index,
            frame["agent_position"].to_numpy(),
            n_sims=n_sims,
            seed=seed,
        )
    except ValueError as exc:  # ConfigError and DataError included
        return {"error": str(exc)}
    return None if out is None else out[0].to_dict()


def cell_limit(
    run_dir: Path, *, n_sims: int = LIMIT_SIMS, seed: int = 0
) -> tuple[dict[str, Any], ForecastRecord] | None:
    """The ES backtest block of a training run's test backtest (``config.yaml``,
    ``backtest_test/equity.csv``) and its phase-0 windows; ``None`` without a config or an
    overlay. ``ValueError`` / ``OSError`` / ``KeyError`` when the files do not read back."""
    if not (run_dir / "config.yaml").is_file():
        return None
    cfg = Config.from_yaml(run_dir / "config.yaml")
    if not has_overlay(cfg):
        return None
    equity = pd.read_csv(run_dir / "backtest_test" / "equity.csv", index_col=0, parse_dates=True)
    equity = equity.iloc[1:]  # its first row is the period's start, before any step
    env = forecast_env(cfg, "test")
    positions = equity["agent_position"].to_numpy()
    out = record_limit(env, equity.index, positions, n_sims=n_sims, seed=seed)
    return None if out is None else (out[0].to_dict(), out[1].record)


def limit_line(block: dict[str, Any] | None) -> str | None:
    """One line saying what the ES backtest found (None without a block)."""
    if block is None:
        return None
    if "error" in block:
        return f"risk-limit forecast: ES backtest not computed ({block['error']})"
    h, a = block["horizon"], block["alpha"]
    head = f"risk-limit forecast (VaR/CVaR {a:.0%} of {h}-bar returns)"
    if not block["windows"]:
        return f"{head}: no non-overlapping window with a position to test"
    n = block["exceedances"]
    line = (
        f"{head} on {block['windows']} non-overlapping windows: {n} exceedance"
        f"{'' if n == 1 else 's'} of VaR, {block['expected']:.1f} expected (Kupiec p = "
        f"{_num(block['kupiec_p'], '.3f')}); Z2 = {_num(block['z2'], '+.2f')} (p = "
        f"{_num(block['z2_p'], '.3f')}): {_verdict(block)}"
    )
    if block["phases"] > 1:
        line += (
            f"; of all {block['phases']} phases Kupiec rejects in "
            f"{block['kupiec_reject_phases']}, Z2 in {block['z2_reject_phases']}"
        )
    return line


def risk_line(risk: dict[str, Any]) -> str | None:
    """λ at the end of training and the overlay's binding share, in one line (None if the
    run recorded neither)."""
    parts = []
    if risk.get("lambda_mean") is not None:
        parts.append(
            f"λ at the end of training: mean {risk['lambda_mean']:.2f}, max "
            f"{risk['lambda_max']:.2f}, > 0 in {risk['lambda_positive_share']:.0%} of cells"
        )
    if risk.get("overlay_binding_oos") is not None:
        parts.append(
            f"risk overlay bound on {risk['overlay_binding_oos']:.0%} of out-of-sample bars "
            f"({risk['overlay_binding_train'] or 0:.0%} over training), keeping "
            f"{risk['overlay_cut_oos'] or 1:.0%} of the sized exposure there"
        )
    return "; ".join(parts) or None


def _verdict(block: dict[str, Any]) -> str:
    parts = []
    if block["z2_reject"]:
        parts.append("Z2 rejects at 5% — the CVaR forecast under-states the risk")
    if block["kupiec_reject"]:
        many = block["exceedances"] > block["expected"]
        parts.append(f"Kupiec rejects at 5% — too {'many' if many else 'few'} exceedances")
    return "; ".join(parts) or "neither test rejects at 5%"


def limit_html(block: dict[str, Any] | None) -> str:
    """The report section of the ES backtest ("" without a block)."""
    line = limit_line(block)
    if line is None or block is None:
        return ""
    rows = ""
    if "error" not in block and block["windows"]:
        body = "".join(
            f'<tr><td>{html.escape(k)}</td><td class="num">{html.escape(v)}</td></tr>'
            for k, v in _table_cells(block)
        )
        rows = f'<table class="metrics"><tbody>{body}</tbody></table>'
    note = (
        "The overlay's forecast of holding each decided position for the next horizon bars "
        "(without its margin), tested on every horizon-th decision bar so that no two windows "
        "share a bar; Z2's p-value is simulated from the overlay's own model "
        "(docs/risk.md, \u201cIs the limit's forecast right?\u201d)."
    )
    return (
        f"<section><h2>Is the limit's forecast right?</h2><p>{html.escape(line)}</p>{rows}"
        f"<p>{html.escape(note)}</p></section>"
    )


def _table_cells(b: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of the report's table of a computed block."""
    cvar, tail = _num(b["mean_forecast_cvar"], ".2%"), _num(b["mean_tail_return"], ".2%")
    phases = f"{b['kupiec_reject_phases']} / {b['z2_reject_phases']} of {b['phases']}"
    return [
        ("windows (non-overlapping, with a position)", str(b["windows"])),
        ("exceedances of VaR: observed / expected", f"{b['exceedances']} / {b['expected']:.1f}"),
        ("Kupiec (1995) p, two-sided", _num(b["kupiec_p"], ".3f")),
        (
            "Acerbi–Székely (2014) Z2 / one-sided p",
            f"{_num(b['z2'], '+.2f')} / {_num(b['z2_p'], '.3f')}",
        ),
        ("mean CVaR forecast / mean return in exceedances", f"{cvar} / {tail}"),
        ("phases rejecting at 5%: Kupiec / Z2", phases),
    ]


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None or not math.isfinite(value) else format(value, spec)
