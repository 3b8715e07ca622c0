"""Price files as users download them, through the command line: a ``Date,Close`` export and a
FRED series (``DATE,SP500`` with ``.`` on holidays) train end to end with the default config; a
data error names its remedy as ``--set`` options; the run directory's backtest works from any
working directory (``data.path`` is stored absolute). Real processes, real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).parents[2]
SMALL = [
    "total_timesteps=128", "env.n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64",
    "policy.lstm_hidden_size=8",
]  # fmt: skip
N_BARS = 900  # the default config needs about 860 (feature warm-up and 252-bar episodes)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "riskppo.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )


def train(data: str, run: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    sets = [a for s in [f"data.path={data}", *SMALL, *extra] for a in ("--set", s)]
    return cli("train", *sets, "--run-dir", run, "--no-progress", cwd=cwd)


def closes(n: int) -> tuple[pd.DatetimeIndex, np.ndarray]:
    rng = np.random.default_rng(11)
    return pd.bdate_range("2012-01-02", periods=n), 80 * np.exp(
        np.cumsum(rng.normal(2e-4, 0.01, n))
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``dates_close.csv`` (``Date,Close``) and ``SP500.csv`` (FRED: ``DATE,SP500``, holidays
    as ``.``: one single gap and one of two days)."""
    d = tmp_path_factory.mktemp("downloads")
    dates, close = closes(N_BARS)
    day = dates.strftime("%Y-%m-%d")
    pd.DataFrame({"Date": day, "Close": close.round(4)}).to_csv(d / "dates_close.csv", index=False)
    values = [f"{c:.2f}" for c in close]
    for i in (40, 41, 500):
        values[i] = "."
    lines = ["DATE,SP500", *(f"{t},{v}" for t, v in zip(day, values))]
    (d / "SP500.csv").write_text("\n".join(lines) + "\n")
    return d


@pytest.mark.slow  # about 30 s on a loaded 2-core machine
def test_a_date_close_export_trains_and_backtests_from_anywhere(data_dir, tmp_path) -> None:
    proc = train("dates_close.csv", "run", data_dir)  # a path relative to the user's cwd
    assert proc.returncode == 0, proc.stderr
    assert "training riskppo/Trading-v0 on dates_close.csv for 128 steps" in proc.stdout
    run = data_dir / "run"
    stored = yaml.safe_load((run / "config.yaml").read_text())["data"]["path"]
    assert stored == str(data_dir / "dates_close.csv")  # absolute
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    back = cli("backtest", str(run), "--split", "val", cwd=elsewhere)
    assert back.returncode == 0, back.stderr
    assert (run / "backtest_val" / "report.html").is_file()


def test_a_fred_series_with_dot_gaps_is_refused_in_cli_words(data_dir) -> None:
    refused = train("SP500.csv", "refused", data_dir)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("riskppo: data error: ") and "data row 41" in line
    assert line.endswith("; add --set data.nan_policy=ffill to forward-fill it")


@pytest.mark.slow  # about 30 s on a loaded 2-core machine
def test_a_fred_series_with_dot_gaps_trains_with_ffill(data_dir) -> None:
    proc = train("SP500.csv", "fred", data_dir, "data.nan_policy=ffill")
    assert proc.returncode == 0, proc.stderr
    assert "training riskppo/Trading-v0 on SP500.csv" in proc.stdout
    assert (data_dir / "fred" / "backtest_test" / "report.html").is_file()
