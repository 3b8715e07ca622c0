"""A user's own CSV through ``data.path``, as a new user runs it: ``riskppo train`` (default
config, ``data.dataset`` left at its default), then ``riskppo eval``. Everything is labelled with
the data actually used. Real processes, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.cli.main import default_run_dir
from riskppo.config import Config
from riskppo.envs.market.ohlcv import default_split, load_ohlcv

SMALL = [
    "total_timesteps=256", "env.n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64",
    "policy.lstm_hidden_size=8",
]  # fmt: skip


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riskppo.cli", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def user_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1000 business days of a random walk (the default config needs about 860: 346 bars of
    feature warm-up and 252-bar episodes in the train part), in a user's spelling: ``Date``
    (day-first dotted), capitalised OHLCV columns."""
    return write_prices(tmp_path_factory.mktemp("data") / "my_prices.csv", 1000)


def write_prices(path: Path, n: int) -> Path:
    """``n`` business days of a random walk as a CSV with ``Date`` as ``31.12.2016``."""
    rng = np.random.default_rng(5)
    close = 50.0 * np.exp(np.cumsum(rng.normal(0.0002, 0.015, n)))
    idx = pd.date_range("2016-01-04", periods=n, freq="B")
    df = pd.DataFrame(
        {
            "Date": idx.strftime("%d.%m.%Y"),
            "Open": close,
            "High": close * 1.01,
            "Low": close * 0.99,
            "Close": close,
            "Volume": 5000,
        }
    )
    df.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def user_run(user_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    run = tmp_path_factory.mktemp("runs") / "mine"
    sets = [a for s in [f"data.path={user_csv}", *SMALL] for a in ("--set", s)]
    proc = cli("train", *sets, "--run-dir", str(run))
    assert proc.returncode == 0, proc.stderr
    return run, proc.stdout


def test_training_and_backtest_are_labelled_with_the_users_file(user_run) -> None:
    run, out = user_run
    assert "training riskppo/Trading-v0 on my_prices.csv for 256 steps" in out
    info = json.loads((run / "backtest_test" / "run_info.json").read_text())
    assert info["dataset"] == "my_prices.csv" and info["data_path"].endswith("my_prices.csv")
    report = (run / "backtest_test" / "report.html").read_text()
    assert "Backtest — my_prices.csv · test split" in report
    assert "GOOGL" not in report and "GOOGL" not in out


def test_eval_prints_and_writes_a_labelled_table(user_run, user_csv: Path) -> None:
    run, _ = user_run
    proc = cli("eval", str(run), "--episodes", "2", "--split", "val")
    assert proc.returncode == 0, proc.stderr
    val = default_split(load_ohlcv(user_csv)).val
    period = f"val: {val.index[0]:%Y-%m-%d} → {val.index[-1]:%Y-%m-%d}"
    ckpt = (run / "checkpoints" / "latest").read_text().strip()
    table = (run / "evaluation_val.txt").read_text()
    assert proc.stdout.startswith(table)  # what was printed is what was written
    assert table.splitlines()[0] == (
        "riskppo eval: riskppo/Trading-v0 on my_prices.csv, validation split (--split val)"
    )
    labels = [line.split("  ")[1] for line in table.splitlines()[1:]]
    assert labels == [
        "run", "checkpoint", "split", "episodes", "unit", "mean return", "std", "CVaR 5%",
        "min / max"
    ]  # fmt: skip
    assert f"{ckpt} (256 steps trained)" in table and period in table
    ev = json.loads((run / "evaluation_val.json").read_text())
    # a deterministic trading episode over the split is one episode, however many were asked for
    assert ev["checkpoint"] == ckpt and ev["split"] == "val" and ev["episodes"] == 1
    assert ev["period"]["start"].startswith(f"{val.index[0]:%Y-%m-%d}")
    assert set(ev["return"]) == {"mean", "std", "cvar", "min", "max"}


def test_default_run_dir_names_the_data_used(user_csv: Path) -> None:
    cfg = Config.build({"env": {"id": "riskppo/Trading-v0"}, "data": {"path": str(user_csv)}})
    assert default_run_dir(cfg).name.endswith("-riskppo_Trading-v0-my_prices-s0")
    cfg = Config.build({"env": {"id": "riskppo/Trading-v0"}})
    assert default_run_dir(cfg).name.endswith("-riskppo_Trading-v0-googl-s0")


def test_a_bad_data_file_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("Date,Open,High,Low,Close,Volume\n2020-01-02,10,9,11,10,5\n")
    proc = cli("train", "--set", f"data.path={bad}", "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"data error: {bad}: data row 1" in proc.stderr and "high < low" in proc.stderr


def test_too_little_data_for_the_config_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    short = write_prices(tmp_path / "short.csv", 400)  # 280 training bars, less their warm-up
    proc = cli("train", "--set", f"data.path={short}", "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "configuration error: trading env on short.csv (train part, bars 0..279 of 400)" in (
        proc.stderr
    )
    assert "use a shorter episode_length" in proc.stderr


def test_an_hourly_24_7_file_is_annualised_by_its_bars_with_one_warning(tmp_path: Path) -> None:
    """3,000 hourly bars of a market that never closes: sized and scored with 8,766 bars a year
    (not as 3,000 trading days), said once however many envs read the file."""
    rng = np.random.default_rng(3)
    idx = pd.date_range("2023-01-01", periods=3000, freq="h", tz="UTC")
    close = 20_000 * np.exp(np.cumsum(rng.normal(0.0, 0.004, 3000)))
    path = tmp_path / "btc_1h.csv"
    pd.DataFrame({"open_time": idx.asi8 // 10**6, "close": close}).to_csv(path, index=False)
    run = tmp_path / "r"
    sets = [a for s in [f"data.path={path}", *SMALL] for a in ("--set", s)]
    proc = cli("train", *sets, "--run-dir", str(run))
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "bars a year" in line]
    assert notes == [
        "riskppo: warning: btc_1h.csv has about 8,766 bars a year (3,000 bars over 125 days), "
        "not daily bars: annualising with env.kwargs.bars_per_year=8766 (set it to override)"
    ]
    info = json.loads((run / "backtest_test" / "run_info.json").read_text())
    assert info["bars_per_year"] == 8766.0


def test_an_unadjusted_split_is_named_once_and_data_adjusted_trades_the_adj_close(
    tmp_path: Path,
) -> None:
    """A broker's file: the traded Close falls 75% on a 4-for-1 split, the Adj Close does not."""
    path = write_prices(tmp_path / "broker.csv", 1000)
    raw = pd.read_csv(path)
    raw["Adj Close"] = raw["Close"]
    raw.loc[:599, ["Open", "High", "Low", "Close"]] *= 4
    raw.to_csv(path, index=False)
    sets = [a for s in [f"data.path={path}", *SMALL] for a in ("--set", s)]
    proc = cli("train", *sets, "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "split" in line]
    assert len(notes) == 1 and notes[0].startswith(f"riskppo: warning: {path}: data row 601 (")
    assert notes[0].endswith("; add --set data.adjusted=true to trade the Adj Close (splits and "
                             "dividends adjusted)")  # fmt: skip
    proc = cli("train", *sets, "--set", "data.adjusted=true", "--run-dir", str(tmp_path / "a"))
    assert proc.returncode == 0, proc.stderr
    assert "split" not in proc.stderr
