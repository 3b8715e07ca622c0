"""``riskppo paper``: a feed that grows in chunks over several calls gives the state and order log
of a loop that read it at once, each call's check agrees with the backtest, a SIGKILL between
calls or inside the commit (real processes, killed with -9 at a hook inside the write) loses
and duplicates nothing, and a feed that rewrites history or skips bars changes nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from riskppo.live.inputs import LiveInputError
from riskppo.live.paper import paper_step
from riskppo.live.paper_state import PAUSE_ENV
from tests.live_runs import price_frame, train, write_bars

FIRST = 1800  # bars of history at the first call; then chunks of these sizes
CHUNKS = (3, 1, 12)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train("googl", tmp_path_factory.mktemp("paper-run"))


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    """A fresh copy of the trained run (no paper state)."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _sizes() -> list[int]:
    sizes = [FIRST]
    for c in CHUNKS:
        sizes.append(sizes[-1] + c)
    return sizes


def _files(run: Path) -> tuple[bytes, dict]:
    state = json.loads((run / "paper" / "state.json").read_text())
    state.pop("data")
    return (run / "paper" / "orders.csv").read_bytes(), state


def _cli(run: Path, feed: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "riskppo.cli", "paper", str(run), "--data", str(feed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def test_chunks_give_the_state_of_one_read_and_the_checks_agree(run: Path, tmp_path: Path) -> None:
    bars = price_frame("googl")
    feed = tmp_path / "feed.csv"
    for n in _sizes():
        report = paper_step(run, write_bars(bars.iloc[:n], feed))
        assert report.ok, report.check
        assert report.check.startswith("check: a backtest over the same bars")
    chunked = _files(run)
    rows = chunked[0].decode().splitlines()
    assert rows[0] == "time,asset,from,to,reason" and rows[1].endswith(",start")
    assert len(rows) > 1 + len(CHUNKS)  # the agent reorders (its sizing moves every bar)
    again = paper_step(run, feed)  # no new bars: nothing changes
    assert again.new_bars == 0 and again.ok and _files(run) == chunked

    once = Path(shutil.copytree(run, tmp_path / "once"))
    shutil.rmtree(once / "paper")
    paper_step(once, write_bars(bars.iloc[:FIRST], feed))
    paper_step(once, write_bars(bars.iloc[: _sizes()[-1]], feed))
    assert _files(once) == chunked


def _killed_at(point: str, run: Path, feed: Path, tmp_path: Path) -> None:
    """Start a call that sleeps at ``point`` inside its commit and SIGKILL it there."""
    marker = tmp_path / f"at-{point}"
    proc = _cli(run, feed, **{PAUSE_ENV: f"{point}:{marker}"})
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_sigkill_between_calls_and_inside_the_commit_loses_nothing(
    run: Path, tmp_path: Path
) -> None:
    bars = price_frame("googl")
    sizes = _sizes()
    reference = Path(shutil.copytree(run, tmp_path / "reference"))
    feed = tmp_path / "feed.csv"
    for n in sizes:  # the uninterrupted loop
        paper_step(reference, write_bars(bars.iloc[:n], feed))

    write_bars(bars.iloc[: sizes[0]], feed)
    assert _finish(_cli(run, feed))[0] == 0
    committed = json.loads((run / "paper" / "state.json").read_text())["orders_bytes"]
    write_bars(bars.iloc[: sizes[1]], feed)
    _killed_at("orders", run, feed, tmp_path)  # rows appended, state not yet written
    assert (run / "paper" / "orders.csv").stat().st_size > committed  # uncommitted rows
    code, out, err = _finish(_cli(run, feed))
    assert code == 0 and ": OK" in out, err
    state_before = (run / "paper" / "state.json").read_bytes()
    write_bars(bars.iloc[: sizes[2]], feed)
    _killed_at("state", run, feed, tmp_path)  # the new state in its temporary file
    assert list((run / "paper").glob(".state.json.tmp-*"))
    assert (run / "paper" / "state.json").read_bytes() == state_before
    for n in sizes[2:]:
        write_bars(bars.iloc[:n], feed)
        code, out, err = _finish(_cli(run, feed))
        assert code == 0 and ": OK" in out, err
    assert not list((run / "paper").glob(".state.json.tmp-*"))
    assert _files(run) == _files(reference)


def test_rewritten_history_or_skipped_bars_change_nothing(run: Path, tmp_path: Path) -> None:
    bars = price_frame("googl")
    feed = tmp_path / "feed.csv"
    paper_step(run, write_bars(bars.iloc[:FIRST], feed))
    before = _files(run)
    later = bars.iloc[: FIRST + 5]
    changed = later.copy()
    bar = changed.index[FIRST - 10]  # a consumed bar's close, still inside its high-low range
    changed.loc[bar, "close"] = (changed.loc[bar, "high"] + changed.loc[bar, "low"]) / 2
    skipped = later.drop(later.index[FIRST - 3])
    cases = {
        "history rewritten": changed,
        "removed or inserted": skipped,
        "went back in time": bars.iloc[: FIRST - 4],
    }
    for words, frame in cases.items():
        with pytest.raises(LiveInputError, match=words):
            paper_step(run, write_bars(frame, feed))
        assert _files(run) == before, words
    write_bars(changed, feed)  # the command line says it in one line, exit 2
    code, _, err = _finish(_cli(run, feed))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert "history rewritten; nothing was changed" in lines[0]
    assert _files(run) == before
    report = paper_step(run, write_bars(later, feed))  # the true feed goes on
    assert report.ok and report.new_bars == 5
    assert pd.Timestamp(report.state.last_bar) == later.index[-1]


def test_a_portfolio_run_orders_per_asset_and_agrees_with_its_backtest(tmp_path: Path) -> None:
    run = train("portfolio", tmp_path / "portfolio")
    bars, feed = price_frame("portfolio"), tmp_path / "feed.csv"
    for n in (1600, 1601, 1605):
        report = paper_step(run, write_bars(bars.iloc[:n], feed))
        assert report.ok, report.check
    rows = (run / "paper" / "orders.csv").read_text().splitlines()[1:]
    assert {r.split(",")[1] for r in rows} == {"AAPL", "KO", "XOM"}
    weights = report.state.weights
    assert weights is not None and sum(weights) == pytest.approx(report.state.exposure)
