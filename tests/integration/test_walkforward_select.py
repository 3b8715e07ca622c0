"""Walk-forward selection among configurations (``riskppo walkforward --candidates``): each
segment trades the candidate with the best Sharpe ratio on the last rows of its training span,
no test bar reaches the choice, the ledger counts the procedure once, a SIGKILLed run resumes to
the same choices and record, and bad input is one line."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.cli.main import load_config
from riskppo.envs.market.synthetic import gbm
from riskppo.runs.ledger import config_hash, read_ledger
from riskppo.walkforward.run import CELL_DONE
from riskppo.walkforward.select import new_selection, procedure_hash
from tests.small_run import SMALL_WALKFORWARD_SETS

SMALL = SMALL_WALKFORWARD_SETS
# two segments of 100 test rows; each compares its candidates on its last 100 training rows
SETTINGS = ["--initial", "700", "--step", "100", "--seeds", "0", "1", "--workers", "2"]
# b trains another budget (the test cells' "steps" say which config was retrained); it is named
# first, and on this market a wins each segment: a choice that fell back to the first candidate
# would show
B = ["total_timesteps=384", "ppo.learning_rate=3e-3"]
NAMES = ("b", "a")  # in --candidates order


def _market(path: Path, n: int = 900, seed: int = 3) -> Path:
    gbm(n, seed=seed).reset_index().to_csv(path, index=False)
    return path


def _candidate(path: Path, data: Path, *sets: str) -> Path:
    load_config(None, [*SMALL, f"data.path={data}", *sets]).to_yaml(path)
    return path


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "riskppo.cli", "walkforward", *args],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # SIGKILL of the group ends the coordinator and its workers
    )


@dataclass(frozen=True)
class Run:
    """A finished ``--candidates`` run: its directory, printed output, inputs and ledger."""

    dir: Path
    out: str
    data: Path
    files: tuple[Path, Path]
    ledger: Path

    def args(self, run_dir: Path, ledger: Path) -> list[str]:
        files = [str(f) for f in self.files]
        return ["--candidates", *files, *SETTINGS, "--run-dir", str(run_dir),
                "--ledger", str(ledger), "--no-progress"]  # fmt: skip

    def json(self, name: str) -> dict:  # type: ignore[type-arg]
        return json.loads((self.dir / name).read_text())


@pytest.fixture(scope="module")
def selected(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("select")
    data = _market(tmp / "m.csv")
    files = (_candidate(tmp / "b.yaml", data, *B), _candidate(tmp / "a.yaml", data))
    run = Run(tmp / "wf", "", data, files, tmp / "ledger")
    p = _cli(*run.args(run.dir, run.ledger))
    out, err = p.communicate(timeout=900)
    assert p.returncode == 0, out + err
    return Run(run.dir, out, data, files, run.ledger)


def _sharpe(record: Path, bars_per_year: float) -> float:
    """The metrics table's Sharpe ratio, recomputed: net simple returns, ddof 1, annualised;
    0 for a flat record."""
    simple = np.expm1(pd.read_csv(record, index_col=0)["agent_log_return"].to_numpy())
    sd = simple.std(ddof=1)
    return 0.0 if sd == 0 else float(simple.mean() / sd * math.sqrt(bars_per_year))


def test_each_segment_trades_the_candidate_with_the_best_validation_sharpe(selected: Run) -> None:
    segments = selected.json("walkforward.json")["segments"]
    metrics = selected.json("metrics.json")
    table = pd.read_csv(selected.dir / "segments.csv")
    budget = {"a": 256, "b": 384}
    chosen = []
    for seg in segments:
        k = seg["index"]
        scores = {}
        for i, name in enumerate(NAMES):
            per_seed = []
            for seed in (0, 1):
                cell = selected.dir / "select" / f"seg{k:02d}-s{seed}-c{i}"
                bpy = json.loads((cell / CELL_DONE).read_text())["bars_per_year"]
                per_seed.append(_sharpe(cell / "record.csv", bpy))
            scores[name] = float(np.mean(per_seed))
        choice = selected.json(f"select/seg{k:02d}.json")
        assert scores["a"] != pytest.approx(scores["b"], abs=1e-6)  # a choice to get wrong
        assert choice["sharpe"] == pytest.approx(scores, rel=1e-9, abs=1e-12)
        best = max(scores, key=lambda n: scores[n])
        assert choice["chosen"] == best, scores
        chosen.append(best)
        for seed in (0, 1):  # both seeds' test cells trained the chosen config, on all rows
            cell = json.loads(
                (selected.dir / "cells" / f"seg{k:02d}-s{seed}" / CELL_DONE).read_text()
            )
            assert cell["candidate"] == best and cell["steps"] == budget[best]
            assert cell["data_bars"][:2] == [seg["train_start"], seg["test_start"]]
        assert set(table.loc[table["segment"] == k, "candidate"]) == {best}
    block = metrics["selection"]
    assert [s["chosen"] for s in block["segments"]] == chosen
    assert block["chosen_count"] == {n: chosen.count(n) for n in NAMES}
    assert "chosen per segment: " + " ".join(chosen) in selected.out
    report = (selected.dir / "report.html").read_text()
    assert "Selection among configurations" in report


def test_no_test_bar_is_read_by_the_selection(selected: Run) -> None:
    """The validation rows of each segment end before its first test row: the selection
    cells' envs are built on rows before it, and their records (each bar indexed by the row its
    return ends at) end before it."""
    dates = pd.to_datetime(pd.read_csv(selected.data)["timestamp"])
    select_bars = selected.json("walkforward.json")["select"]["select_bars"]
    assert select_bars == 100  # the default: --step
    for seg in selected.json("walkforward.json")["segments"]:
        k, test_start = seg["index"], seg["test_start"]
        choice = selected.json(f"select/seg{k:02d}.json")
        assert choice["validation_rows"] == [test_start - select_bars, test_start]
        assert choice["inner_train_rows"] == [seg["train_start"], test_start - select_bars]
        test = pd.read_csv(selected.dir / "cells" / f"seg{k:02d}-s0" / "record.csv", index_col=0)
        assert pd.Timestamp(test.index[0]) == dates[test_start + 1]  # decided at test_start
        for seed in (0, 1):
            for i in (0, 1):
                cell = selected.dir / "select" / f"seg{k:02d}-s{seed}-c{i}"
                summary = json.loads((cell / CELL_DONE).read_text())
                assert summary["data_bars"][-1] <= test_start  # rows [start, end) of its env
                last = pd.Timestamp(pd.read_csv(cell / "record.csv", index_col=0).index[-1])
                assert int(np.flatnonzero(dates == last)[0]) < test_start


def test_the_ledger_records_the_procedure_once(selected: Run) -> None:
    rows = read_ledger(selected.ledger).rows
    metrics = selected.json("metrics.json")
    block = metrics["selection"]
    assert len(rows) == 1 and rows[0].config == block["procedure_hash"]
    assert rows[0].config not in {c["config_hash"] for c in block["candidates"]}
    assert metrics["n_trials"] == 1
    # the same candidates named in the other order are the same procedure
    protocol = {k: v for k, v in metrics["settings"].items() if k not in ("seeds", "workers")}
    first, second = (load_config(str(f), []) for f in selected.files)
    for order in ((first, second), (second, first)):
        sel = new_selection(["x.yaml", "y.yaml"], order, None, 100)
        assert procedure_hash(sel, protocol) == rows[0].config
    assert config_hash(first, "walkforward", protocol) == block["candidates"][0]["config_hash"]


def test_a_sigkilled_selection_resumes_to_the_same_choices_and_record(
    selected: Run, tmp_path: Path
) -> None:
    run, ledger = tmp_path / "killed", tmp_path / "ledger"
    killed = _cli(*selected.args(run, ledger))
    first = run / "select" / "seg00.json"  # segment 0 chosen, its test cells under way
    deadline = time.monotonic() + 600
    while not first.is_file() and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.1)
    assert first.is_file(), "segment 0 was never chosen"
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate()
    assert not (run / "metrics.json").exists()
    assert not all((run / "cells" / f"seg01-s{s}" / CELL_DONE).is_file() for s in (0, 1))

    resumed = _cli("--resume", str(run), "--ledger", str(ledger), "--no-progress")
    out, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, out + err
    for k in (0, 1):
        a = selected.json(f"select/seg{k:02d}.json")
        b = json.loads((run / "select" / f"seg{k:02d}.json").read_text())
        assert (a["chosen"], a["sharpe"]) == (b["chosen"], b["sharpe"])
    for name in ("s0.csv", "s1.csv", "mean.csv"):
        a = pd.read_csv(selected.dir / "records" / name, index_col=0)
        b = pd.read_csv(run / "records" / name, index_col=0)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert len(read_ledger(ledger).rows) == 1


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    data = _market(tmp / "m.csv")
    other = _market(tmp / "other.csv", seed=4)
    a = str(_candidate(tmp / "a.yaml", data))
    b = str(_candidate(tmp / "b.yaml", data, *B))
    o = str(_candidate(tmp / "o.yaml", other))
    fee = str(_candidate(tmp / "f.yaml", data, "env.kwargs.fee=0.01"))
    (tmp / "bad.yaml").write_text("seed: 1\nnot_a_key: 2\n")
    cut = ["--initial", "700", "--step", "100"]
    return [
        ([a, str(tmp / "missing.yaml")], f"--candidates: cannot read config file {tmp}/missing"),
        ([a, str(tmp / "bad.yaml")], f"--candidates: {tmp}/bad.yaml: invalid configuration"),
        ([a, b, "--config", a], "--candidates replaces --config"),
        ([a, "cartpole_masked"], "--candidates: cartpole_masked has env.id"),
        ([a, o], f"--candidates: {o} trades another file than {a}"),
        ([a, fee], f"--candidates: {fee} trades under other costs than {a}"),
        ([a, str(_candidate(tmp / "a2.yaml", data, "seed=5"))], "is the same configuration as"),
        ([a, b, *cut, "--select-bars", "400"], "--select-bars 400 leaves 300 rows to train on"),
        ([a, b, *cut, "--warm-start"], "--candidates with --warm-start"),
    ]  # fmt: skip


def test_bad_candidates_are_one_line_each(tmp_path: Path) -> None:
    for k, (args, expected) in enumerate(_bad_inputs(tmp_path)):
        run = tmp_path / f"run{k}"
        p = _cli("--candidates", *args, "--run-dir", str(run), "--no-ledger", "--no-progress")
        out, err = p.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert p.returncode == 2, (args, out, err)
        assert len(lines) == 1 and lines[0].startswith("riskppo: configuration error: "), err
        assert expected in lines[0], (expected, err)
        assert not (run / "cells").exists() and not (run / "select").exists()
