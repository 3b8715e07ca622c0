"""Backtest and report of a briefly trained agent on the bundled GOOGL data (R-TRADE-3).

Real env, real data, a real (briefly) trained model; no mocks. The sizing / flat-agent tests use
an untrained model on a synthetic CSV (the agent's actions do not matter there) and, for a flat
agent, a policy that always chooses the flat action.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import math
import re

import matplotlib.dates as mdates
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from riskppo import DistributionalPPO
from riskppo.cli.backtest import cmd_backtest, print_flat_warning
from riskppo.cli.runner import train_run
from riskppo.config import Config
from riskppo.envs.market.datasets import load_dataset
from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.trading.factory import make_trading_env, trading_range
from riskppo.evaluation.backtest import (
    STRATEGIES,
    backtest,
    backtest_run,
    flat_warning,
    overlay_binding_replayed,
)
from riskppo.evaluation.baselines import (
    buy_and_hold_policy,
    nearest_action,
    run_policy,
    sma_crossover_policy,
    sma_crossover_targets,
)
from riskppo.evaluation.metrics import SPEC_METRIC_KEYS, dumps_metrics
from riskppo.evaluation.plots import (
    REALISED_COLOR,
    plot_critic_quantiles,
    plot_positions,
    save_plots,
)
from riskppo.evaluation.report import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FEE = 0.0005  # TradingEnv default, used by the run below


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Train 2048 steps on GOOGL (train part), then backtest the test part."""
    run_dir = tmp_path_factory.mktemp("run")
    cfg = Config.build(
        {
            "seed": 0,
            "total_timesteps": 2048,
            "env": {"id": "riskppo/Trading-v0", "n_envs": 4},
            "ppo": {"n_steps": 64, "batch_size": 64, "bptt_len": 16, "n_epochs": 2},
            "policy": {"lstm_hidden_size": 32},
            "data": {"dataset": "googl"},
        }
    )
    train_run(cfg, run_dir, progress_bar=False)
    return backtest_run(run_dir, "test")


def test_metrics_json_has_every_strategy_with_spec_keys(run):
    def reject(token):
        raise AssertionError(f"metrics.json holds {token}")

    data = json.loads(run.metrics.read_text(), parse_constant=reject)
    assert run.metrics == run.out_dir / "metrics.json"
    assert run.out_dir.name == "backtest_test"
    assert set(data) == {
        "agent", "buy_and_hold", "vol_target_buy_and_hold", "vt_bh_overlay", "floor_overlay",
        "sma_crossover", "supervised",
    }  # fmt: skip
    extras = ("market_share", "mean_abs_exposure", "cvar_horizon", "cvar_limit", "flat")
    for name, entry in data.items():
        assert set(SPEC_METRIC_KEYS) <= set(entry), name
        assert set(extras) <= set(entry), name
        assert isinstance(entry["flat"], bool) and entry["cvar_horizon_bars"] == 20
        for key, value in entry.items():
            assert value is None or (isinstance(value, int | float) and math.isfinite(value)), (
                name,
                key,
                value,
            )
    # buy-and-hold on a rising test period with real volatility: everything is defined
    assert all(data["buy_and_hold"][k] is not None for k in SPEC_METRIC_KEYS)


def test_backtest_covers_exactly_the_test_period(run):
    df, lo, hi = trading_range("googl", None, (0.7, 0.15, 0.15), "test")
    r = run.result
    assert r.start == df.index[lo] and r.end == df.index[hi - 1]
    for name in STRATEGIES:
        frame = r.frames[name]
        assert frame.index.equals(pd.DatetimeIndex(df.index[lo + 1 : hi]))
        assert r.metrics[name].n_bars == hi - lo - 1


def test_buy_and_hold_equity_matches_close_prices_minus_entry_fee(run):
    bh = run.result.frames["buy_and_hold"]
    assert (bh["position"] == 1.0).all()
    np.testing.assert_allclose(bh["equity"], np.exp(np.cumsum(bh["log_return"])), rtol=1e-12)
    df, lo, hi = trading_range("googl", None, (0.7, 0.15, 0.15), "test")
    close = df["close"].to_numpy()
    direct = close[lo + 1 : hi] / close[lo] * math.exp(-FEE)  # entering long once costs the fee
    np.testing.assert_allclose(bh["equity"], direct, rtol=1e-10)
    csv = pd.read_csv(run.equity_csv, index_col="timestamp", parse_dates=True)
    assert csv["buy_and_hold_equity"].iloc[0] == 1.0  # the start row
    np.testing.assert_allclose(csv["buy_and_hold_equity"].iloc[1:], bh["equity"], rtol=1e-9)
    np.testing.assert_allclose(csv["close"].iloc[1:], close[lo + 1 : hi], rtol=1e-9)


