"""The trial ledger: what counts as a configuration, which rows count on a record's data and span,
and appends that concurrent and killed processes cannot corrupt."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.config import Config, apply_overrides
from riskppo.runs.ledger import (
    DEFAULT_LEDGER,
    LEDGER_ENV,
    ROWS_FILE,
    Judged,
    LedgerError,
    _append_line,
    config_hash,
    data_fingerprint,
    ledger_path,
    read_ledger,
    record_trial,
)
from riskppo.stats import sharpe

BASE = Config.build({"env": {"id": "riskppo/Trading-v0"}, "data": {"dataset": "googl"}})


def _returns(seed: int, n: int = 400, start: str = "2020-01-01", edge: float = 0.0) -> pd.Series:
    r = np.random.default_rng(seed).standard_normal(n) * 0.01 + edge
    return pd.Series(r, index=pd.bdate_range(start, periods=n))


def _judged(config: str, seed: int, data: str = "sha256:aa", **kw: object) -> Judged:
    returns = kw.pop("returns", None)
    return Judged(
        data=data,
        data_label="prices.csv",
        config=config,
        kind="train",
        returns=returns if isinstance(returns, pd.Series) else _returns(seed),
        periods_per_year=252.0,
        run_dir=f"runs/{config}-s{seed}",
    )


def test_seeds_and_run_only_keys_are_one_configuration_a_learning_rate_is_another():
    h = config_hash(BASE, "train")
    same = apply_overrides(BASE, ["seed=7", "device=cpu", "checkpoint.keep_last=9"])
    assert config_hash(same, "train") == h
    assert config_hash(apply_overrides(BASE, ["monitor.verbose=1"]), "train") == h
    assert config_hash(apply_overrides(BASE, ["ppo.learning_rate=1e-4"]), "train") != h
    assert config_hash(apply_overrides(BASE, ["total_timesteps=5000"]), "train") != h
    assert config_hash(BASE, "walkforward", {"step": 126}) != h
    assert config_hash(BASE, "walkforward", {"step": 126}) != config_hash(
        BASE, "walkforward", {"step": 63}
    )


def test_data_fingerprint_is_the_file_bytes_not_its_path(tmp_path):
    a, b, c = tmp_path / "a.csv", tmp_path / "copy.csv", tmp_path / "other.csv"
    a.write_text("date,close\n2020-01-01,1\n")
    b.write_bytes(a.read_bytes())
    c.write_text("date,close\n2020-01-01,2\n")
    fp = [data_fingerprint(apply_overrides(BASE, [f"data.path={p}"])) for p in (a, b, c)]
    assert fp[0] == fp[1] != fp[2]
    bundled = data_fingerprint(BASE)
    assert bundled.startswith("googl:sha256:") and len(bundled) == len("googl:sha256:") + 64


def test_a_repeat_of_one_configuration_is_counted_once(tmp_path):
    record_trial(tmp_path, _judged("cfgA", 0))
    t = record_trial(tmp_path, _judged("cfgA", 1))  # another seed of the same configuration
    assert t.n_configs == 1 and t.configs[0].rows == 2
    assert t.sharpe_var is None
    again = record_trial(tmp_path, _judged("cfgA", 1))  # the same run judged again
    assert again.n_configs == 1 and again.configs[0].rows == 2
    assert len(read_ledger(tmp_path).rows) == 2


def test_configurations_on_the_data_are_counted_with_their_sharpe_variance(tmp_path):
    for i, cfg in enumerate(("cfgA", "cfgB", "cfgC")):
        t = record_trial(tmp_path, _judged(cfg, i))
    assert t.n_configs == 3
    sharpes = [sharpe(_returns(i).to_numpy(), 252.0) for i in range(3)]
    assert t.sharpe_var == pytest.approx(np.var(sharpes, ddof=1), rel=1e-12)


def test_another_data_file_or_a_disjoint_span_is_not_counted(tmp_path):
    record_trial(tmp_path, _judged("cfgA", 0))
    record_trial(tmp_path, _judged("cfgB", 1, data="sha256:bb"))  # another file
    later = _returns(2, start="2030-01-01")
    record_trial(tmp_path, _judged("cfgC", 2, returns=later))  # no bar in common
    t = record_trial(tmp_path, _judged("cfgD", 3))
    assert [c.config for c in t.configs] == ["cfgA", "cfgD"]
    overlapping = _returns(4, start="2021-01-01")  # shares its first bars with the others
    t = record_trial(tmp_path, _judged("cfgE", 4, returns=overlapping))
    assert [c.config for c in t.configs] == ["cfgA", "cfgD", "cfgE"]


def test_pbo_over_configurations_on_the_same_bars(tmp_path):
    assert record_trial(tmp_path, _judged("cfgA", 0)).pbo is None  # one configuration
    t = record_trial(tmp_path, _judged("cfgB", 1))
    assert t.pbo is not None and t.pbo.n_configs == 2 and t.pbo.n_bars == 400
    assert t.pbo.n_blocks == 16  # 400 bars: 16 blocks of 25 bars
    shorter = _returns(2, n=399)  # other bars: counted for N, left out of PBO
    t = record_trial(tmp_path, _judged("cfgC", 2, returns=shorter))
    assert t.n_configs == 3 and t.pbo is None


def test_a_torn_line_is_skipped_with_a_warning_and_the_next_row_survives(tmp_path):
    record_trial(tmp_path, _judged("cfgA", 0))
    rows = tmp_path / ROWS_FILE
    whole = rows.read_text().strip()
    with open(rows, "a") as f:  # a writer killed half-way through its row
        f.write(whole[: len(whole) // 2])
    with pytest.warns(UserWarning, match="skipped 1 line"):
        t = record_trial(tmp_path, _judged("cfgB", 1))
    assert t.n_configs == 2 and t.skipped == 1
    with pytest.warns(UserWarning, match="line 2"):
        read = read_ledger(tmp_path)
    assert [r.config for r in read.rows] == ["cfgA", "cfgB"]


def test_ledger_path_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    assert ledger_path(None) == DEFAULT_LEDGER
    assert ledger_path(str(tmp_path)) == tmp_path
    assert ledger_path(str(tmp_path), enabled=False) is None
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "x"))
    assert ledger_path(None) == tmp_path / "x"
    monkeypatch.setenv(LEDGER_ENV, "off")
    assert ledger_path(None) is None


def test_a_ledger_path_that_is_a_file_is_one_clear_error(tmp_path):
    path = tmp_path / "ledger"
    path.write_text("")
    with pytest.raises(LedgerError, match="is not a directory; pass --ledger DIR"):
        record_trial(path, _judged("cfgA", 0))


_WRITER = textwrap.dedent(
    """
    import sys, numpy as np, pandas as pd
    from pathlib import Path
    from riskppo.runs.ledger import Judged, record_trial
    ledger, who, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    idx = pd.bdate_range("2020-01-01", periods=300)
    for i in range(n):
        r = pd.Series(np.random.default_rng(i).standard_normal(300) * 0.01, index=idx)
        record_trial(ledger, Judged("sha256:aa", "f", f"{who}-{i % 3}", "train", r, 252.0,
                                    f"runs/{who}-{i}"))
        print(i, flush=True)
    """
)


def _writer(ledger: Path, who: str, n: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", _WRITER, str(ledger), who, str(n)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_writers_never_interleave_rows(tmp_path):
    procs = [_writer(tmp_path, f"w{k}", 25) for k in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    read = read_ledger(tmp_path)
    assert read.skipped == 0 and len(read.rows) == 100
    assert len({r.id for r in read.rows}) == 100
    lines = (tmp_path / ROWS_FILE).read_text().splitlines()
    assert len(lines) == 100  # no blank line: no row taken for torn while being written
    assert all(json.loads(line)["data"] == "sha256:aa" for line in lines)


def test_a_writer_killed_by_sigkill_leaves_a_readable_ledger(tmp_path):
    proc = _writer(tmp_path, "k", 10_000)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while int(proc.stdout.readline() or -1) < 5 and time.monotonic() < deadline:
        pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    read = read_ledger(tmp_path)
    assert len(read.rows) >= 6
    t = record_trial(tmp_path, _judged("after", 0, data="sha256:aa", returns=_returns(0, n=300)))
    assert t.n_configs == 4 and math.isfinite(t.sharpe_var or math.nan)


_SLOW_WRITER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_APPEND | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    row = sys.argv[2].encode()
    os.write(fd, row[:10])  # a row half copied in, as a slow write looks to a reader
    print("half", flush=True)
    time.sleep(2.0)
    os.write(fd, row[10:] + b"\\n")
    """
)


