"""The C LSTM kernel's build across processes (subprocesses, tens of seconds each): concurrent
first builds leave one library, and a changed kernel file never runs a stale compiled backward."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import riskppo
from tests.compilers import needs_c_compiler, needs_cxx_compiler


@needs_c_compiler()
def test_concurrent_first_builds_leave_one_library_and_all_work(tmp_path):
    """Four processes build into one empty cache at once (PBT workers starting together)."""
    code = textwrap.dedent(
        """
        import torch
        from riskppo.nn import native
        from riskppo.nn.lstm_kernel import masked_lstm_recurrence
        assert native.kernel() is not None, native.unavailable_reason()
        hs, _ = masked_lstm_recurrence(torch.ones(2, 1, 1, 4), torch.zeros(1, 4, 1),
                                       torch.zeros(1, 1, 1), torch.zeros(1, 1, 1), torch.ones(2, 1))
        print(float(hs.sum()))
        """
    )
    env = {**os.environ, "RISKPPO_CACHE": str(tmp_path / "cache")}
    env.pop("RISKPPO_NATIVE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert len({o for o, _ in outs}) == 1
    files = sorted(f.name for f in (tmp_path / "cache" / "native").iterdir())
    assert [f.rsplit(".")[-1] for f in files] == ["so", "sha256"], files  # no build leftovers


_COMPILE_AND_BACKWARD = """
import torch
from riskppo.nn.lstm_kernel import masked_lstm_recurrence

def loss(x, w, h, c, keep):
    hs, cs = masked_lstm_recurrence(x, w, h, c, keep)
    return hs.square().sum() + cs.sum()

torch.manual_seed(0)
args = [torch.randn(4, 1, 3, 8, requires_grad=True), torch.randn(1, 8, 2, requires_grad=True),
        torch.randn(1, 3, 2), torch.randn(1, 3, 2), torch.ones(4, 3)]
torch.compile(loss, dynamic=False)(*args).backward()
print(float(args[1].grad.sum()))
"""


@needs_cxx_compiler()
def test_a_changed_kernel_file_never_runs_a_stale_compiled_backward(tmp_path):
    """Inductor's disk cache is shared by every riskppo version a user runs, and it keys a graph
    on its ops' names only. Reproduces a real crash: version A compiles and caches the backward;
    version B (the backward op renamed, as an upgrade may do) must compile afresh instead of
    loading A's backward, which calls an op that B does not define."""
    pkg = tmp_path / "site"  # one path for both versions, as an upgrade in place
    shutil.copytree(Path(riskppo.__file__).parent, pkg / "riskppo")
    env = {**os.environ, "PYTHONPATH": str(pkg), "RISKPPO_CACHE": str(tmp_path / "native"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}  # fmt: skip
    env.pop("RISKPPO_NATIVE", None)
    script = tmp_path / "train.py"  # a file: inductor does not cache graphs of `python -c`
    script.write_text(_COMPILE_AND_BACKWARD)
    outs = []
    for version in ("a", "b"):
        if version == "b":
            kernel = pkg / "riskppo" / "nn" / "lstm_kernel.py"
            text = kernel.read_text()
            assert text.count("lstm_recurrence_grad") == 1
            kernel.write_text(text.replace("lstm_recurrence_grad", "lstm_recurrence_dgrad"))
        proc = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, f"version {version}: {proc.stderr[-2000:]}"
        outs.append(proc.stdout)
    assert outs[0] == outs[1]


_KERNEL_OUTPUTS = """
import hashlib
import torch
from riskppo.nn import native
from riskppo.nn.actor_step import CActorStep
from riskppo.nn.distributions import ActionHead
from riskppo.nn.lstm_kernel import masked_lstm_recurrence
from riskppo.nn.recurrent import LSTMState
from gymnasium import spaces

assert native.kernel() is not None, native.unavailable_reason()
torch.manual_seed(0)
digest = hashlib.sha256()
# widths 4H of 28, 80 and 256 and batches of 1 to 19 rows: every tile and every remainder path
for H, B in [(7, 3), (20, 5), (64, 16), (64, 19), (20, 1), (64, 12)]:
    x = torch.randn(6, 2, B, 4 * H, requires_grad=True)
    w = (0.3 * torch.randn(2, 4 * H, H)).requires_grad_()
    h0, c0 = torch.randn(2, B, H), torch.randn(2, B, H)
    keep = (torch.rand(6, B) > 0.2).float()
    hs, cs = masked_lstm_recurrence(x, w, h0, c0, keep)
    (hs.square().sum() + cs.sum()).backward()
    for t in (hs, cs, x.grad, w.grad):
        digest.update(t.detach().numpy().tobytes())
    mlp = torch.nn.Sequential(torch.nn.Linear(H, 48), torch.nn.Tanh())
    head = ActionHead(spaces.Discrete(3), 48)
    lstm = (torch.randn(5 + H, 4 * H), torch.randn(4 * H))
    step = CActorStep.build([lstm], mlp, head)
    state = LSTMState(torch.randn(1, B, H), torch.randn(1, B, H))
    starts = torch.zeros(B, dtype=torch.bool)
    for out in step(torch.randn(B, 5), state, starts, torch.Generator().manual_seed(1), False):
        for t in out if isinstance(out, tuple) else (out,):
            digest.update(t.numpy().tobytes())
print(digest.hexdigest())
"""


@needs_c_compiler()
def test_the_wide_tiles_give_the_narrow_tiles_results_bit_for_bit(tmp_path):
    """The matrix product's 512-bit tiles (built where the CPU has AVX-512) sum every element in
    the same order as its 256-bit tiles: the LSTM's forward and backward and the actor step give
    the same bits from a kernel built with ``-mno-avx512f``. (On a CPU without AVX-512 both
    builds take the 256-bit tiles and agree trivially.)"""
    outs = []
    for extra in ("", "-mno-avx512f"):
        env = {**os.environ, "RISKPPO_CACHE": str(tmp_path / f"cache{extra}"),
               "RISKPPO_NATIVE_CFLAGS": extra}  # fmt: skip
        env.pop("RISKPPO_NATIVE", None)
        proc = subprocess.run(
            [sys.executable, "-c", _KERNEL_OUTPUTS], env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
