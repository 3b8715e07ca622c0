"""References with the agent's risk machinery: vol-targeted buy-and-hold and the agent's floor
signal held in its own env (sizing, risk overlay, fill, fees), the verdict read against the
overlaid benchmark, and the random-timing null held like the agent's positions.

Real envs, real (tiny) training runs and a synthetic CSV with volatility regimes, on which the
overlay caps a full vol-targeted position on most but not all test bars; no mocks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from riskppo.cli.backtest import print_metrics_table
from riskppo.cli.runner import train_run
from riskppo.config import Config
from riskppo.envs.market.synthetic import gbm
from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.trading.factory import make_trading_env
from riskppo.evaluation.backtest import backtest_run, flat_warning
from riskppo.evaluation.baselines import run_policy
from riskppo.evaluation.timing_null import env_tables, timing_null
from riskppo.evaluation.universe import cell_result, format_table
from riskppo.evaluation.verdict import random_timing, random_timing_text, statistics_block
from riskppo.stats.core import sharpe
from riskppo.stats.null import random_signals

FLOOR = 0.75  # a large core, so that the overlay caps it too on some test bars
ENV = {  # continuous long-only with a core, vol-targeted: the default agent's shape
    "continuous": True,
    "long_only": True,
    "min_signal": FLOOR,
    "sizing": "vol_target",
    "vol_target": 0.08,
    "vol_span": 30,
    "max_leverage": 2.0,
    "episode_length": 50,
}
OVERLAY = {"min_history": 50}  # limit, alpha and horizon from the risk section
RISK = {"cvar_alpha": 0.05, "cvar_horizon": 20, "cvar_limit": -0.06}


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """800 daily bars alternating calm (0.8%) and wild (2.5%) stretches, opens apart from the
    previous close (so a next-open fill differs from a close fill)."""
    rng = np.random.default_rng(3)
    n = 800
    vol = np.where(np.arange(n) % 160 < 80, 0.008, 0.025)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0004, vol)))
    opens = close * np.exp(rng.normal(0.0, 0.002, n))
    idx = pd.date_range("2015-01-01", periods=n, freq="B")
    df = pd.DataFrame(
        {
            "timestamp": idx.strftime("%Y-%m-%d"),
            "open": opens,
            "high": np.maximum(opens, close) * 1.004,
            "low": np.minimum(opens, close) * 0.996,
            "close": close,
            "volume": 1000.0,
        }
    )
    path = tmp_path_factory.mktemp("data") / "regimes.csv"
    df.to_csv(path, index=False)
    return path


def _config(path: Path, env: dict[str, Any]) -> Config:
    return Config.build(
        {
            "seed": 0,
            "total_timesteps": 32,
            "env": {"id": "riskppo/Trading-v0", "n_envs": 1, "kwargs": env},
            "ppo": {"n_steps": 16, "batch_size": 16, "bptt_len": 8, "n_epochs": 1},
            "policy": {"lstm_hidden_size": 8},
            "data": {"dataset": None, "path": str(path)},
            "risk": RISK,
        }
    )


def _trained(tmp_path_factory: pytest.TempPathFactory, path: Path, env: dict[str, Any]) -> Any:
    run_dir = tmp_path_factory.mktemp("run")
    train_run(_config(path, env), run_dir, progress_bar=False)
    return backtest_run(run_dir, "test")


@pytest.fixture(scope="module")
def overlaid(tmp_path_factory: pytest.TempPathFactory, market: Path) -> Any:
    """A (briefly) trained agent under the risk overlay, backtested on its test rows."""
    return _trained(tmp_path_factory, market, {**ENV, "overlay": OVERLAY})


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, market: Path) -> Any:
    """The same agent without an overlay, long–short without a core (its floor is 0: flat)."""
    env = {k: v for k, v in ENV.items() if k not in ("long_only", "min_signal")}
    return _trained(tmp_path_factory, market, env)


def test_the_benchmark_holds_the_full_signal_under_the_overlay(overlaid: Any) -> None:
    """``vt_bh_overlay`` is signal 1 in the agent's env: within the overlay's cap on every bar,
    at the cap where it binds (there below the unoverlaid vol-targeted position), and the
    unoverlaid position where it does not."""
    r = overlaid.result
    tables = r.tables
    ref, vt = r.frames["vt_bh_overlay"], r.frames["vol_target_buy_and_hold"]
    assert (ref["signal"] == 1.0).all() and tables is not None and tables.cap is not None
    pos, cap, u = ref["position"].to_numpy(), tables.cap, tables.scale
    assert (np.abs(pos) <= cap).all()
    binds = cap < u
    assert 0.3 < binds.mean() < 1.0  # the data were made so: both kinds of bars occur
    np.testing.assert_array_equal(pos[binds], cap[binds])
    assert (pos[binds] < vt["position"].to_numpy()[binds]).all()
    np.testing.assert_allclose(pos[~binds], vt["position"].to_numpy()[~binds], rtol=1e-12)
    # the learnability suite's vt_bh: the full signal run through the agent's env
    env = make_trading_env(
        path=r.config.data.path, part="test", random_start=False, **_agent_kwargs(r.config)
    )
    again = run_policy(env, lambda bar: 1.0)
    pd.testing.assert_frame_equal(again, ref)
    assert set(json.loads(overlaid.metrics.read_text())) >= {"vt_bh_overlay", "floor_overlay"}


def _agent_kwargs(cfg: Config) -> dict[str, Any]:
    from riskppo.envs.registration import resolve_overlay

    kwargs = resolve_overlay(cfg.env.kwargs, cfg.risk)
    return {k: v for k, v in kwargs.items() if k != "episode_length"}


def test_the_floor_reference_holds_the_core_signal_under_the_overlay(overlaid: Any) -> None:
    r = overlaid.result
    floor, tables = r.frames["floor_overlay"], r.tables
    assert tables is not None and tables.cap is not None
    assert (floor["signal"] == FLOOR).all()
    expected = np.clip(FLOOR * tables.scale, -tables.cap, tables.cap)
    np.testing.assert_array_equal(floor["position"].to_numpy(), expected)
    assert 0.0 < (tables.cap < FLOOR * tables.scale).mean() < 1.0  # the cap takes some
    assert not r.metrics["floor_overlay"].flat  # a core position, in the market


def test_a_floor_of_zero_is_the_flat_reference_and_not_warned_about(plain: Any) -> None:
    r = plain.result
    floor = r.frames["floor_overlay"]
    assert (floor["position"] == 0.0).all() and (floor["log_return"] == 0.0).all()
    assert r.metrics["floor_overlay"].flat  # never "best" in a table ...
    assert "Floor" not in (flat_warning(r) or "")  # ... but not a strategy that failed to trade
    report = plain.report.read_text(encoding="utf-8")
    box = report.split('id="flat-warning"', 1)[-1].split("</div>", 1)[0]  # the warning box
    assert "Floor" not in box and "Vol-targeted B&amp;H + overlay" in report
    # without an overlay the full signal in the agent's env is vol-targeted buy-and-hold itself
    pd.testing.assert_frame_equal(r.frames["vt_bh_overlay"], r.frames["vol_target_buy_and_hold"])


def test_the_verdict_reads_the_overlaid_benchmark_under_an_overlay(overlaid: Any) -> None:
    block = overlaid.statistics
    assert block["benchmark"]["key"] == "vt_bh_overlay" and block["benchmark"]["note"] is None
    bench = np.expm1(overlaid.result.frames["vt_bh_overlay"]["log_return"].to_numpy())
    bpy = overlaid.result.bars_per_year
    assert block["stats"]["benchmark"]["sharpe"]["estimate"] == pytest.approx(sharpe(bench, bpy))
    text = block["verdict"]["text"]
    assert "over vol-targeted buy-and-hold under the same risk overlay not established (" in text
    assert "VT B&H+overlay" in overlaid.verdict()
    report = overlaid.report.read_text(encoding="utf-8")
    assert "VT B&amp;H+overlay scaled" in report and "Vol-targeted B&amp;H + overlay" in report
    on_disk = json.loads((overlaid.out_dir / "statistics.json").read_text())
    assert on_disk["benchmark"]["key"] == "vt_bh_overlay"


def test_the_verdict_reads_plain_vol_targeted_buy_and_hold_without_an_overlay(plain: Any) -> None:
    block = plain.statistics
    assert block["benchmark"]["key"] == "vol_target_buy_and_hold"
    assert "under the same risk overlay" not in block["verdict"]["text"]
    assert block["random_timing"]["held"] == "agent_env"  # its own env, no overlay to apply


def test_the_console_table_names_the_references(overlaid: Any, capsys: Any) -> None:
    print_metrics_table(overlaid.result)
    out = capsys.readouterr().out
    head = out.split("━")[0]  # the headers, wrapped over two lines
    assert head.count("+overlay") == 2 and "VT B&H" in head and "floor" in head
    assert max(len(line) for line in out.splitlines()) <= 104


def test_a_universe_cell_under_an_overlay_is_judged_against_the_overlaid_benchmark(
    overlaid: Any, plain: Any
) -> None:
    cell = cell_result("X", 0, overlaid.out_dir.parent)
    assert cell.error is None and cell.benchmark == "vt_bh_overlay"
    assert cell.benchmark_sharpe == overlaid.result.metrics["vt_bh_overlay"].sharpe
    assert "| stock | agent Sharpe | VT B&H+overlay Sharpe |" in format_table([cell], "t")
    other = cell_result("Y", 0, plain.out_dir.parent)
    assert other.benchmark == "vol_target_buy_and_hold"
    mixed = format_table([cell, other], "t")
    assert "under the agent's risk overlay in 1 cells" in mixed


# ------------------------------------------------------------------ the random-timing null


def _env(market: Path, **kwargs: Any) -> TradingEnv:
    kw = {**ENV, "episode_length": None, **kwargs}
    return make_trading_env(path=str(market), part="test", random_start=False, **kw)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"overlay": {**OVERLAY, "limit": -0.06}},
        {"overlay": {**OVERLAY, "limit": -0.06, "mode": "scale"}},
        {"overlay": {**OVERLAY, "limit": -0.04}, "long_only": False, "min_signal": 0.0},
        {},
    ],
    ids=["clip", "scale", "long-short clip (borrow costs)", "no overlay"],
)
def test_the_null_holds_random_signals_as_the_env_does(market: Path, kwargs: Any) -> None:
    """Positions and net returns of the null's vectorised tables equal stepping the env with
    the same signals, to the last bit."""
    env = _env(market, **kwargs)
    first, _ = env.trading_range
    tables = env_tables(env, first, env.max_episode_steps)
    signals = random_signals(3, env.max_episode_steps, env.signal_range, 8.0, seed=1)
    for sig in signals:
        frame = run_policy(env, lambda bar, s=sig: float(s[bar - first]))
        held = frame["signal"].to_numpy()  # the signals the env took (float32 actions)
        np.testing.assert_array_equal(tables.exposures(held), frame["position"].to_numpy())
        np.testing.assert_array_equal(tables.returns(held), frame["log_return"].to_numpy())
    if kwargs:
        capped = np.abs(tables.exposures(signals)) < np.abs(tables.scale * signals)
        assert capped.any()  # the cap took some


def test_the_null_equals_the_env_with_a_delayed_fill(tmp_path: Path, market: Path) -> None:
    """Close-only data fill at the next close: the decided signal holds the next bar."""
    df = pd.read_csv(market)[["timestamp", "close"]]
    df.to_csv(tmp_path / "close.csv", index=False)
    env = _env(tmp_path / "close.csv", overlay={**OVERLAY, "limit": -0.06})
    assert env.fill == "next_close"
    first, _ = env.trading_range
    tables = env_tables(env, first, env.max_episode_steps)
    grid = np.random.default_rng(0).integers(0, 9, size=env.max_episode_steps)
    sig = FLOOR + (1.0 - FLOOR) * grid / 8  # exact in a float32 action: the env holds them as is
    frame = run_policy(env, lambda bar: float(sig[bar - first]))
    np.testing.assert_array_equal(tables.returns(sig), frame["log_return"].to_numpy())
    held = tables.exposures(sig)
    np.testing.assert_array_equal(held[:-1], frame["position"].to_numpy()[1:])


def test_the_null_over_a_stitched_record_starts_every_segment_flat(market: Path) -> None:
    """Two walk-forward segments (each env starts flat): the record's env columns and segment
    column give the tables whose returns equal the two envs' records stitched."""
    from riskppo.evaluation.timing_null import tables_from_record

    parts, frames = [], []
    for k, (lo, hi) in enumerate(((500, 650), (650, 799))):
        env = make_trading_env(
            path=str(market),
            bars=(0, lo, lo, hi + 1),
            part="test",
            random_start=False,
            **{**ENV, "episode_length": None, "overlay": {**OVERLAY, "limit": -0.06}},
        )
        first, _ = env.trading_range
        assert first == lo
        tables = env_tables(env, first, env.max_episode_steps)
        sig = random_signals(1, env.max_episode_steps, env.signal_range, 5.0, seed=k)[0]
        frame = run_policy(env, lambda bar, s=sig, f=first: float(s[bar - f]))
        parts.append(pd.DataFrame({**tables.columns(), "segment": k}, index=frame.index))
        frames.append(frame)
    record = pd.concat(parts)
    settings = {"fill": env.fill, "fee": env.fee, "borrow_rate": env.borrow_rate}
    stitched = tables_from_record(
        record, {**settings, "bars_per_year": env.bars_per_year}, {"mode": "clip"}
    )
    assert stitched is not None and stitched.starts.sum() == 2
    held = pd.concat(frames)
    np.testing.assert_array_equal(
        stitched.returns(held["signal"].to_numpy()), held["log_return"].to_numpy()
    )
    assert tables_from_record(record.drop(columns="env_cap"), settings, None) is None