def test_agent_frame_is_consistent_with_env_accounting(run):
    a = run.result.frames["agent"]
    assert set(np.unique(a["position"])) <= {-1.0, 0.0, 1.0}
    np.testing.assert_allclose(a["log_return"], a["gross_return"] - a["costs"], atol=1e-15)
    np.testing.assert_allclose(a["equity"], np.exp(np.cumsum(a["log_return"])), rtol=1e-12)
    # filled at the next open (the default): gross = previous position × the gap from the close
    # to the next open + the position held over the bar × the bar's open-to-close log return
    df, lo, hi = trading_range("googl", None, (0.7, 0.15, 0.15), "test")
    assert run.result.env_settings["fill"] == "next_open"
    o, c = df["open"].to_numpy()[lo + 1 : hi], df["close"].to_numpy()[lo:hi]
    pos = a["position"].to_numpy()
    gross = np.concatenate(([0.0], pos[:-1])) * np.log(o / c[:-1]) + pos * np.log(c[1:] / o)
    np.testing.assert_allclose(a["gross_return"], gross, atol=1e-15)
    dpos = np.abs(np.diff(a["position"].to_numpy(), prepend=0.0))
    borrow = 0.01 / 252 * np.maximum(-a["position"].to_numpy(), 0.0)
    np.testing.assert_allclose(a["costs"], FEE * dpos + borrow, atol=1e-15)


def test_critic_forecast_is_finite_and_ordered(run):
    c = run.result.critic
    assert len(c) == len(run.result.frames["agent"])
    assert c.index[0] == run.result.start
    assert np.isfinite(c.to_numpy()).all()
    assert (c["q05"] <= c["q25"]).all() and (c["q25"] <= c["q50"]).all()
    assert (c["q50"] <= c["q75"]).all() and (c["q75"] <= c["q95"]).all()
    assert (c["cvar"] <= c["var"] + 1e-12).all()


def test_report_is_self_contained_and_has_the_metrics_table(run):
    text = run.report.read_text(encoding="utf-8")
    assert run.report.name == "report.html"
    assert "http://" not in text and "https://" not in text
    assert "<script" not in text.lower() and "<link" not in text.lower()
    sources = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", text, flags=re.IGNORECASE)
    assert len(sources) >= 4 and all(s.startswith("data:image/png;base64,") for s in sources)
    assert 'id="metrics-table"' in text
    for label in ("Agent", "Buy &amp; hold", "SMA crossover", "Sharpe ratio", "CVaR 95%"):
        assert label in text
    assert "GOOGL" in text and "test split" in text
    # the subtitle names every baseline the report holds, the supervised one included
    assert (
        "agent vs Buy &amp; hold, Vol-targeted B&amp;H, Vol-targeted B&amp;H + overlay, Floor + "
        "overlay, SMA crossover and Supervised</div>" in text
    )
    # the fill in use, in the notes and the settings; run_info.json names it too
    assert "filled at the open of bar t+1 (the position held before earns the overnight gap)" in (
        " ".join(text.split())
    )
    assert json.loads((run.out_dir / "run_info.json").read_text())["env"]["fill"] == "next_open"
    # the statistics block: the verdict line on top, its figures in statistics.json
    block = json.loads((run.out_dir / "statistics.json").read_text())
    assert block["verdict"]["text"] in html.unescape(text)
    assert "edge over vol-targeted buy-and-hold not established" in block["verdict"]["text"]
    assert block["stats"]["n_bars"] == len(run.result.frames["agent"])


def test_plots_are_valid_pngs(run):
    assert set(run.plots) == {"equity", "position", "returns", "critic"}
    for path in run.plots.values():
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000, path


def test_cmd_backtest_prints_table_and_report_path(run, capsys):
    run_dir = run.out_dir.parent
    rc = cmd_backtest(argparse.Namespace(run_dir=str(run_dir), split="val"))
    out = capsys.readouterr().out
    assert rc == 0
    assert "Sharpe ratio" in out and "Buy & hold" in out
    assert str(run_dir / "backtest_val" / "report.html") in out
    data = json.loads((run_dir / "backtest_val" / "metrics.json").read_text())
    assert set(data) == set(STRATEGIES)


