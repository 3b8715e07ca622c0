"""A benchmark script given a bad argument says so in one line and exits 2, no traceback: every
script ``riskppo bench`` lists, with an unknown option, and the bad values of each that once
ended in a traceback. One interpreter runs them all as ``__main__`` (the imports are paid once);
one real ``riskppo bench`` process checks the whole path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from riskppo.cli.bench import benchmarks_dir

BENCH = benchmarks_dir()
pytestmark = pytest.mark.skipif(BENCH is None, reason="no benchmarks/ folder (an installed wheel)")

RUNNER = """
import contextlib, io, json, runpy, sys
bench, cases = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, bench)
results = []
for name, args in cases:
    sys.argv = [f"{bench}/{name}.py", *args]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # what a traceback would have shown
            code, err = "raised", io.StringIO(f"Traceback: {type(exc).__name__}: {exc}")
    results.append({"name": name, "args": args, "code": code, "err": err.getvalue()})
print(json.dumps(results))
"""

# (script, arguments, what the one line must say)
BAD_VALUES = [
    ("env_speed", ["--steps", "-5"], "argument --steps: expected an integer ≥ 1, got -5"),
    ("env_speed", ["--repeats", "0"], "argument --repeats: expected an integer ≥ 1, got 0"),
    ("portfolio_env_speed", ["--steps", "0"], "argument --steps: expected an integer ≥ 1"),
    ("vec_env_speed", ["--config", "nope"], "configuration error: cannot read config file nope"),
    ("vec_env_speed", ["--n-envs", "0"], "argument --n-envs: expected an integer ≥ 1, got 0"),
    ("stats_calibration", ["--pairs", "0"], "argument --pairs: expected an integer ≥ 2, got 0"),
    ("stats_calibration", ["--bars", "5"], "argument --bars: expected an integer ≥ 8, got 5"),
    ("stats_calibration", ["--resamples", "9"], "argument --resamples: expected an integer ≥ 100"),
    ("stats_calibration", ["--rho", "1"], "argument --rho: expected a correlation in (-1, 1)"),
    ("es_backtest_size", ["--records", "5"], "argument --records: expected an integer ≥ 10, got 5"),
    ("lstm_kernel", ["--hidden", "0"], "argument --hidden: expected an integer ≥ 1, got 0"),
    ("soak", ["--steps", "x"], "argument --steps: expected an integer, got 'x'"),
    ("trading_rollout", ["--rounds", "0"], "argument --rounds: expected an integer ≥ 1"),
    ("update_phases", ["--rounds", "-1"], "argument --rounds: expected an integer ≥ 1"),
    ("throughput", ["--n-envs", "0"], "argument --n-envs: expected an integer ≥ 1, got 0"),
    ("sample_efficiency", ["--seeds", "0"], "argument --seeds: expected an integer ≥ 1, got 0"),
    ("sample_efficiency", ["--algos", "nope"], "argument --algos: unknown trainer 'nope'"),
    ("sample_efficiency", ["--budget", "10"], "--budget 10 is below --eval-every 10240"),
    ("throughput", ["--algos", "nope"], "argument --algos: invalid choice: 'nope'"),
    ("plasticity", ["--phases", "0"], "argument --phases: expected an integer ≥ 1, got 0"),
    ("robustness", ["--jobs", "0"], "argument --jobs: expected an integer ≥ 1, got 0"),
    ("risk_lambda", ["--seeds", "-1"], "argument --seeds: expected an integer ≥ 0, got -1"),
    ("bc_warmstart", ["--steps", "0"], "argument --steps: expected an integer ≥ 1, got 0"),
    ("pbt_trading", ["--set", "ppo.learnig_rate=1"], "did you mean ppo.learning_rate?"),
    ("trading_results", ["--configs", "nope"], "cannot read config file nope: no such file, nor a"),
    ("walk_forward", ["--limit", "-0.04", "--candidate", "a=1"], "--candidate: each needs a"),
    ("portfolio_overlay_check", ["--before", "soon"], "expected a date such as 2018-01-01"),
    ("portfolio_overlay_check", ["--bars", "999999"], "--bars 999999: only "),
    ("learnability", ["--markets", "ar2"], "argument --markets: expected arPHI"),
    ("learnability", ["--workers", "0"], "argument --workers: expected an integer ≥ 1, got 0"),
    ("walkforward_compare", ["nolabel"], "'nolabel': expected LABEL=RUN_DIR"),
    ("walkforward_compare", ["a=/nonexistent"], "/nonexistent/metrics.json: No such file"),
]


def run_all(cases: list[tuple[str, list[str]]]) -> list[dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(BENCH), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def one_line(result: dict[str, object]) -> str:
    """The single line a script printed on a user error (the test fails on anything else)."""
    err = str(result["err"])
    assert "Traceback" not in err, result
    assert result["code"] == 2, result
    lines = err.strip().splitlines()
    assert len(lines) == 1, result
    return lines[0]


def test_every_benchmark_refuses_an_unknown_option_in_one_line() -> None:
    assert BENCH is not None
    names = sorted(p.stem for p in BENCH.glob("*.py") if not p.stem.startswith("_"))
    for result in run_all([(name, ["--no-such-option"]) for name in names]):
        line = one_line(result)
        prog = f"{result['name']}.py"
        assert line.startswith(f"{prog}: error: "), line  # unrecognized, or a required one missing
        assert line.endswith(f"({prog} --help lists the options)"), line


def test_bad_values_are_one_line_naming_the_argument() -> None:
    results = run_all([(name, args) for name, args, _ in BAD_VALUES])
    for result, (name, args, says) in zip(results, BAD_VALUES):
        line = one_line(result)
        assert line.startswith(f"{name}.py: "), line
        assert says in line, (name, args, line)


def test_riskppo_bench_passes_the_one_line_on(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "riskppo.cli", "bench", "env_speed", "--steps", "-5"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "env_speed.py: error: argument --steps: expected an integer ≥ 1, got -5 "
        "(env_speed.py --help lists the options)"
    ]
