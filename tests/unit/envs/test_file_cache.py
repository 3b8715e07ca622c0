"""A price file rewritten in the same process is read again: the env factories cache what they
read by the file's modification time and size as well as its name (a notebook that regenerates
its data, a feed that grows under the same name)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np

from riskppo.envs import make_portfolio_env, make_trading_env
from riskppo.envs.market.planted import ar_market
from riskppo.envs.trading.factory import read_bars

KW = dict(features=("vret_1",), episode_length=64, sizing="none")
_SECONDS = itertools.count(1_700_000_000)


def _write(path: Path, n: int, seed: int) -> str:
    """A planted file written at ``path``, its modification time a second after the last one's
    (the clock's tick can be coarser than two writes in a row)."""
    ar_market(n, phi=0.1, seed=seed)[0].to_csv(path)
    ns = next(_SECONDS) * 10**9
    os.utime(path, ns=(ns, ns))
    return str(path)


def test_a_rewritten_file_reaches_the_next_trading_env(tmp_path: Path) -> None:
    path = _write(tmp_path / "bars.csv", 400, seed=0)
    first = make_trading_env(path=path, **KW).df["close"].to_numpy()
    _write(tmp_path / "bars.csv", 500, seed=1)
    second = make_trading_env(path=path, **KW).df["close"].to_numpy()
    assert len(first) == 400 and len(second) == 500
    # the same length, other prices: the modification time alone tells them apart
    _write(tmp_path / "bars.csv", 500, seed=2)
    third = make_trading_env(path=path, **KW).df["close"].to_numpy()
    assert not np.array_equal(second, third)
    unchanged = {"dataset": None, "path": path}
    assert read_bars(unchanged) is read_bars(unchanged)  # an unchanged file: read once


def test_a_rewritten_file_reaches_the_next_portfolio_env(tmp_path: Path) -> None:
    paths = [_write(tmp_path / f"{s}.csv", 400, seed=i) for i, s in enumerate("ab")]
    before = make_portfolio_env(paths=paths, **KW)
    _write(tmp_path / "b.csv", 400, seed=7)
    after = make_portfolio_env(paths=paths, **KW)
    assert not np.array_equal(before.data.close()[:, 1], after.data.close()[:, 1])
    np.testing.assert_array_equal(before.data.close()[:, 0], after.data.close()[:, 0])
