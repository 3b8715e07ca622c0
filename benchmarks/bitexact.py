"""Bit-exact fingerprints of short training runs: a refactoring's before/after check.

Trains a few representative configurations on the CPU with a fixed seed (the default quantile
critic, the categorical one, the CVaR constraint on a risk task, the shipped trading config with
its pathwise term, the compiled loss, SA-PPO with behaviour cloning, …) and prints, per
configuration, one SHA-256 over the final weights, the optimizer state, the serialised training
state (:mod:`riskppo.persist.codec`) and every logged scalar of every update; and the default
walk-forward record (``walkforward``: for it, "weights" is the digest of its per-seed records,
"state" of its segment table, "metrics" of its metrics.json without wall times and paths). Run
it on two commits: equal digests mean the change moved no bit of training or evaluation.

    python benchmarks/bitexact.py                      # every configuration, a table
    python benchmarks/bitexact.py --only cartpole cvar --json digests.json
    python benchmarks/bitexact.py --compare digests.json   # exit 1 on any difference

Each configuration runs in a fresh process (``--inline``: in this one), so one run's torch
thread count or compile cache cannot touch another's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import struct
import sys
import time
from pathlib import Path
from typing import Any

from _common import BenchError, BenchParser, run_main, run_worker, table

# name → (env id or None for the config's own, config file or dict or None, keywords, timesteps)
SMALL = dict(n_envs=4, n_steps=64, batch_size=64, bptt_len=16, n_epochs=2, lstm_hidden_size=16)
CASES: dict[str, tuple[str | None, str | dict[str, Any] | None, dict[str, Any], int]] = {
    "cartpole": ("CartPole-v1", None, dict(SMALL), 2048),
    "categorical": ("CartPole-v1", None, dict(SMALL, critic="categorical", n_atoms=21), 2048),
    "cvar-pid": (
        "riskppo/RiskyChoice-v0",
        None,
        dict(SMALL, cvar_limit=0.5, cvar_alpha=0.1, cvar_min_segments=4, lambda_update="pid"),
        3072,
    ),
    "cvar-dual-bc": (
        "CartPole-v1",
        None,
        dict(
            SMALL,
            cvar_limit=10.0,
            cvar_alpha=0.25,
            cvar_horizon=8,
            cvar_min_segments=2,
            bc_coef=0.1,
            clip_range_vf=0.2,
        ),
        1024,
    ),
    "trading-googl": (
        None,
        "configs/trading_googl.yaml",
        dict(n_envs=4, cvar_min_segments=8),
        4096,
    ),
    "trading-bc": (
        None,
        "configs/trading_googl.yaml",
        dict(n_envs=4, cvar_min_segments=8, bc_coef=0.1),
        2048,
    ),
    "sa-ppo": (
        "Pendulum-v1",
        {"adversarial": {"kappa": 0.1, "eps_warmup_updates": 1}},
        dict(SMALL, grad_accum_steps=2),
        768,
    ),
    "compiled-cvar-bc": (
        "CartPole-v1",
        None,
        dict(
            SMALL,
            compile=True,
            cvar_limit=10.0,
            cvar_alpha=0.25,
            cvar_horizon=8,
            cvar_min_segments=2,
            bc_coef=0.1,
        ),
        512,
    ),
    "compiled-trading": (
        None,
        "configs/trading_googl.yaml",
        dict(n_envs=4, cvar_min_segments=8, compile=True),
        1024,
    ),
    "portfolio-sp20": (
        None,
        "configs/portfolio_sp20.yaml",
        dict(n_envs=4, n_steps=64, batch_size=128, cvar_min_segments=8),
        1024,
    ),
}
"""The configurations, each a few seconds to a minute on one CPU thread."""
WALKFORWARD = "walkforward"
"""The default walk-forward record (``riskppo walkforward``: the trading config, its references
and the verdict) on a planted 900-bar market, two 100-bar test segments of tiny runs."""
_WF_SETS = (
    "env.n_envs=2",
    "ppo.n_steps=64",
    "ppo.batch_size=64",
    "total_timesteps=256",
    "env.kwargs.episode_length=100",
)
# Keys of metrics.json that name the run, not what it computed (wall times, paths, dates).
_WF_VOLATILE = ("time", "wall", "seconds", "path", "dir", "created", "host", "version", "python")


def _digest_tensor(h: Any, name: str, t: Any) -> None:
    import torch

    t = t.detach().cpu().contiguous()
    h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
    if t.dtype == torch.bfloat16:
        t = t.float()
    h.update(t.numpy().tobytes())


def _digest_json(h: Any, tree: Any) -> None:
    h.update(json.dumps(tree, sort_keys=True, default=repr).encode())


def _float_bits(x: float) -> str:
    return struct.pack("<d", float(x)).hex() if math.isfinite(x) else repr(x)


def _stable(tree: Any) -> Any:
    """``tree`` without the keys of :data:`_WF_VOLATILE` (at any depth)."""
    if isinstance(tree, dict):
        return {
            k: _stable(v)
            for k, v in tree.items()
            if not any(word in str(k).lower() for word in _WF_VOLATILE)
        }
    if isinstance(tree, list):
        return [_stable(v) for v in tree]
    return tree


def run_walkforward() -> dict[str, Any]:
    """``riskppo walkforward`` with the default config on a planted market (in a child process,
    one worker); digests of its records, its segment table and its metrics."""
    import os
    import subprocess
    import tempfile

    from riskppo.envs.market.synthetic import gbm

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "market.csv"
        gbm(900, seed=3).reset_index().to_csv(data, index=False)
        sets = [a for s in (*_WF_SETS, f"data.path={data}") for a in ("--set", s)]
        cmd = [sys.executable, "-m", "riskppo.cli", "walkforward", "--initial", "700"]
        cmd += ["--step", "100", "--seeds", "0", "--workers", "1", "--no-progress"]
        cmd += ["--run-dir", f"{tmp}/run", *sets]
        t0 = time.perf_counter()
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"riskppo walkforward failed:\n{proc.stdout[-3000:]}")
        run = Path(tmp) / "run"
        h_r, h_s, h_m = (hashlib.sha256() for _ in range(3))
        records = sorted((run / "records").glob("*.csv"))
        for path in records:
            h_r.update(path.name.encode() + path.read_bytes())
        h_s.update((run / "segments.csv").read_bytes())
        _digest_json(h_m, _stable(json.loads((run / "metrics.json").read_text())))
    return {
        "name": WALKFORWARD,
        "weights": h_r.hexdigest(),
        "metrics": h_m.hexdigest(),
        "metric_values": h_m.hexdigest(),
        "state": h_s.hexdigest(),
        "optimizer": h_r.hexdigest(),
        "n_updates": len(records),
        "n_scalars": 0,
        "last_loss": None,
        "seconds": round(seconds, 1),
    }


def run_case(name: str) -> dict[str, Any]:
    """Train configuration ``name``; its digests and a few of its numbers."""
    import torch

    from riskppo import DistributionalPPO
    from riskppo.persist.codec import encode

    if name == WALKFORWARD:
        return run_walkforward()
    if name not in CASES:
        raise BenchError(f"unknown configuration {name!r}; choose from {sorted(CASES)}")
    env, config, kw, steps = CASES[name]
    kw = dict(kw, seed=0, num_threads=1, device="cpu", verbose=0)
    if env is not None:
        model = DistributionalPPO(env, config=config, **kw)
    else:
        model = DistributionalPPO(config=config, **kw)
    metrics: list[list[tuple[str, str]]] = []

    def record(_model: Any, log: Any) -> bool:
        row = [(k, _float_bits(v)) for k, v in log.scalars() if not k.startswith("time/fps")]
        metrics.append(row)
        return True

    t0 = time.perf_counter()
    model.learn(steps, callback=record)
    seconds = time.perf_counter() - t0
    h_w, h_m, h_s, h_o, h_k = (hashlib.sha256() for _ in range(5))
    for k, v in model.policy.state_dict().items():
        _digest_tensor(h_w, k, v)
    _digest_json(h_m, metrics)
    _digest_json(h_k, [sorted(row) for row in metrics])  # the values, whatever the key order
    tree, tensors = encode(model.state.replace(carry=None), "training")
    _digest_json(h_s, tree)
    for k in sorted(tensors):
        _digest_tensor(h_s, k, tensors[k])
    opt = model.optimizer.state_dict()
    for i, st in sorted(opt["state"].items()):
        for k, v in sorted(st.items()):
            if isinstance(v, torch.Tensor):
                _digest_tensor(h_o, f"{i}/{k}", v)
            else:
                h_o.update(f"{i}/{k}={v!r}".encode())
    last = dict(metrics[-1]) if metrics else {}
    loss = last.get("train/loss")
    model.close()
    return {
        "name": name,
        "weights": h_w.hexdigest(),
        "metrics": h_m.hexdigest(),
        "metric_values": h_k.hexdigest(),
        "state": h_s.hexdigest(),
        "optimizer": h_o.hexdigest(),
        "n_updates": len(metrics),
        "n_scalars": sum(len(r) for r in metrics),
        "last_loss": struct.unpack("<d", bytes.fromhex(loss))[0] if loss else None,
        "seconds": round(seconds, 1),
    }


def main() -> None:
    p = BenchParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="+", metavar="NAME", help=f"of {[*CASES, WALKFORWARD]}")
    p.add_argument("--skip", nargs="+", metavar="NAME", default=[])
    p.add_argument("--json", type=Path, help="write the digests to this file")
    p.add_argument("--compare", type=Path, help="compare with a --json file; exit 1 on a change")
    p.add_argument("--inline", action="store_true", help="run every case in this process")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(run_case(a.worker)))
        return
    names = [n for n in (a.only or [*CASES, WALKFORWARD]) if n not in a.skip]
    for n in names:
        if n not in CASES and n != WALKFORWARD:
            raise BenchError(f"unknown configuration {n!r}; choose from {sorted(CASES)}")
    results = []
    for n in names:
        r = run_case(n) if a.inline else run_worker(__file__, [n])
        results.append(r)
        print(f"{n}: {r['weights'][:16]} {r['metrics'][:16]} ({r['seconds']} s)", file=sys.stderr)
    keys = ("weights", "metrics", "metric_values", "state", "optimizer")
    rows = [[r["name"], *(r[k][:16] for k in keys), r["n_updates"], r["seconds"]] for r in results]
    print(table(rows, ["config", *keys, "updates", "s"]))
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")
    if a.compare:
        want = {r["name"]: r for r in json.loads(a.compare.read_text())}
        changed = [
            f"{r['name']}: {k}"
            for r in results
            if r["name"] in want
            for k in (*keys, "n_updates", "n_scalars")
            if r[k] != want[r["name"]][k]
        ]
        missing = [n for n in names if n not in want]
        print("identical" if not changed else "CHANGED: " + ", ".join(changed))
        if missing:
            print("not in the reference: " + ", ".join(missing))
        if changed:
            raise SystemExit(1)


if __name__ == "__main__":
    sys.exit(run_main(main))
