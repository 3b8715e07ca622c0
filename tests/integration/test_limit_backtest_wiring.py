"""The ES backtest of the risk overlay's forecast reaches a real walk-forward's metrics.json,
printed summary and report, and is what its saved files and the data alone give again; a
universe cell's test backtest gets its block, and the universe table its pooled line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.cli.main import load_config
from riskppo.cli.universe import run_universe
from riskppo.config import Config
from riskppo.envs.market.synthetic import gbm
from riskppo.evaluation.limit_backtest import cell_limit, forecast_env, walkforward_limit
from riskppo.evaluation.universe import CellResult, limit_section
from riskppo.walkforward.plan import WalkForwardSettings
from riskppo.walkforward.run import walk_forward
from tests.small_run import SMALL_WALKFORWARD_SETS

SMALL = SMALL_WALKFORWARD_SETS


def test_a_walk_forward_reports_the_forecast_backtest(tmp_path: Path) -> None:
    data = tmp_path / "m.csv"
    gbm(1000, seed=5).reset_index().to_csv(data, index=False)
    cfg = load_config(None, [*SMALL, f"data.path={data}"])
    assert cfg.env.kwargs.get("overlay")  # the default agent trades under the overlay
    run = tmp_path / "wf"
    settings = WalkForwardSettings(initial=600, step=200, workers=1)
    done = walk_forward(cfg, run, settings, progress_bar=False)
    metrics, out = done.metrics, done.summary
    block = metrics["limit_backtest"]
    assert block is not None and "error" not in block, block
    # 400 out-of-sample bars, 20-bar windows: 19 with a 20-bar outcome in the data
    assert block["windows"] == 19 and block["horizon"] == 20 and block["phases"] == 20
    assert block["expected"] == pytest.approx(0.05 * 19)
    assert 0 <= block["kupiec_p"] <= 1 and 0 < block["z2_p"] <= 1
    assert json.loads((run / "metrics.json").read_text())["limit_backtest"] == block
    assert "risk-limit forecast (VaR/CVaR 5% of 20-bar returns) on 19 non-overlapping" in out
    page = (run / "report.html").read_text()
    assert "Is the limit&#x27;s forecast right?" in page and "Kupiec (1995) p" in page
    # the saved files and the data alone give it again (records are written to 10 digits)
    again = walkforward_limit(
        Config.from_yaml(run / "config.yaml"),
        pd.read_csv(run / "records" / "s0.csv", index_col=0, parse_dates=True),
    )
    assert again is not None
    for key, value in block.items():
        same = again[key] is None if value is None else again[key] == pytest.approx(value, 1e-6)
        assert same, (key, again[key], value)


def test_a_record_off_the_data_is_named(tmp_path: Path) -> None:
    data = tmp_path / "m.csv"
    gbm(500, seed=1).reset_index().to_csv(data, index=False)
    cfg = load_config(None, [f"data.path={data}"])
    frame = pd.DataFrame(
        {"agent_position": [0.5]}, index=pd.DatetimeIndex(["1990-01-01"], name="timestamp")
    )
    block = walkforward_limit(cfg, frame)
    assert block == {"error": "the record's bar 1990-01-01 00:00:00 is not in the data (it "
                     "changed since the run)"}  # fmt: skip
    assert walkforward_limit(load_config(None, ["env.kwargs.overlay=false"]), frame) is None


def test_forecast_env_is_the_configs_env(tmp_path: Path) -> None:
    data = tmp_path / "m.csv"
    gbm(600, seed=2).reset_index().to_csv(data, index=False)
    cfg = load_config(None, [f"data.path={data}", "env.kwargs.fill=next_close"])
    env = forecast_env(cfg, "test")
    assert env.fill == "next_close" and env.overlay is not None
    assert env.overlay.margin == 1.3 and env.overlay.limit == cfg.risk.cvar_limit
    assert len(env.df) == 600 and np.isfinite(env.overlay_cap[-1])  # type: ignore[index]


def test_a_universe_tabulates_the_forecast_backtest_per_stock_and_pooled(tmp_path: Path) -> None:
    """One real universe cell (a tiny ``riskppo train`` on KO): its block in universe.json and
    universe.md, the pooled test of one record is that record's own test; a cell whose files
    do not give the forecasts is named, not dropped."""
    tiny = ["total_timesteps=256", "env.n_envs=2", "ppo.n_steps=32", "ppo.batch_size=64"]
    run = tmp_path / "uni"
    run_universe(
        load_config(None, tiny), run, symbols=["KO"], seeds=[0], workers=1, progress_bar=False
    )
    summary = json.loads((run / "universe.json").read_text())["limit_backtest"]
    (cell,) = summary["cells"]
    assert (cell["symbol"], cell["seed"], cell["horizon"]) == ("KO", 0, 20)
    assert cell["windows"] > 10 and cell["phases"] == 20
    pooled = summary["pooled"]
    assert pooled["markets"] == 1
    for key in ("windows", "exceedances", "kupiec_p", "z2", "z2_p"):
        assert pooled[key] == cell[key], key
    again = cell_limit(run / "cells" / "KO-s0")
    assert again is not None and again[0] == {
        k: v for k, v in cell.items() if k not in ("symbol", "seed")
    }
    table = (run / "universe.md").read_text()
    assert "## Is the limit's forecast right? (VaR/CVaR 5% of 20-bar returns)" in table
    row = f"| KO | {cell['windows']} | {cell['exceedances']} / {cell['expected']:.1f} |"
    assert row in table and "| pooled (1 stock) |" in table
    # two seeds of one stock share its outcomes: the pooled test takes the stock once
    twice = limit_section(
        [CellResult("KO", s, str(run / "cells" / "KO-s0")) for s in (0, 1)], n_sims=200
    )
    assert len(twice.cells) == 2 and twice.pooled is not None
    assert (twice.pooled["markets"], twice.pooled["windows"]) == (1, cell["windows"])
    broken = tmp_path / "broken"
    shutil.copytree(run / "cells" / "KO-s0", broken)
    (broken / "backtest_test" / "equity.csv").unlink()
    limits = limit_section([CellResult("KO", 0, str(broken))])
    assert limits.pooled is None and "error" in limits.cells[0]
    assert "| KO | not computed: its files do not give the forecasts (" in limits.markdown
