"""A run that never makes a trading env or reads a demonstration file never imports pandas or
pyarrow (≈ 70 MB of peak RSS, the target: peak RSS ≤ RecurrentPPO's). A fresh interpreter, a real
CartPole training run, checked after the fact."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import torch
torch.set_num_threads(1)
from riskppo import DistributionalPPO
cfg = {"env": {"id": "CartPole-v1", "n_envs": 2}, "ppo": {"n_steps": 16, "batch_size": 32}}
DistributionalPPO(config=cfg).learn(64)
print(json.dumps({m: m in sys.modules for m in ("pandas", "pyarrow", "riskppo.envs.trading.env")}))
"""


def test_a_cartpole_run_imports_neither_pandas_nor_pyarrow():
    """Mutation check: importing ``riskppo.envs.teacher`` at the top of ``algo/bc.py`` (or
    ``data_kwargs`` from ``envs.factory`` in ``envs/vec.py``) makes this fail."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=True
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == {"pandas": False, "pyarrow": False, "riskppo.envs.trading.env": False}