def test_cmd_backtest_reports_a_missing_run(tmp_path, capsys):
    assert cmd_backtest(argparse.Namespace(run_dir=str(tmp_path), split="test")) == 2
    assert "checkpoint" in capsys.readouterr().err


def test_sma_crossover_is_causal():
    """Changing closes after bar k changes no target decided at a bar <= k (nor any position)."""
    df = load_dataset("googl")
    _, lo, hi = trading_range("googl", None, (0.7, 0.15, 0.15), "test")
    k = lo + 120
    rng = np.random.default_rng(0)
    changed = df.copy()
    factor = np.exp(rng.normal(0.0, 0.05, size=len(df) - k - 1))
    for col in ("open", "high", "low", "close"):
        changed.iloc[k + 1 :, changed.columns.get_loc(col)] *= factor
    before = sma_crossover_targets(df["close"])
    after = sma_crossover_targets(changed["close"])
    np.testing.assert_array_equal(before[: k + 1], after[: k + 1])
    assert (before[k + 1 :] != after[k + 1 :]).any()  # the future did change

    # through the env: the positions held up to bar k+1 were decided at bars <= k
    frames = [
        run_policy(
            TradingEnv(d, start=lo, end=hi, random_start=False), sma_crossover_policy(d["close"])
        )
        for d in (df, changed)
    ]
    cut = df.index[k + 1]
    np.testing.assert_array_equal(
        frames[0].loc[:cut, "position"].to_numpy(), frames[1].loc[:cut, "position"].to_numpy()
    )


def test_sma_crossover_targets_by_hand():
    close = np.array([1.0, 2.0, 3.0, 4.0, 3.0, 1.0, 1.0])
    # fast=2, slow=3: SMA2 = [-, 1.5, 2.5, 3.5, 3.5, 2, 1], SMA3 = [-, -, 2, 3, 3.33, 2.67, 1.67]
    np.testing.assert_array_equal(sma_crossover_targets(close, 2, 3), [0, 0, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(
        sma_crossover_targets(close, 2, 3, allow_short=True), [0, 0, 1, 1, 1, -1, -1]
    )
    with pytest.raises(ValueError, match="fast"):
        sma_crossover_targets(close, 3, 3)


def test_baselines_map_to_the_nearest_allowed_position():
    env = make_trading_env(dataset="googl", part="test", positions=(-0.5, 0.0, 0.5))
    frame = run_policy(env, buy_and_hold_policy())
    assert (frame["position"] == 0.5).all()
    # the first fill buys half the equity; later ones only trade the drift back to half
    drift = frame["costs"].iloc[1:] / FEE
    assert frame["costs"].iloc[0] == pytest.approx(FEE * 0.5)
    assert (drift > 0).all() and drift.max() < 0.05
    cont = make_trading_env(dataset="googl", part="test", continuous=True)
    np.testing.assert_array_equal(nearest_action(cont, 1.0), np.array([1.0], np.float32))
    assert nearest_action(env, -0.2) == 1 and nearest_action(env, -0.3) == 0


def test_backtest_rejects_a_non_trading_model():
    model = DistributionalPPO("CartPole-v1", n_envs=1, n_steps=8, batch_size=8)
    try:
        with pytest.raises(ValueError, match="Trading-v0"):
            backtest(model, "test")
    finally:
        model.close()


def _independent_vol_target_bh(opens, close, t0, t1, *, target, span, max_leverage, fee, bpy):
    """Long signal 1 sized by vol targeting, decided at bars t0..t1-1 and filled at the next
    open (the default fill): (exposure, net log return) per bar, straight from the definition
    (explicit EWM sums, no pandas, no env), booked by an account of cash and shares that resets
    its holding to the exposure's share of equity at each fill, paying the fee on the share
    traded."""
    r = np.diff(np.log(close))  # r[t-1] = log(c_t / c_{t-1})
    w = 1.0 - 2.0 / (span + 1)
    exposure = []
    for t in range(t0, t1):
        rs = r[:t][::-1]  # r_t, r_{t-1}, ..., r_1
        weights = w ** np.arange(len(rs))
        sigma = math.sqrt(float(np.sum(weights * rs**2) / np.sum(weights)) * bpy)
        exposure.append(min(target / sigma, max_leverage))
    cash, shares, net = 1.0, 0.0, []
    for p, t in zip(exposure, range(t0, t1)):
        before = cash + shares * close[t]
        equity = cash + shares * opens[t + 1]  # the fill at the next open
        equity *= math.exp(-fee * abs(p - shares * opens[t + 1] / equity))
        shares = p * equity / opens[t + 1]
        cash = equity - shares * opens[t + 1]
        net.append(math.log((cash + shares * close[t + 1]) / before))
    return np.array(exposure), np.array(net)


def test_vol_target_buy_and_hold_uses_env_defaults_without_sizing(run):
    """The GOOGL run has no sizing: the vol-targeted baseline uses TradingEnv's defaults."""
    df, lo, hi = trading_range("googl", None, (0.7, 0.15, 0.15), "test")
    vt = run.result.frames["vol_target_buy_and_hold"]
    exposure, net = _independent_vol_target_bh(
        df["open"].to_numpy(),
        df["close"].to_numpy(),
        lo,
        hi - 1,
        target=0.10,
        span=60,
        max_leverage=1.0,
        fee=FEE,
        bpy=252,
    )
    np.testing.assert_allclose(vt["position"], exposure, rtol=1e-9)
    np.testing.assert_allclose(vt["log_return"], net, rtol=1e-9, atol=1e-14)
    assert (vt["signal"] == 1.0).all() and (vt["position"] < 1.0).any()
    assert run.result.env_settings["agent_sizing"] == "none"
    assert run.result.env_settings["fill"] == "next_open"


SIZED = {"sizing": "vol_target", "vol_target": 0.15, "vol_span": 30, "max_leverage": 2.0}


@pytest.fixture(scope="module")
def synthetic_csv(tmp_path_factory):
    """800 daily bars of a random walk with volatility regimes (so sizing moves)."""
    rng = np.random.default_rng(3)
    n = 800
    vol = np.where(np.arange(n) % 200 < 100, 0.01, 0.03)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0003, vol)))
    idx = pd.date_range("2015-01-01", periods=n, freq="B")
    df = pd.DataFrame(
        {
            "timestamp": idx.strftime("%Y-%m-%d"),
            "open": close,
            "high": close * 1.005,
            "low": close * 0.995,
            "close": close,
            "volume": 1000.0,
        }
    )
    path = tmp_path_factory.mktemp("data") / "synthetic.csv"
    df.to_csv(path, index=False)
    return path


