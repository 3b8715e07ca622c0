"""A real walk-forward with two seeds and a trial ledger, twice (two configurations on one file):
the verdict lines show each seed's Sharpe ratio beside the mean record's, and the second run
the SPA p-value over the two configurations beside the Šidák-adjusted p."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from riskppo.envs.market.synthetic import gbm
from tests.small_run import SMALL_WALKFORWARD_SETS

SMALL = SMALL_WALKFORWARD_SETS


def _walkforward(tmp: Path, data: Path, run: str, *sets: str) -> str:
    args = [a for s in [*SMALL, f"data.path={data}", *sets] for a in ("--set", s)]
    cmd = [sys.executable, "-m", "riskppo.cli", "walkforward", "--initial", "700", "--step"]
    cmd += ["100", "--seeds", "0", "1", "--workers", "1", "--no-progress", *args]
    cmd += ["--run-dir", str(tmp / run), "--ledger", str(tmp / "ledger")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_seed_spread_and_spa_in_the_walk_forward_verdict(tmp_path: Path) -> None:
    data = tmp_path / "m.csv"
    gbm(900, seed=3).reset_index().to_csv(data, index=False)
    first = _walkforward(tmp_path, data, "a")
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    seeds = metrics["seeds"]
    per_seed = [
        metrics["records"][label]["stats"]["agent"]["sharpe"]["estimate"]
        for label in seeds["labels"]
    ]
    assert len(per_seed) == 2 and seeds["agent"] == per_seed
    mean = metrics["records"]["mean of seeds"]["stats"]
    assert seeds["mean_record"] == mean["agent"]["sharpe"]["estimate"]
    assert seeds["benchmark"] == mean["benchmark"]["sharpe"]["estimate"]
    line = next(s for s in first.splitlines() if s.startswith("  seeds: agent Sharpe "))
    values = ", ".join(f"{v:.2f}" for v in per_seed)
    assert line.startswith(f"  seeds: agent Sharpe {values} (sd ")
    assert f"mean record {seeds['mean_record']:.2f}; " in line
    assert "SPA (Hansen 2005)" not in first  # one configuration in the ledger: nothing to test
    second = _walkforward(tmp_path, data, "b", "ppo.learning_rate=1e-4")
    metrics = json.loads((tmp_path / "b" / "metrics.json").read_text())
    spa = metrics["trials"]["spa"]
    assert spa is not None and spa["n_configs"] == 2 and spa["n_bars"] == metrics["oos_bars"]
    assert 0 < spa["p"] <= 1 and spa["p_lower"] <= spa["p"] <= spa["p_upper"]
    found = re.search(
        r"  SPA \(Hansen 2005\) over 2 configurations: p = (\S+) \(Šidák: (\S+)\)", second
    )
    assert found is not None, second
    assert float(found.group(1)) == pytest.approx(spa["p"], rel=0.05)
    assert float(found.group(2)) == pytest.approx(metrics["verdict"]["p_adjusted"], rel=0.05)
    assert "  StepM (Romano & Wolf 2005, familywise 5%): " in second
