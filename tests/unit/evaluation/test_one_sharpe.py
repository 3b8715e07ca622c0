"""One Sharpe ratio per strategy: the verdict, its test, the supervised comparison, the random
timing null, the universe's p-value and the trial ledger all read the account's simple returns,
the returns the metrics table's (empyrical) Sharpe ratio is computed from.

The records are volatile (3% a bar) so that a Sharpe ratio of log returns differs from the
simple one by far more than the tolerances (log returns lose σ²/2 a bar)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo import stats
from riskppo.envs.execution.fills import FillReturns
from riskppo.evaluation.metrics import strategy_metrics
from riskppo.evaluation.timing_null import EnvTables
from riskppo.evaluation.trials import TrialSpec, judge_trials
from riskppo.evaluation.verdict import statistics_block

N, BPY = 600, 252


def _frames(seed: int = 0) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    asset = rng.normal(0.002, 0.03, N)  # per-bar log returns
    idx = pd.date_range("2020-01-01", periods=N, freq="B", name="timestamp")
    signal = 0.25 + 0.75 * rng.random(N)
    spec = {
        "buy_and_hold": (np.ones(N), np.ones(N), asset),
        "vol_target_buy_and_hold": (np.ones(N), np.ones(N), asset),
        "agent": (signal, signal, np.log1p(signal * np.expm1(asset))),
        "supervised": (np.full(N, 0.5), np.full(N, 0.5), np.log1p(0.5 * np.expm1(asset))),
    }
    return {
        name: pd.DataFrame(
            {"position": p, "signal": s, "log_return": r, "gross_return": r, "costs": 0.0},
            index=idx,
        )
        for name, (p, s, r) in spec.items()
    }


def _table_sharpe(frame: pd.DataFrame) -> float:
    m = strategy_metrics(frame["log_return"], frame["position"], bars_per_year=BPY,
                         cvar_alpha=0.05, cvar_horizon=20, cvar_limit=None)  # fmt: skip
    assert m.sharpe is not None
    return float(m.sharpe)


def test_the_verdict_reads_the_sharpe_ratio_the_table_shows() -> None:
    frames = _frames()
    asset = frames["buy_and_hold"]["log_return"].to_numpy()
    starts = np.zeros(N, dtype=bool)
    starts[0] = True
    tables = EnvTables(np.ones(N), None, "clip", FillReturns(np.zeros(N), asset, False), starts,
                       fee=0.0, borrow_per_bar=0.0)  # fmt: skip
    block = statistics_block(frames, BPY, fee=0.0, tables=tables)
    s = block["stats"]
    agent, bench = _table_sharpe(frames["agent"]), _table_sharpe(frames["vol_target_buy_and_hold"])
    log_sharpe = stats.sharpe(frames["agent"]["log_return"].to_numpy(), BPY)
    assert abs(log_sharpe - agent) > 0.05  # the two definitions are far apart here
    assert s["agent"]["sharpe"]["estimate"] == pytest.approx(agent, rel=1e-12)
    assert s["benchmark"]["sharpe"]["estimate"] == pytest.approx(bench, rel=1e-12)
    assert block["random_timing"]["agent_sharpe"] == pytest.approx(agent, rel=1e-12)
    assert block["supervised"]["sharpe"] == pytest.approx(_table_sharpe(frames["supervised"]))


def test_the_ledger_records_the_tables_sharpe_ratio(tmp_path: Path) -> None:
    from riskppo.config import Config

    frames = _frames(1)
    cfg = Config.from_yaml(Path(__file__).parents[3] / "riskppo/configs/trading_googl.yaml")
    spec = TrialSpec(ledger=tmp_path / "ledger", kind="backtest", protocol={})
    trials = judge_trials(spec, frames["agent"]["log_return"], BPY, tmp_path / "run", cfg)
    assert trials is not None
    (row,) = trials.configs
    assert row.sharpe == pytest.approx(_table_sharpe(frames["agent"]), rel=1e-12)
