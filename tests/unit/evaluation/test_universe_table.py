"""``riskppo universe`` without training: the verdict table from real backtest files (its
cells and command line: tests/unit/cli/test_universe_cells.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from riskppo.evaluation.universe import account_returns, cell_result, count_cells, format_table


def write_backtest(run_dir: Path, agent: dict, bench: dict, equity: dict) -> Path:
    out = run_dir / "backtest_test"
    out.mkdir(parents=True)
    metrics = {"agent": agent, "vol_target_buy_and_hold": bench}
    (out / "metrics.json").write_text(json.dumps(metrics))
    (out / "run_info.json").write_text(json.dumps({"bars_per_year": 252}))
    pd.DataFrame(equity).to_csv(out / "equity.csv", index=False)
    return run_dir


def agent_metrics(sharpe: float, cvar: float, market: float = 1.0, active: float = 1.0) -> dict:
    return {
        "sharpe": sharpe,
        "cvar_horizon": cvar,
        "cvar_limit": -0.04,
        "cvar_horizon_bars": 20,
        "market_share": market,
        "mean_abs_exposure": 0.25,
        "active_share": active,
    }


def test_cells_are_read_counted_and_tabulated(tmp_path: Path) -> None:
    equity = {"agent_equity": [1.0, 1.1, 0.99], "vol_target_buy_and_hold_equity": [1.0, 1.0, 1.2]}
    a = write_backtest(tmp_path / "A", agent_metrics(0.9, -0.03), agent_metrics(0.5, -0.05), equity)
    b_agent = agent_metrics(0.2, -0.05, market=0.4, active=0.6)
    b = write_backtest(tmp_path / "B", b_agent, agent_metrics(0.4, -0.02), equity)
    cells = [
        cell_result("AAPL", 0, a),
        cell_result("KO", 0, b),
        cell_result("MSFT", 0, tmp_path / "C", "exit code 2: riskppo: data error: x"),
    ]
    assert (cells[0].limit_met, cells[0].beats_benchmark) == (True, True)
    assert (cells[1].limit_met, cells[1].beats_benchmark) == (False, False)
    assert cells[2].error and cells[2].agent_sharpe is None and cells[2].limit_met is None
    assert cells[0].p_value is None  # two returns are too few to test
    assert (cells[0].benchmark_limit_met, cells[1].benchmark_limit_met) == (False, True)
    k = count_cells(cells)
    assert (k.n, k.failed, k.limit_met, k.beats_benchmark) == (3, 1, 1, 1)
    assert k.benchmark_limit_met == 1
    assert (k.in_market, k.active) == (1, 2)  # B: 40% in the market by exposure, its signal 60%
    table = format_table(cells, "t")
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len({row.count("|") for row in rows}) == 1  # every row has the header's columns
    assert (
        "| AAPL | 0.90 | 0.50 | -0.0300 | -0.0400 | yes | -0.0500 | 100% | 0.25 | 100% | - |"
        in table
    )
    assert "| KO | 0.20 | 0.40 | -0.0500 | -0.0400 | no | -0.0200 | 40% | 0.25 | 60% | - |" in table
    assert "in the market (|exposure| >= 0.05) 1/3; its signal active" in table
    assert "| MSFT | failed: exit code 2: riskppo: data error: x |" in table
    assert (
        "CVaR20 limit met: 1/3 (vol-targeted buy-and-hold: 1/3); agent Sharpe >= vol-targeted "
        "buy-and-hold: 1/3; failed: 1/3"
    ) in table
    assert "seed" not in rows[0]
    several = format_table([cells[0], cell_result("AAPL", 1, a)], "t")
    assert "| stock | seed |" in several and "| AAPL | 1 |" in several


def test_account_returns_from_equity_csv(tmp_path: Path) -> None:
    """Simple returns, as the metrics' Sharpe ratio (doubling then halving: +100%, -50%)."""
    equity = {"agent_equity": [1.0, 1.1, 0.99], "vol_target_buy_and_hold_equity": [1.0, 2.0, 1.0]}
    run = write_backtest(tmp_path / "A", agent_metrics(1, -0.01), agent_metrics(1, -0.01), equity)
    r = account_returns(run / "backtest_test" / "equity.csv", "vol_target_buy_and_hold")
    np.testing.assert_allclose(r, [1.0, -0.5])
    np.testing.assert_allclose(account_returns(run / "backtest_test" / "equity.csv", "agent"),
                               [0.1, -0.1], rtol=1e-12)  # fmt: skip
