"""Shared helpers for the benchmark scripts: their argument parser and error reporting, run a
worker in a fresh process, print tables."""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from riskppo.cli.errors import user_error
from riskppo.config import ConfigError


class BenchError(Exception):
    """A bad argument or input of a benchmark script: reported as one line, no traceback."""


class BenchParser(argparse.ArgumentParser):
    """A benchmark's argument parser: a usage error is one line naming the argument (``--help``
    prints the whole usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer ≥ ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer ≥ {low}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def run_main(main: Callable[[], object]) -> int:
    """Run a script's ``main``; exit status 0, or 2 with one line on stderr for the user's error
    (a bad argument, config, data file or path: the rules of ``riskppo``'s own command line,
    :mod:`riskppo.cli.errors`). Anything else is a bug and keeps its traceback."""
    prog = Path(sys.argv[0]).name
    try:
        main()
    except BenchError as exc:
        line = str(exc)
    except ConfigError as exc:
        line = f"configuration error: {exc}"
    except Exception as exc:
        message = user_error(exc)
        if message is None:
            raise
        line = message.removeprefix("riskppo: ")
    else:
        return 0
    print(f"{prog}: {line}", file=sys.stderr)
    return 2


def peak_rss_mb() -> float:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_worker(script: str, args: list[str], timeout: float = 3600) -> dict[str, Any]:
    """Run ``python script --worker ...`` in a fresh process; it prints one JSON line last."""
    proc = subprocess.run(
        [sys.executable, script, "--worker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode == 2 and proc.stderr.strip():  # the worker's one line on a user error
        raise BenchError(proc.stderr.strip().splitlines()[-1].split(": ", 1)[-1])
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def machine() -> str:
    import os

    import torch

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        "torch threads per worker as set by each benchmark's --threads"
    )


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([line, sep, *body])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a ``.jsonl`` file (a run's ``metrics.jsonl``), one per line."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mean_std_cell(stat: dict[str, Any], fmt: str = ".3f", *, with_std: bool = True) -> str:
    """``"m ± s"`` from an ``aggregate_metrics`` entry (``"—"`` if undefined; ``m`` alone if
    ``with_std`` is off or there is no std)."""
    if stat["mean"] is None:
        return "—"
    if not with_std or stat["std"] is None:
        return format(stat["mean"], fmt)
    return f"{stat['mean']:{fmt}} ± {stat['std']:{fmt}}"


def time_env(env: Any, actions: list[Any], repeats: int) -> float:
    """Best-of-``repeats`` steps/s of ``env.step`` over ``len(actions)`` pre-sampled actions
    (``reset`` whenever an episode ends; sampling is not timed)."""
    best = 0.0
    for r in range(repeats):
        env.reset(seed=r)
        step, reset = env.step, env.reset
        t0 = time.perf_counter()
        for a in actions:
            _, _, terminated, truncated, _ = step(a)
            if terminated or truncated:
                reset()
        best = max(best, len(actions) / (time.perf_counter() - t0))
    return best
