"""Close-only data end to end: the default agent trains on a close-only file, and loading the
sp500 dataset in a fresh interpreter imports neither skfolio nor scikit-learn."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from riskppo.config import Config, apply_overrides
from riskppo.envs import gbm

ROOT = Path(__file__).parents[2]
DEFAULT = Config.from_yaml(ROOT / "riskppo/configs/trading_googl.yaml")


@pytest.mark.slow  # about 15 s on a loaded 2-core machine
def test_default_agent_trains_on_a_close_only_file(tmp_path: Path, caplog) -> None:
    from riskppo import DistributionalPPO

    path = tmp_path / "agent.csv"
    gbm(900, seed=2)["close"].rename_axis("date").rename("Adj Close").to_csv(path)
    over = [f"data.path={path}", "env.n_envs=2", "ppo.n_steps=16", "ppo.batch_size=32"]
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        model = DistributionalPPO(config=apply_overrides(DEFAULT, over))
        model.learn(32)
    model.close()
    assert model.num_timesteps == 32
    left_out = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert left_out == ["close-only data (agent.csv): features hl_range left out (need high/low)"]


def test_sp500_does_not_import_skfolio() -> None:
    code = (
        "import sys; from riskppo.envs import load_dataset; load_dataset('sp500', symbol='KO');"
        "assert 'skfolio' not in sys.modules and 'sklearn' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