def test_the_null_sharpe_ratios_are_those_of_stepping_the_env(market: Path) -> None:
    """The verdict's null, on five signals: each Sharpe ratio is that of the env's own record
    of the same random signal, and the percentile is in percent."""
    env = _env(market, overlay={**OVERLAY, "limit": -0.06})
    first, _ = env.trading_range
    n_steps = env.max_episode_steps
    tables = env_tables(env, first, n_steps)
    band, span, bpy = env.signal_range, 6.0, env.bars_per_year
    null = timing_null(0.5, tables, band, smoothness=span, periods_per_year=bpy, n=5, seed=4)
    stepped = []
    for sig in random_signals(5, n_steps, band, span, seed=4):
        frame = run_policy(env, lambda bar, s=sig: float(s[bar - first]))
        stepped.append(sharpe(np.expm1(frame["log_return"].to_numpy()), bpy))  # the account's
    np.testing.assert_allclose(null.null_sharpes, stepped, rtol=1e-6)  # float32 actions
    assert null.percentile == pytest.approx(100.0 * np.mean(np.array(stepped) < 0.5))


def test_the_verdict_null_is_in_percent_and_held_under_the_overlay(overlaid: Any) -> None:
    r = overlaid.result
    timing = overlaid.statistics["random_timing"]
    assert timing["held"] == "agent_env_overlay" and timing["n"] == 2000
    # recomputed from the same tables: the stored percentile is the share below, in percent
    assert r.tables is not None
    null = timing_null(
        timing["agent_sharpe"],
        r.tables,
        tuple(timing["band"]),
        smoothness=timing["smoothness"],
        periods_per_year=r.bars_per_year,
    )
    share = float(np.mean(null.null_sharpes < timing["agent_sharpe"]))
    assert 0.0 <= timing["percentile"] <= 100.0
    assert timing["percentile"] == pytest.approx(100.0 * share)
    words = f"beats {timing['percentile']:.0f}% of 2000 smooth random signals in its band, held"
    assert words in random_timing_text(timing)
    assert words in overlaid.verdict()


