"""Five configurations tried one after another on one no-edge file through the command line,
with one trial ledger: what each run's verdict says about N, and the best one's verdict read
again at the end.

The file is a seeded GARCH(1, 1)-t random walk (``riskppo.envs.market.planted.ar_market`` with
``phi = 0``; ``--bars`` daily bars at ``--drift``), written as a user's CSV. Each configuration
is a ``riskppo train`` of the shipped GOOGL configuration on it with a small budget
(``--steps``) and one change (a learning rate, an entropy bonus, a shorter feature list), run
as a subprocess with ``--ledger DIR``; the script prints the lines of its verdict (the verdict,
the Sharpe ratios, ``trials: N = k configurations judged on this data``, PBO, the SPA, the
deflated Sharpe ratio). Then the user picks the run with the best test Sharpe ratio and reads
its verdict again with ``riskppo backtest RUN --ledger DIR`` (no new row; N = 5). Measured
output: docs/results.md, "Trying configurations until one beats the benchmark".

    python benchmarks/trials_cli_sequence.py --steps 20000
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BenchParser, int_at_least, run_main

CONFIGURATIONS: list[tuple[str, list[str]]] = [
    ("default", []),
    ("learning rate 1e-4", ["ppo.learning_rate=1e-4"]),
    ("learning rate 1e-3", ["ppo.learning_rate=1e-3"]),
    ("entropy bonus 0.02", ["ppo.ent_coef=0.02"]),
    ("three features", ["env.kwargs.features=[vret_1,vret_5,vret_20]"]),
]
SHOWN = ("verdict", "  Sharpe ratio", "  trials:", "  PBO:", "  SPA", "  StepM", "  deflated")


def verdict_lines(output: str, *, listing: bool = False) -> list[str]:
    """The verdict's lines of a command's output (``listing``: with the ledger's
    configurations under the ``trials:`` line)."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("verdict")), None)
    if start is None:
        return []
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        block.append(line)
    return [line for line in block if line.startswith(SHOWN) or (listing and line[:4] == " " * 4)]


def run(cmd: list[str], cwd: Path) -> str:
    """Run ``cmd`` (output to a pipe: no progress bar), its stdout and stderr together;
    ``RuntimeError`` with its tail if it fails."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    return out


TEST_KEYS = {"ledoit-wolf-bootstrap": "bootstrap", "ledoit-wolf-hac": "hac"}


def judged(run_dir: Path, backtest: str = "backtest_test") -> tuple[float, float]:
    """The agent's test-split Sharpe ratio and the verdict test's one-sided p before the
    adjustment for N, from the run's ``statistics.json``."""
    block = json.loads((run_dir / backtest / "statistics.json").read_text())
    test = block["stats"]["vs_benchmark"][TEST_KEYS[block["test_method"]]]
    return float(block["stats"]["agent"]["sharpe"]["estimate"]), float(test["p_one_sided"])


def main() -> None:
    parser = BenchParser(
        prog="trials_cli_sequence.py",
        description="Five riskppo train runs on one no-edge CSV with one trial ledger: the "
        "verdict lines each prints, then the best one's verdict read again.",
    )
    parser.add_argument(
        "--bars", type=int_at_least(500), default=1250, help="daily bars (default 1250)"
    )
    parser.add_argument(
        "--drift", type=float, default=0.0, help="annual log drift of the file (default 0)"
    )
    parser.add_argument("--seed", type=int_at_least(0), default=7, help="market seed (default 7)")
    parser.add_argument(
        "--steps",
        type=int_at_least(1024),
        default=20000,
        help="total_timesteps of each run (default 20000)",
    )
    parser.add_argument(
        "--threads", type=int_at_least(1), default=1, help="num_threads of each run (default 1)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="keep the file, runs and ledger here (a new folder)"
    )
    args = parser.parse_args()

    from riskppo.envs.market.planted import ar_market

    with tempfile.TemporaryDirectory(prefix="trials_cli_") as tmp:
        folder = Path(tmp) if args.out is None else args.out
        folder.mkdir(parents=True, exist_ok=True)
        csv, ledger = folder / "no_edge.csv", folder / "ledger"
        df, _ = ar_market(args.bars, phi=0.0, drift=args.drift, seed=args.seed)
        df.to_csv(csv)
        print(
            f"data: {csv.name}, a GARCH(1,1)-t random walk, {args.bars} daily bars, annual log "
            f"drift {args.drift:+.0%}, seed {args.seed} (riskppo.envs.market.planted.ar_market)"
        )
        riskppo = [sys.executable, "-m", "riskppo.cli"]
        common = [
            f"data.path={csv}",
            "data.dataset=null",
            f"total_timesteps={args.steps}",
            f"num_threads={args.threads}",
        ]
        t0 = time.perf_counter()
        sharpes: dict[Path, float] = {}
        for k, (label, sets) in enumerate(CONFIGURATIONS, start=1):
            run_dir = folder / f"run{k}"
            cmd = [*riskppo, "train", "--run-dir", str(run_dir), "--ledger", str(ledger)]
            for item in (*common, *sets):
                cmd += ["--set", item]
            out = run(cmd, folder)
            sharpes[run_dir], p_raw = judged(run_dir)
            shown = " ".join(f"--set {s}" for s in sets) or "(no change)"
            print(f"\n[{k}/{len(CONFIGURATIONS)}] {label}: riskppo train ... {shown}")
            print("\n".join(verdict_lines(out, listing=k == len(CONFIGURATIONS))))
            print(f"  (statistics.json: one-sided p before the adjustment for N: {p_raw:.2g})")
        best = max(sharpes, key=lambda d: sharpes[d])
        cmd = [*riskppo, "backtest", str(best), "--split", "test", "--ledger", str(ledger)]
        out = run(cmd, folder)
        print(
            f"\nthe best test Sharpe ratio: {best.name}; riskppo backtest {best.name} --ledger ..."
        )
        print("\n".join(verdict_lines(out)))
        print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    raise SystemExit(run_main(main))
