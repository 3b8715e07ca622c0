"""``riskppo walkforward`` on the portfolio env: two segments of three sp500 stocks, one seed,
a few hundred training steps per cell (slow: two trainings in worker processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from riskppo.cli.main import load_config, preset_path
from riskppo.evaluation.portfolio.backtest import OVERLAY_SUFFIX
from riskppo.evaluation.portfolio.baselines import BASELINES
from riskppo.walkforward.plan import WalkForwardSettings
from riskppo.walkforward.run import walk_forward

SMALL = [
    "env.n_envs=2",
    "ppo.n_steps=64",
    "ppo.batch_size=128",
    "total_timesteps=256",
    "env.kwargs.symbols=[AAPL, KO, XOM]",
    "env.kwargs.features=[vret_1, vret_20, ewmvol_20]",
]


@pytest.mark.slow
def test_portfolio_walkforward_writes_the_report(tmp_path: Path) -> None:
    cfg = load_config(str(preset_path("portfolio_sp20.yaml")), SMALL)
    settings = WalkForwardSettings(initial=8012, step=150, seeds=(0,), workers=1)
    metrics = walk_forward(cfg, tmp_path / "wf", settings, progress_bar=False).metrics
    held = {f"{n}{OVERLAY_SUFFIX}" for n in BASELINES}  # the same allocations under the overlay
    assert set(metrics["metrics"]) == {"agent", *BASELINES, *held}
    assert metrics["best_baseline"] in {*BASELINES, *held}
    assert len(metrics["segments"]) == 2 and metrics["cells_with_limit"] == 2
    for name in ("report.html", "equity.png", "weights.png", "turnover.png", "cvar.png"):
        assert (tmp_path / "wf" / name).is_file(), name
    cell = json.loads((tmp_path / "wf" / "cells" / "seg01-s0" / "cell.json").read_text())
    assert cell["train_bars"] == [0, 8162]  # the baselines re-fitted on the cell's own rows
    for key in ("overlay_test", "overlay_train"):  # the preset's overlay, risk.cvar_limit
        assert cell[key]["limit"] == -0.04 and 0 < cell[key]["binding_share"] <= 1, key
    assert metrics["risk"]["overlay_binding_oos"] is not None
    record = pd.read_csv(tmp_path / "wf" / "records" / "s0.csv", index_col=0)
    assert len(record) == 300 and {"agent_w_KO", "hrp_log_return"} <= set(record.columns)


@pytest.mark.slow
def test_pbt_runs_on_the_portfolio_env(tmp_path: Path) -> None:
    """``riskppo pbt`` on the portfolio preset: two members exploit and finish (≈ 50 s)."""
    run = tmp_path / "pbt"
    sets = [*SMALL, "total_timesteps=512", "pbt.population=2", "pbt.ready_updates=2"]
    preset = str(preset_path("portfolio_sp20.yaml"))
    cmd = [sys.executable, "-m", "riskppo.cli", "pbt", "--config", preset]
    cmd += [arg for s in sets for arg in ("--set", s)] + ["--run-dir", str(run), "--no-progress"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((run / "pbt_summary.json").read_text())
    assert len(summary["members"]) == 2, summary
    assert "best member" in out.stdout


@pytest.mark.slow
def test_a_portfolio_walkforward_is_counted_in_the_trial_ledger(tmp_path: Path) -> None:
    """Two configurations judged on the same three stocks: the second verdict counts both
    (N = 2), as a single-asset walk-forward's does (≈ 35 s)."""
    settings = WalkForwardSettings(initial=8012, step=150, seeds=(0,), workers=1)
    ledger = tmp_path / "ledger"
    got = []
    for steps in (256, 384):
        cfg = load_config(
            str(preset_path("portfolio_sp20.yaml")), [*SMALL, f"total_timesteps={steps}"]
        )
        run = walk_forward(
            cfg, tmp_path / f"wf{steps}", settings, progress_bar=False, ledger=ledger
        )
        got.append(run.metrics)
    assert [m["trials"]["n_configs"] for m in got] == [1, 2]
    assert [m["n_trials"] for m in got] == [1, 2]
    assert "adjusted for N = 2 trials" in got[1]["verdict"]["text"]
    rows = [json.loads(line) for line in (ledger / "ledger.jsonl").read_text().splitlines()]
    assert [r["data_label"] for r in rows] == ["SP500[AAPL,KO,XOM]"] * 2
    assert rows[0]["data"] == rows[1]["data"] and rows[0]["data"].startswith("sp500[AAPL,KO,XOM]:")