def test_the_overlay_changes_what_the_null_holds(overlaid: Any) -> None:
    """Without the tables (an old record) the null sizes random signals by the unoverlaid
    vol-targeted exposure: another null, and the block says which was used."""
    r = overlaid.result
    frames, bpy, fee = r.frames, r.bars_per_year, r.env_settings["fee"]
    with_env = random_timing(frames, bpy, fee=fee, seed=0, tables=r.tables)
    without = random_timing(frames, bpy, fee=fee, seed=0)
    assert without["held"] == "vol_target_gross" and with_env["held"] == "agent_env_overlay"
    assert with_env["null_median_sharpe"] != without["null_median_sharpe"]
    old = statistics_block(frames, bpy, fee=fee, overlay=True)
    assert "predates its env tables" in random_timing_text(old["random_timing"])


# ------------------------------------------------------------------ walk-forward


SMALL = [
    "env.n_envs=1",
    "ppo.n_steps=32",
    "ppo.batch_size=32",
    "total_timesteps=64",
    "env.kwargs.episode_length=100",
]


def test_the_walk_forward_record_keeps_the_references_and_reads_old_runs(tmp_path: Path) -> None:
    """One (segment, seed) cell of the default agent (overlay on): its record holds the
    references and the env's tables, the verdict is read against the overlaid benchmark and
    the null is held in the agent's env; a run written before them still reports, against
    plain vol-targeted buy-and-hold, and says so."""
    from riskppo.cli.main import load_config
    from riskppo.walkforward.plan import WalkForwardSettings
    from riskppo.walkforward.run import prepare, run_cell, walk_forward

    data = tmp_path / "m.csv"
    gbm(900, seed=3).reset_index().to_csv(data, index=False)
    cfg = load_config(None, [*SMALL, f"data.path={data}"])
    settings = WalkForwardSettings(initial=800, step=100, workers=1)
    run = tmp_path / "wf"
    wf = prepare(cfg, settings, run, resume=False)
    run_cell(wf.job(wf.segments[0], 0))
    done = walk_forward(None, run, settings, resume=True, progress_bar=False)
    metrics, out = done.metrics, done.summary
    block = metrics["records"]["seed 0"]
    assert block["benchmark"]["key"] == "vt_bh_overlay"
    assert "under the same risk overlay" in metrics["verdict"]["text"]
    assert block["random_timing"]["held"] == "agent_env_overlay"
    assert {"vt_bh_overlay", "floor_overlay"} <= set(block["metrics"])
    cells = pd.read_csv(run / "segments.csv")
    assert (cells["benchmark"] == "vt_bh_overlay").all()
    assert (cells["benchmark_sharpe"] == cells["vt_bh_overlay_sharpe"]).all()
    assert cells["floor_overlay_sharpe"].notna().all()
    assert "VT B&H+overlay" in out
    assert "VT B&amp;H+overlay Sharpe" in (run / "report.html").read_text()

    _make_old(run / "cells" / "seg00-s0")
    done = walk_forward(None, run, settings, resume=True, progress_bar=False)
    metrics, out = done.metrics, done.summary
    block = metrics["records"]["seed 0"]
    assert block["benchmark"]["key"] == "vol_target_buy_and_hold"
    assert "written before that reference existed" in block["benchmark"]["note"]
    assert block["random_timing"]["held"] == "vol_target_gross"
    assert "benchmark: this record has no vol-targeted buy-and-hold under" in out
    assert (pd.read_csv(run / "segments.csv")["benchmark"] == "vol_target_buy_and_hold").all()
    assert "written before that reference existed" in (run / "report.html").read_text()


def _make_old(cell: Path) -> None:
    """Rewrite a finished cell as a run written before the references and env tables."""
    record = pd.read_csv(cell / "record.csv", index_col=0)
    new = [c for c in record.columns if c.startswith(("vt_bh_overlay_", "floor_overlay_", "env_"))]
    assert len(new) == 14  # two strategies' five columns, four env tables
    record.drop(columns=new).to_csv(cell / "record.csv", float_format="%.17g")
    summary = json.loads((cell / "cell.json").read_text())
    for key in ("record_sha256", "fill", "borrow_rate"):
        summary.pop(key)
    for key in ("vt_bh_overlay", "floor_overlay"):
        summary["metrics"].pop(key)
    (cell / "cell.json").write_text(json.dumps(summary))
