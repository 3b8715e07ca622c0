"""``riskppo signal``: tomorrow's position of a trained run equals the backtest's position on the
same bars, bit for bit — on the default GOOGL agent (vol-targeted, risk overlay), an hourly
EURUSD agent without an overlay and a three-stock portfolio — and a file that does not fit the
run is one line.

Each run is trained briefly (tests/live_runs.py) and backtested on its test split; the run's own
bars are written as a price file cut at several decision bars ``t`` and the signal on each file
(the agent started at the backtest's first bar) is compared with the position the backtest
decided at ``t``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.evaluation.backtest import backtest
from riskppo.evaluation.portfolio.backtest import portfolio_backtest
from riskppo.live.signal import signal
from riskppo.runs.rundir import load_for_evaluation
from tests.live_runs import PORTFOLIO_SYMBOLS, price_frame, train, write_bars

CUTS = (1, 7, 60)  # decision bars after the backtest's first one; and the last one


class Backtested:
    """A trained run, its test backtest's agent frame and first decision bar."""

    def __init__(self, run_dir: Path, frame: pd.DataFrame, start: pd.Timestamp) -> None:
        self.run_dir, self.frame, self.start = run_dir, frame, start


def _backtested(kind: str, run_dir: Path) -> Backtested:
    train(kind, run_dir)
    _, model = load_for_evaluation(run_dir)
    try:
        if kind == "portfolio":
            frame = portfolio_backtest(model, "test", names=()).frames["agent"]
            bars = price_frame(kind).index  # the first step ends one bar after its decision
            start = bars[bars.searchsorted(frame.index[0]) - 1]
        else:
            result = backtest(model, "test")
            frame, start = result.frames["agent"], result.start
    finally:
        model.close()
    return Backtested(run_dir, frame, start)


_RUNS: dict[str, Backtested] = {}