def _model(path, env_kwargs, risk=None):
    return DistributionalPPO(
        config=Config.build(
            {
                "seed": 0,
                "env": {
                    "id": "riskppo/Trading-v0",
                    "n_envs": 1,
                    "kwargs": {"episode_length": 50, **env_kwargs},
                },
                "ppo": {"n_steps": 16, "batch_size": 16, "bptt_len": 8},
                "policy": {"lstm_hidden_size": 8},
                "data": {"dataset": None, "path": str(path)},
                "risk": risk or {},
            }
        )
    )


class CyclingAgent:
    """Short, flat, long, short, ... (actions 0, 1, 2 of the default positions -1, 0, 1)."""

    def __init__(self):
        self.t = 0

    def predict(self, obs, state=None, episode_start=None, deterministic=False):
        self.t += 1
        return np.full(len(obs), self.t % 3, dtype=np.int64), state


@pytest.fixture(scope="module")
def sized_result(synthetic_csv):
    """An agent whose config uses sizing="vol_target" (signals -1, 0, 1 in turn), backtested on
    the test part."""
    model = _model(synthetic_csv, SIZED)
    try:
        yield backtest(model, "test", agent=CyclingAgent())
    finally:
        model.close()


def test_plain_baselines_stay_unit_sized_when_the_agent_uses_vol_targeting(sized_result):
    r = sized_result
    assert r.env_settings["agent_sizing"] == "vol_target"
    bh = r.frames["buy_and_hold"]
    assert (bh["position"] == 1.0).all()  # one full unit, not a vol-targeted exposure
    assert bh["costs"].iloc[0] == pytest.approx(FEE) and (bh["costs"].iloc[1:] == 0.0).all()
    assert set(np.unique(r.frames["sma_crossover"]["position"])) <= {0.0, 1.0}
    vt = r.frames["vol_target_buy_and_hold"]
    assert not np.allclose(vt["position"], 1.0)  # the sized one does move
    for name in STRATEGIES:
        assert r.frames[name].index.equals(r.frames["agent"].index), name