@pytest.mark.parametrize("during", ["record_trial", "append"])
def test_a_row_being_written_is_not_taken_for_a_torn_one(tmp_path, recwarn, during):
    """While another process's row is half written, a reader and a writer wait for it (the
    ledger's file lock) instead of skipping it as torn or starting a new line inside it."""
    record_trial(tmp_path, _judged("a", 0))
    first = (tmp_path / ROWS_FILE).read_text().splitlines()[0]
    other = first.replace('"config": "a"', '"config": "b"').replace("runs/", "runs/other-")
    cmd = [sys.executable, "-c", _SLOW_WRITER, str(tmp_path / ROWS_FILE), other]
    slow = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert slow.stdout is not None and slow.stdout.readline().strip() == "half"
    if during == "record_trial":
        record_trial(tmp_path, _judged("c", 0))
    else:  # the append alone: a writer that read the ledger before the slow row began
        _append_line(tmp_path / ROWS_FILE, other.replace('"config": "b"', '"config": "c"'))
    slow.communicate(timeout=30)
    lines = (tmp_path / ROWS_FILE).read_text().splitlines()
    assert [json.loads(line)["config"] for line in lines] == ["a", "b", "c"]
    assert not [w for w in recwarn if "not whole rows" in str(w.message)]


def test_a_portfolios_data_is_its_asset_files_in_order(tmp_path: Path) -> None:
    """A portfolio's assets live in ``env.kwargs``: the same files give the same fingerprint
    wherever they are, another file's bytes or another order another one; a bundled dataset
    is named with its symbols."""
    from riskppo.runs.ledger import PortfolioAssets, portfolio_fingerprint

    def files(*paths: Path) -> str:
        return portfolio_fingerprint(PortfolioAssets(None, (), tuple(str(p) for p in paths)))

    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("timestamp,close\n2020-01-01,1\n")
    b.write_text("timestamp,close\n2020-01-01,2\n")
    (tmp_path / "copy").mkdir()
    a2 = tmp_path / "copy" / "a.csv"
    a2.write_bytes(a.read_bytes())
    ab = files(a, b)
    assert ab == files(a2, b)
    assert ab != files(b, a)
    b.write_text("timestamp,close\n2020-01-01,3\n")
    assert ab != files(a, b)
    named = PortfolioAssets("sp500", ("AAPL", "KO"), ())
    assert portfolio_fingerprint(named).startswith("sp500[AAPL,KO]:sha256:")
    assert (
        named.label == "SP500[AAPL,KO]"
        and PortfolioAssets(None, (), (str(a), str(b))).label == "a.csv+b.csv"
    )
