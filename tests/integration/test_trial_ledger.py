"""The trial ledger through the command line: a second configuration trained on the same file
makes the verdict's N 2, its deflated Sharpe ratio uses the ledger's Sharpe variance, and PBO is
printed; the ledger's rows hold what the verdict read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from riskppo.envs.market.planted import ar_market
from riskppo.runs.ledger import read_ledger
from riskppo.stats import deflated_sharpe

TINY = [
    "env.n_envs=2",
    "ppo.n_steps=64",
    "ppo.batch_size=64",
    "total_timesteps=256",
    "env.kwargs.episode_length=100",
]


def _train(tmp: Path, data: Path, run: str, *sets: str) -> str:
    args = [a for s in [*TINY, f"data.path={data}", *sets] for a in ("--set", s)]
    cmd = [sys.executable, "-m", "riskppo.cli", "train", *args, "--no-progress"]
    cmd += ["--run-dir", str(tmp / run), "--ledger", str(tmp / "ledger")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_second_configuration_on_the_file_is_counted_and_deflates(tmp_path):
    data = tmp_path / "market.csv"
    ar_market(1000, phi=0.0, seed=11)[0].reset_index().to_csv(data, index=False)
    first = _train(tmp_path, data, "a")
    assert "N = 1 configuration judged on this data" in first
    assert "adjusted for N = 1 trial)" in first
    second = _train(tmp_path, data, "b", "ppo.learning_rate=1e-4")
    ledger = tmp_path / "ledger"
    assert f"N = 2 configurations judged on this data (ledger: {ledger})" in second
    assert "adjusted for N = 2 trials)" in second
    assert "PBO: " in second and "over 2 configurations on the same" in second
    rows = read_ledger(ledger).rows
    assert len(rows) == 2 and len({r.config for r in rows}) == 2
    # the deflated Sharpe ratio of the second run: N = 2 and the variance of the two Sharpes
    block = json.loads((tmp_path / "b" / "backtest_test" / "statistics.json").read_text())
    with np.load(ledger / rows[1].returns) as z:
        returns = z["returns"]
    var = float(np.var([r.sharpe for r in rows], ddof=1))
    expected = deflated_sharpe(returns, 2, var, rows[1].periods_per_year)
    assert block["stats"]["deflated_sharpe"] == pytest.approx(expected, rel=1e-9)
    assert block["trials"]["n_trials"] == 2
    assert block["trials"]["sharpe_var"] == pytest.approx(var, rel=1e-12)
    assert f"deflated Sharpe ratio: {expected:.3f}" in second


def test_universe_cells_record_in_the_ledger_the_universe_names(tmp_path):
    """A universe's cells are `riskppo train` processes: each records its stock's verdict in the
    ledger of the universe's --ledger (the bundled dataset's name, symbol and file hash)."""
    sets = ["total_timesteps=64", "env.n_envs=2", "ppo.n_steps=32", "ppo.batch_size=64"]
    args = [a for s in sets for a in ("--set", s)]
    cmd = [sys.executable, "-m", "riskppo.cli", "universe", "--no-progress", "--symbols", "KO"]
    cmd += ["--workers", "1", "--run-dir", str(tmp_path / "uni"), "--ledger", str(tmp_path / "L")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = read_ledger(tmp_path / "L").rows
    assert row.data.startswith("sp500[KO]:sha256:") and row.kind == "train"
    assert Path(row.run_dir).name == "KO-s0"


def test_a_ledger_path_that_is_a_file_stops_before_training(tmp_path):
    not_a_dir = tmp_path / "ledger"
    not_a_dir.write_text("")
    cmd = [sys.executable, "-m", "riskppo.cli", "train", "--ledger", str(not_a_dir)]
    cmd += ["--run-dir", str(tmp_path / "r"), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
        f"riskppo: trial ledger {not_a_dir} is not a directory; pass --ledger DIR (or --no-ledger)"
    )
    assert "training" not in proc.stdout