def test_vol_target_buy_and_hold_equals_an_independent_computation(sized_result, synthetic_csv):
    """Causal vol-target exposure filled at the next open (gap for the held exposure, session
    for the new) − fee × |Δexposure|, with the config's vol_target / vol_span / max_leverage,
    from the agent's first decision bar."""
    r = sized_result
    df = pd.read_csv(synthetic_csv, parse_dates=["timestamp"], index_col="timestamp")
    close = df["close"].to_numpy()
    t0 = int(df.index.get_loc(r.start))
    t1 = t0 + len(r.frames["agent"])
    exposure, net = _independent_vol_target_bh(
        df["open"].to_numpy(),
        close,
        t0,
        t1,
        target=0.15,
        span=30,
        max_leverage=2.0,
        fee=FEE,
        bpy=252,
    )
    vt = r.frames["vol_target_buy_and_hold"]
    np.testing.assert_allclose(vt["position"], exposure, rtol=1e-9)
    np.testing.assert_allclose(vt["log_return"], net, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(vt["equity"], np.exp(np.cumsum(net)), rtol=1e-9)
    m = r.metrics["vol_target_buy_and_hold"]
    assert m.market_share == 1.0
    assert m.mean_abs_exposure == pytest.approx(exposure.mean(), rel=1e-9)
    # the agent's frame holds its exposure (signal × the same scale), not its signal
    agent = r.frames["agent"]
    assert set(np.unique(agent["signal"])) == {-1.0, 0.0, 1.0}
    np.testing.assert_allclose(agent["position"], agent["signal"] * exposure, rtol=1e-9, atol=0)


class FlatAgent:
    """Always the flat action (position 0 of the default positions -1, 0, 1)."""

    def predict(self, obs, state=None, episode_start=None, deterministic=False):
        return np.ones(len(obs), dtype=np.int64), state


@pytest.fixture(scope="module")
def flat_backtest(synthetic_csv, tmp_path_factory):
    model = _model(
        synthetic_csv, {}, risk={"cvar_alpha": 0.05, "cvar_horizon": 20, "cvar_limit": -0.06}
    )
    try:
        result = backtest(model, "test", agent=FlatAgent())
    finally:
        model.close()
    out = tmp_path_factory.mktemp("flat") / "backtest_test"
    out.mkdir()
    (out / "metrics.json").write_text(dumps_metrics(result.metrics_dict()))
    report = write_report(result, out / "report.html", images=save_plots(result, out))
    return result, out, report.read_text(encoding="utf-8")


def _table_rows(text):
    """{row label: [cell class, ...]} of the metrics table (strategies in STRATEGIES order)."""
    table = text.split('id="metrics-table"', 1)[1].split("</table>", 1)[0]
    rows = {}
    for tr in re.findall(r"<tr><th scope=\"row\">(.*?)</tr>", table):
        label = tr.split("<span", 1)[0]
        rows[label] = re.findall(r'<td class="([^"]*)"', tr)
    return rows


def test_flat_agent_is_called_out_and_never_best(flat_backtest):
    result, out, text = flat_backtest
    data = json.loads((out / "metrics.json").read_text())
    assert data["agent"]["flat"] is True and data["agent"]["market_share"] == 0.0
    assert data["buy_and_hold"]["flat"] is False
    # plain-text warning box at the top (before the metrics table)
    assert 'id="flat-warning"' in text
    assert text.index('id="flat-warning"') < text.index('id="metrics-table"')
    box = text.split('id="flat-warning"', 1)[1].split("</div>", 1)[0]
    assert "flat/near-flat" in box and "Agent: in the market on 0.0% of bars" in box
    rows = _table_rows(text)
    assert len(rows) >= 10
    for label, classes in rows.items():
        assert len(classes) == len(STRATEGIES), label
        assert "best" not in classes[STRATEGIES.index("agent")], label
    # holding nothing would win these rows; best goes to a strategy that held a position
    for label in ("Max drawdown", "Annual volatility", "CVaR 95% (per bar)"):
        assert any("best" in c for c in rows[label]), label
    # the constraint's own figure against the limit, met/violated per strategy
    assert "CVaR 5% of 20-bar returns" in text and "limit -6.00%" in text
    assert result.metrics["agent"].cvar_limit_met is True
    assert result.metrics["agent"].cvar_horizon == 0.0


def test_flat_agent_warning_on_the_command_line(flat_backtest, capsys):
    result, out, _ = flat_backtest
    line = flat_warning(result)
    assert line is not None and "Agent in the market on 0.0% of bars" in line
    assert "\n" not in line
    print_flat_warning(out)  # what `riskppo train` prints at its end
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith(
        "riskppo: WARNING: flat/near-flat on the test"
    )


def test_a_trading_agent_gets_no_flat_warning(sized_result, tmp_path, capsys):
    r = sized_result
    assert r.metrics["agent"].market_share == pytest.approx(2 / 3, abs=0.01)
    assert not r.metrics["agent"].flat
    assert flat_warning(r) is None
    (tmp_path / "metrics.json").write_text(dumps_metrics(r.metrics_dict()))
    print_flat_warning(tmp_path)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("realised", ["as backtested", "exactly 0"])
def test_realised_line_of_a_flat_agent_is_visible_in_the_critic_chart(flat_backtest, realised):
    """A flat agent's realised return-to-go is (about) 0, on the chart's 0% reference line: at
    the realised value of every decision bar the rendered chart shows the realised line's own
    colour (drawn over the bands, the median and the reference line, solid)."""
    result, _, _ = flat_backtest
    if realised == "exactly 0":  # the worst case: exactly on the reference line
        result = dataclasses.replace(result, critic=result.critic.assign(realised=0.0))
    fig = plot_critic_quantiles(result)
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    x = mdates.date2num(result.critic.index.to_pydatetime())
    points = np.column_stack([x, result.critic["realised"].to_numpy()])
    xy = fig.axes[0].transData.transform(points)
    cols = np.round(xy[:, 0]).astype(int)
    rows = np.round(pixels.shape[0] - xy[:, 1]).astype(int)
    want = np.array(to_rgb(REALISED_COLOR)) * 255
    seen = np.abs(pixels[rows, cols] - want).max(axis=1) <= 8
    assert seen[1:-1].mean() > 0.95, f"realised colour at {seen.mean():.0%} of its points"


class HalfAgent:
    """Continuous action 0: the signal in the middle of the env's range."""

    def predict(self, obs, state=None, episode_start=None, deterministic=False):
        return np.zeros((len(obs), 1), dtype=np.float32), state


@pytest.mark.parametrize(("long_only", "bottom"), [(True, -0.15), (False, -1.15)])
def test_exposure_panel_spans_the_agents_signal_range(synthetic_csv, long_only, bottom):
    """A long-only agent's exposure panel starts at flat, not at a short position it cannot take
    (mutation: the old fixed -1 bottom fails the long-only case)."""
    kwargs = {**SIZED, "continuous": True, "positions": None, "long_only": long_only}
    model = _model(synthetic_csv, kwargs)
    try:
        result = backtest(model, "test", agent=HalfAgent())
    finally:
        model.close()
    assert result.env_settings["signal_range"] == ([0.0, 1.0] if long_only else [-1.0, 1.0])
    fig = plot_positions(result)
    assert fig.axes[-1].get_ylim()[0] == pytest.approx(bottom)


def test_the_replayed_binding_share_counts_the_positions_the_overlay_clipped(synthetic_csv):
    """The overlay's binding share over a period with the agent's own signals: the share of
    decision bars whose held |exposure| is below the signal's sized one (the clip took it)."""
    overlay = {"margin": 1.0, "min_history": 50}
    model = _model(
        synthetic_csv,
        {**SIZED, "continuous": True, "long_only": True, "min_signal": 0.25, "overlay": overlay},
        risk={"cvar_limit": -0.06, "cvar_horizon": 20},
    )
    try:
        got = overlay_binding_replayed(model, "train")
        frame = backtest(model, "train").frames["agent"]
    finally:
        model.close()
    env = make_trading_env(
        path=str(synthetic_csv),
        part="train",
        random_start=False,
        overlay={**overlay, "limit": -0.06},
        **SIZED,
    )
    lo, hi = env.trading_range
    sized = np.abs(frame["signal"].to_numpy()) * env.uncapped_scale[lo:hi]
    clipped = np.abs(frame["position"].to_numpy()) < sized * (1 - 1e-12)
    assert 0 < clipped.mean() < 1
    assert got is not None and got["binding_share"] == pytest.approx(clipped.mean(), abs=1e-12)
    assert got["mode"] == "clip" and got["limit"] == -0.06
