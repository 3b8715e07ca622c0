"""Preparing demonstrations for BC, measured in a child process: peak memory of the order of the
demonstrations."""

from __future__ import annotations

import os
import subprocess
import sys

PREPARE_MEMORY = """
import resource, sys, torch
from gymnasium import spaces
from riskppo.config import Config
from riskppo.demos.files import Demonstrations
from riskppo.nn.policy import RecurrentActorCritic
from riskppo.algo.bc import BCSource, prepare_demos
T = 250_000
d = Demonstrations(torch.randn(T, 1, 4), torch.zeros(T, 1, dtype=torch.long),
                   torch.zeros(T, 1, dtype=torch.bool), None)
cfg = Config.build({"policy": {"lstm_hidden_size": 64}})
policy = RecurrentActorCritic(spaces.Box(-9, 9, (4,)), spaces.Discrete(2), cfg.policy,
                              n_critics=2, critic_out=32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
prepare_demos(policy, cfg, BCSource(lambda: d, None))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_preparing_demonstrations_takes_memory_of_the_order_of_the_demonstrations():
    """250k steps of 4 observations (4 MB): replaying them at once took ~700 MB of peak RSS."""
    out = subprocess.run(
        [sys.executable, "-c", PREPARE_MEMORY], capture_output=True, text=True, check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert int(out.stdout.strip()) < 150, out.stdout  # MiB
