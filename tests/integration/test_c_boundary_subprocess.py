"""The checks at the C boundary, in a child process: what would crash without them raises."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.compilers import needs_c_compiler

HINT = "; pass state=None to start fresh or the state returned for these observations"


_CRASHES_WITHOUT_CHECKS = """
import numpy as np, torch
from riskppo import DistributionalPPO
from riskppo.nn import native
from riskppo.nn.lstm_kernel import _native_forward, masked_lstm_recurrence, native_step
from riskppo.nn.recurrent import LSTMState

def attempt(label, fn, *args, **kw):
    try:
        fn(*args, **kw)
        print(label, "returned")
    except ValueError as exc:
        print(label, "ValueError", exc)

model = DistributionalPPO("CartPole-v1", seed=0, n_envs=1, n_steps=8, batch_size=8,
                          lstm_hidden_size=8, net_arch=[8])
meta = torch.zeros(1, 3, 8, device="meta")
args = [torch.zeros(2, 1, 3, 32), torch.zeros(1, 32, 8), meta, torch.zeros(1, 3, 8)]
args.append(torch.ones(2, 3))
attempt("recurrence", masked_lstm_recurrence, *args)
attempt("forward", _native_forward, *args)
attempt("step", native_step, torch.zeros(3, 32), torch.zeros(8, 32), torch.zeros(3, 8), meta[0])
with torch.inference_mode():
    attempt("actor", model.policy.rollout_actor().c_step, torch.zeros(3, 4),
            LSTMState(meta, meta), np.zeros(3, bool), None, True)
for path in ("C", "PyTorch"):
    _, one = model.predict(np.zeros((1, 4), np.float32))
    many = np.zeros((400_000, 4), np.float32)
    attempt(path + " predict", model.predict, many, state=one)
    attempt(path + " value_distribution", model.value_distribution, many, state=one)
    native._state.update(lib=None, reason="off")
"""


@needs_c_compiler()  # the child builds the kernel (the test's RISKPPO_NATIVE=0 aside)
def test_what_would_crash_without_the_checks_raises_instead(tmp_path):
    """In a child process, so that a crash fails this test instead of killing pytest: a state of
    1 env for 400,000 observations (C reads and writes far past the state) through ``predict``
    and ``value_distribution`` on both paths, and a meta tensor (a null pointer) at each C entry
    point."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RISKPPO_NATIVE", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_CRASHES_WITHOUT_CHECKS)],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, f"exit status {proc.returncode}: {proc.stderr[-3000:]}"
    lines = proc.stdout.splitlines()
    meta = "is on meta, expected"
    assert lines[:4] == [
        f"recurrence ValueError masked_lstm_recurrence: h0 {meta} cpu",
        f"forward ValueError the C LSTM forward: h0 {meta} the CPU",
        f"step ValueError native_step: c0 {meta} the CPU",
        f"actor ValueError the C actor step: state.h {meta} the CPU",
    ]
    for path, line in zip(["C"] * 2 + ["PyTorch"] * 2, lines[4:]):
        assert line.startswith(path) and line.endswith(HINT), line
        assert "state holds 1 env(s) but" in line and "400000 " in line, line
    assert len(lines) == 8, proc.stdout
