"""Per-asset signal columns in the portfolio env: each asset's own column of the named signal,
from one file per asset or a long table, observed with that asset's features at the bar whose
close it belongs to; a wide table or the bundled closes have none (one line)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.config import ConfigError
from riskppo.envs.market.errors import DataError
from riskppo.envs.portfolio.data import load_portfolio
from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.envs.portfolio.factory import make_portfolio_env

N = 200
DATES = pd.bdate_range("2020-01-06", periods=N)
ASSETS = ("AAA", "BBB", "CCC")


def asset_frame(k: int) -> pd.DataFrame:
    """Asset ``k``'s closes (a random walk) and its signal ``flow`` = 1000·k + the bar index,
    so a value tells both the asset and the bar it stands on."""
    rng = np.random.default_rng(k)
    close = 20 * np.exp(np.cumsum(rng.normal(0, 0.01, N)))
    return pd.DataFrame(
        {"Date": DATES.strftime("%Y-%m-%d"), "Close": close, "flow": 1000.0 * k + np.arange(N)}
    )


def one_file_each(tmp_path: Path) -> list[str]:
    paths = []
    for k, name in enumerate(ASSETS):
        asset_frame(k).to_csv(tmp_path / f"{name}.csv", index=False)
        paths.append(str(tmp_path / f"{name}.csv"))
    return paths


def long_table(tmp_path: Path) -> str:
    parts = [asset_frame(k).assign(symbol=name) for k, name in enumerate(ASSETS)]
    path = tmp_path / "long.csv"
    pd.concat(parts).sample(frac=1.0, random_state=0).sort_values("Date", kind="stable").to_csv(
        path, index=False
    )
    return str(path)


@pytest.mark.parametrize("source", ["paths", "table"])
def test_each_asset_keeps_its_own_signal(tmp_path: Path, source: str) -> None:
    kwargs = (
        {"paths": one_file_each(tmp_path)} if source == "paths" else {"table": long_table(tmp_path)}
    )
    data = load_portfolio(signals=["flow"], **kwargs)
    assert sorted(data.symbols) == list(ASSETS)
    for name, frame in zip(data.symbols, data.frames, strict=True):
        k = ASSETS.index(name)
        np.testing.assert_array_equal(frame["flow"].to_numpy(), 1000.0 * k + np.arange(N))


def test_per_asset_signals_reach_the_observation_at_their_bar(tmp_path: Path) -> None:
    data = load_portfolio(paths=one_file_each(tmp_path), signals=["flow"])
    env = PortfolioEnv(data, features=["ret_1"], signals=["flow"], window=2, random_start=False)
    names = env.observation_names
    assert names[:6] == [
        "AAA.ret_1[t-1]", "AAA.flow[t-1]", "BBB.ret_1[t-1]", "BBB.flow[t-1]",
        "CCC.ret_1[t-1]", "CCC.flow[t-1]",
    ]  # fmt: skip
    obs, info = env.reset()
    for _ in range(5):
        t = info["bar"]
        for k, name in enumerate(ASSETS):
            assert obs[names.index(f"{name}.flow[t]")] == 1000 * k + t
            assert obs[names.index(f"{name}.flow[t-1]")] == 1000 * k + t - 1
        obs, _, _, _, info = env.step(np.zeros(env.action_space.shape, np.float32))


def test_the_factory_passes_data_signals(tmp_path: Path) -> None:
    env = make_portfolio_env(table=long_table(tmp_path), signals=["flow"], part="test",
                             features=["ret_1"])  # fmt: skip
    assert env.feature_names == ("ret_1", "flow")


def test_a_wide_table_has_no_signal_columns(tmp_path: Path) -> None:
    wide = pd.DataFrame({"Date": DATES.strftime("%Y-%m-%d"), "AAA": 1.0 + np.arange(N), "BBB": 2.0})
    wide.to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(DataError, match=r"wide\.csv: signals \['flow'\] need a long table"):
        load_portfolio(table=str(tmp_path / "wide.csv"), signals=["flow"])


def test_the_bundled_closes_have_no_signal_columns() -> None:
    with pytest.raises(ConfigError, match=r"signals \['flow'\] need files with those columns; "
                       "dataset 'sp500' has closes only"):  # fmt: skip
        make_portfolio_env(dataset="sp500", symbols=["KO", "PEP"], signals=["flow"])


def test_a_missing_signal_names_the_asset_file(tmp_path: Path) -> None:
    paths = one_file_each(tmp_path)
    asset_frame(1).drop(columns="flow").to_csv(paths[1], index=False)
    with pytest.raises(DataError, match=r"BBB\.csv: signal column 'flow' is not among its "
                       r"columns \(Date, Close\)"):  # fmt: skip
        load_portfolio(paths=paths, signals=["flow"])