def _run(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Backtested:
    """Each kind of run trained and backtested once for the module's tests."""
    if kind not in _RUNS:
        _RUNS[kind] = _backtested(kind, tmp_path_factory.mktemp(f"run-{kind}"))
    return _RUNS[kind]


@pytest.fixture(scope="module", params=["googl", "eurusd", "portfolio"])
def backtested(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    return request.param, _run(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def googl(tmp_path_factory: pytest.TempPathFactory) -> Backtested:
    """The default GOOGL run (the CLI and its errors do not depend on the kind of run)."""
    return _run("googl", tmp_path_factory)


def _decision_bars(bt: Backtested) -> list[pd.Timestamp]:
    """Bar ``k`` of the backtest decides the position of frame row ``k`` (held from the next bar);
    frame rows are indexed by the bar a step ends at."""
    decided_at = [bt.start, *bt.frame.index[:-1]]
    return [decided_at[k] for k in (*CUTS, len(decided_at) - 1)]


def test_signal_equals_backtest_position_bit_for_bit(backtested, tmp_path: Path) -> None:
    kind, bt = backtested
    bars = price_frame(kind)
    decided_at = [bt.start, *bt.frame.index[:-1]]
    for when in _decision_bars(bt):
        k = decided_at.index(when)
        path = write_bars(bars.loc[:when], tmp_path / f"{kind}.csv")
        record = signal(bt.run_dir, path, start=bt.start)
        assert record.timestamp == when and record.start == bt.start
        assert record.steps == k  # the LSTM warmed up over the backtest's own bars
        row = bt.frame.iloc[k]
        if kind == "portfolio":
            assert record.weights is not None
            for sym in PORTFOLIO_SYMBOLS:
                assert record.weights[sym] == row[f"w_{sym}"], (when, sym)
            assert record.exposure == pytest.approx(sum(record.weights.values()), abs=1e-12)
        else:
            assert record.exposure == row["position"], when  # exact, not approx
            assert record.signal == row["signal"], when
            held = 0.0 if k == 0 else bt.frame["position"].iloc[k - 1]
            assert record.held == held


def test_inputs_explain_the_exposure(backtested, tmp_path: Path) -> None:
    kind, bt = backtested
    when = _decision_bars(bt)[-1]
    record = signal(bt.run_dir, write_bars(price_frame(kind).loc[:when], tmp_path / "f.csv"))
    assert record.vol_scale > 0
    if kind == "eurusd":  # no overlay: the exposure is the signal, sized
        assert record.overlay_cap is None and record.forecast_cvar is None
        assert record.exposure == record.signal * record.vol_scale
    elif kind == "googl":  # the overlay caps the full signal's position; the signal scales it
        assert record.overlay_cap is not None and record.cvar_limit == -0.04
        assert record.exposure == record.signal * min(record.vol_scale, record.overlay_cap)
        assert record.forecast_cvar is not None and record.forecast_cvar >= record.cvar_limit
        assert np.isclose(record.forecast_cvar, -0.04 * record.exposure / record.overlay_cap)


def test_cli_prints_and_writes_json_atomically(googl: Backtested, tmp_path: Path) -> None:
    kind, bt = "googl", googl
    when = _decision_bars(bt)[1]
    path = write_bars(price_frame(kind).loc[:when], tmp_path / "bars.csv")
    out = tmp_path / "signal.json"
    proc = subprocess.run(
        [sys.executable, "-m", "riskppo.cli", "signal", str(bt.run_dir), "--data", str(path),
         "--start", str(bt.start.date()), "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    k = [bt.start, *bt.frame.index[:-1]].index(when)
    assert doc["exposure"] == bt.frame["position"].iloc[k]
    assert doc["timestamp"] == when.isoformat()
    for key in ("signal", "vol_scale", "overlay_cap", "forecast_cvar", "exposure", "action"):
        assert key in doc and key.split("_")[0] in proc.stdout.replace("raw signal", "signal")
    assert not list(tmp_path.glob(".signal.json.tmp-*"))  # no temp file left


def _cli_error(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "riskppo.cli", "signal", *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert all(ln.startswith("riskppo: ") for ln in lines), proc.stderr  # warnings, then it
    return lines[-1]


def test_bad_inputs_are_one_line(googl: Backtested, tmp_path: Path) -> None:
    bt = googl
    bars = price_frame("googl")
    short = write_bars(bars.iloc[:30], tmp_path / "short.csv")
    line = _cli_error(str(bt.run_dir), "--data", str(short))
    assert "short.csv" in line and "too few" in line and "warm-up" in line
    close_only = write_bars(bars[["close"]], tmp_path / "close_only.csv")
    line = _cli_error(str(bt.run_dir), "--data", str(close_only))
    assert "close_only.csv" in line and "lacks the columns high, low" in line
    assert "features hl_range need" in line
    broken = bars.copy()
    broken.iloc[100, broken.columns.get_loc("close")] = -1.0
    line = _cli_error(str(bt.run_dir), "--data", str(write_bars(broken, tmp_path / "neg.csv")))
    assert "neg.csv" in line and line.endswith("fix the file or pass another --data"), line
    empty = tmp_path / "not_a_run"
    empty.mkdir()
    line = _cli_error(str(empty), "--data", str(short))
    assert "no usable checkpoint" in line and str(empty) in line


def test_a_bad_price_file_answers_before_the_model_loads(googl: Backtested, tmp_path: Path) -> None:
    """A missing or malformed ``--data`` file is read before torch is imported: with a
    ``torch`` that fails on import first on the path, the answer is still the file's line."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    path = os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    broken = price_frame("googl")
    broken.iloc[100, broken.columns.get_loc("close")] = -1.0
    neg = write_bars(broken, tmp_path / "neg.csv")
    line = _cli_error(str(googl.run_dir), "--data", str(neg), env=env)
    assert "neg.csv" in line and line.endswith("fix the file or pass another --data"), line
    line = _cli_error(str(googl.run_dir), "--data", str(tmp_path / "none.csv"), env=env)
    assert "none.csv: no such price file" in line, line
