"""A file's Close next to its Adj Close: a split the Close is not adjusted for is named in one
warning (in the words of whoever loaded the file), dividends are not, and ``adjusted`` trades the
Adj Close with open/high/low scaled alike."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.cli.errors import show_warning
from riskppo.envs.market.errors import DataWarning
from riskppo.envs.market.ohlcv import load_ohlcv
from riskppo.envs.portfolio.factory import make_portfolio_env
from riskppo.envs.trading.factory import make_trading_env

N = 1200


def write(path: Path, split_at: int | None, factor: float = 4.0, seed: int = 0) -> Path:
    """``N`` weekdays whose Adj Close is a random walk; the Close is the Adj Close times a
    quarterly dividend step of 1% and, before ``split_at``, times ``factor`` (a split it is
    not adjusted for)."""
    rng = np.random.default_rng(seed)
    adj = 40.0 * np.exp(np.cumsum(rng.normal(0.0003, 0.01, N)))
    close = adj * 1.01 ** (np.arange(N)[::-1] // 63)  # ex-dividend every 63 bars
    if split_at is not None:
        close[:split_at] *= factor
    idx = pd.bdate_range("2014-01-02", periods=N)
    pd.DataFrame(
        {
            "Date": idx.strftime("%Y-%m-%d"),
            "Open": close,
            "High": close * 1.01,
            "Low": close * 0.99,
            "Close": close,
            "Adj Close": adj,
        }
    ).to_csv(path, index=False)
    return path


def load_warnings(path: Path, **kwargs: object) -> tuple[pd.DataFrame, list[DataWarning]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = load_ohlcv(path, **kwargs)  # type: ignore[arg-type]
    return df, [w.message for w in caught if isinstance(w.message, DataWarning)]


@pytest.mark.parametrize("factor", [4.0, 2.0, 1.25, 0.5])  # 4:1, 2:1, 5:4, a 1:2 reverse split
def test_a_split_the_close_misses_is_named_once_with_its_row(tmp_path: Path, factor) -> None:
    path = write(tmp_path / "x.csv", split_at=700, factor=factor)
    df, found = load_warnings(path)
    raw = pd.read_csv(path)
    move = raw["Close"][700] / raw["Close"][699] - 1  # the file's own numbers, by hand
    adj_move = raw["Adj Close"][700] / raw["Adj Close"][699] - 1
    assert [str(w) for w in found] == [
        f"{path}: data row 701 (timestamp {pd.Timestamp(raw['Date'][700])}): Close moves "
        f"{move:+.1%} in one bar and Adj Close {adj_move:+.1%}, as at a split the Close is not "
        "adjusted for: the agent trains and is scored on the Close; pass adjusted=True to trade "
        "the Adj Close (splits and dividends adjusted)"
    ]
    np.testing.assert_array_equal(df["close"].to_numpy(), raw["Close"].to_numpy())  # as read


def test_dividends_alone_and_a_file_without_adj_close_say_nothing(tmp_path: Path) -> None:
    _, found = load_warnings(write(tmp_path / "x.csv", split_at=None))
    assert found == []
    raw = pd.read_csv(write(tmp_path / "y.csv", split_at=700))
    raw.drop(columns="Adj Close").to_csv(tmp_path / "z.csv", index=False)
    _, found = load_warnings(tmp_path / "z.csv")
    assert found == []


def test_an_unreadable_adj_close_is_only_skipped(tmp_path: Path) -> None:
    raw = pd.read_csv(write(tmp_path / "x.csv", split_at=700)).astype({"Adj Close": object})
    raw.loc[5, "Adj Close"] = "n/a?"  # text in a column that is not read
    raw.loc[9, "Adj Close"] = None
    raw.to_csv(tmp_path / "y.csv", index=False)
    df, found = load_warnings(tmp_path / "y.csv")
    assert len(df) == N and found == []


def test_several_splits_are_counted_and_rows_survive_sorting(tmp_path: Path) -> None:
    path = write(tmp_path / "x.csv", split_at=700)
    raw = pd.read_csv(path)
    raw.loc[:299, "Close"] *= 2  # a second split, earlier
    raw.loc[500:, ["Close", "Adj Close"]] *= 0.6  # a real crash: in both columns, not named
    for c in ("Open", "High", "Low"):
        raw[c] = raw["Close"] * {"Open": 1.0, "High": 1.01, "Low": 0.99}[c]
    shuffled = raw.iloc[::-1]  # bar i (0-based, in time) is data row N - i of the file
    shuffled.to_csv(tmp_path / "y.csv", index=False)
    _, found = load_warnings(tmp_path / "y.csv", sort=True)
    assert len(found) == 1
    text = str(found[0])
    assert f"data row {N - 300} (timestamp {pd.Timestamp(raw['Date'][300])})" in text
    assert "; 1 more such bars follow" in text


def test_adjusted_trades_the_adj_close_with_ohlc_scaled(tmp_path: Path) -> None:
    path = write(tmp_path / "x.csv", split_at=700)
    raw = pd.read_csv(path)
    df, found = load_warnings(path, adjusted=True)
    assert found == []
    np.testing.assert_allclose(df["close"].to_numpy(), raw["Adj Close"].to_numpy(), rtol=1e-12)
    factor = raw["Adj Close"] / raw["Close"]
    np.testing.assert_allclose(df["high"].to_numpy(), (raw["High"] * factor).to_numpy())
    assert df["close"].pct_change().min() > -0.2  # no 75% crash left


def test_the_remedy_is_spelled_as_the_config_key_and_as_the_cli_option(tmp_path: Path) -> None:
    path = write(tmp_path / "x.csv", split_at=700)
    kw = dict(path=str(path), features=("ret_1",), episode_length=64)
    with pytest.warns(DataWarning) as record:
        make_trading_env(**kw)  # type: ignore[arg-type]
    (w,) = [r.message for r in record if isinstance(r.message, DataWarning)]
    assert str(w).endswith("; set data.adjusted=true to trade the Adj Close (splits and dividends "
                           "adjusted)")  # fmt: skip
    lines: list[str] = []

    class Out:
        def write(self, s: str) -> None:
            lines.append(s)

    show_warning(w, DataWarning, "f.py", 1, file=Out())  # type: ignore[arg-type]
    assert "".join(lines).startswith("riskppo: warning: ")
    assert "; add --set data.adjusted=true to trade the Adj Close" in "".join(lines)
    env = make_trading_env(adjusted=True, **kw)  # type: ignore[arg-type]
    np.testing.assert_allclose(env.df["close"].to_numpy(), pd.read_csv(path)["Adj Close"])


def test_portfolio_paths_take_adjusted(tmp_path: Path) -> None:
    paths = [str(write(tmp_path / f"{s}.csv", 700, seed=i)) for i, s in enumerate("ab")]
    kw = dict(paths=paths, features=("ret_1",), episode_length=64, sizing="none")
    with pytest.warns(DataWarning, match="set data.adjusted=true"):
        make_portfolio_env(**kw)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        env = make_portfolio_env(adjusted=True, **kw)  # type: ignore[arg-type]
    np.testing.assert_allclose(env.data.close()[:, 0], pd.read_csv(paths[0])["Adj Close"])
