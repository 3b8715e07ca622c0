"""Portfolio data: the bundled sp500 stocks, one file per asset, long and wide tables, and the
one-line errors when the assets do not align."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.envs.market.datasets import SP500_SYMBOLS
from riskppo.envs.market.errors import DataError
from riskppo.envs.portfolio.data import load_portfolio


def _write(path: Path, dates: pd.DatetimeIndex, seed: int) -> str:
    rng = np.random.default_rng(seed)
    close = 10 * np.exp(np.cumsum(rng.normal(0, 0.01, len(dates))))
    pd.DataFrame({"Date": dates.strftime("%Y-%m-%d"), "Close": close}).to_csv(path, index=False)
    return str(path)


DATES = pd.bdate_range("2021-01-04", periods=30)


def test_sp500_all_twenty_and_a_selection() -> None:
    full = load_portfolio(dataset="sp500")
    assert full.symbols == SP500_SYMBOLS and full.close().shape == (8313, 20)
    some = load_portfolio(dataset="sp500", symbols=["ko", "AAPL"])
    assert some.symbols == ("KO", "AAPL")
    np.testing.assert_array_equal(some.close()[:, 1], full.close()[:, 0])


def test_unknown_symbol_names_it() -> None:
    with pytest.raises(ValueError, match="symbol='ZZZ' is not in dataset 'sp500'"):
        load_portfolio(dataset="sp500", symbols=["AAPL", "ZZZ"])


def test_one_file_per_asset_aligns(tmp_path: Path) -> None:
    paths = [_write(tmp_path / f"{s}.csv", DATES, i) for i, s in enumerate(["AAA", "BBB"])]
    data = load_portfolio(paths=paths)
    assert data.symbols == ("AAA", "BBB") and len(data.index) == 30


def test_misaligned_files_one_line_naming_asset_and_dates(tmp_path: Path) -> None:
    a = _write(tmp_path / "AAA.csv", DATES, 0)
    b = _write(tmp_path / "BBB.csv.gz", DATES.delete([5, 6]), 1)
    with pytest.raises(DataError) as err:
        load_portfolio(paths=[a, b])
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("BBB (BBB.csv.gz): dates do not align with AAA: it lacks 2 of AAA's")
    assert "2021-01-11, 2021-01-12" in msg and "align='intersect'" in msg
    data = load_portfolio(paths=[a, b], align="intersect")
    assert len(data.index) == 28


def test_extra_dates_are_named(tmp_path: Path) -> None:
    a = _write(tmp_path / "AAA.csv", DATES[:20], 0)
    b = _write(tmp_path / "BBB.csv", DATES, 1)
    with pytest.raises(
        DataError, match=r"BBB \(BBB.csv\): .* has 10 dates AAA lacks \(2021-02-01, "
    ):
        load_portfolio(paths=[a, b])


def test_disjoint_files_intersect_error_lists_ranges(tmp_path: Path) -> None:
    a = _write(tmp_path / "AAA.csv", DATES[:10], 0)
    b = _write(tmp_path / "BBB.csv", DATES[15:], 1)
    with pytest.raises(DataError, match=r"share 0 dates.*AAA 2021-01-04\.\.2021-01-15; BBB"):
        load_portfolio(paths=[a, b], align="intersect")


def test_long_table(tmp_path: Path) -> None:
    rows = [
        {"ticker": s, "date": d.strftime("%Y-%m-%d"), "close": 10.0 + i + k}
        for k, s in enumerate(["X", "Y", "Z"])
        for i, d in enumerate(DATES)
    ]
    path = tmp_path / "long.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    data = load_portfolio(table=str(path), symbols=["Z", "X"])
    assert data.symbols == ("Z", "X")
    assert data.close()[0].tolist() == [12.0, 10.0]


def test_wide_table_blank_cell_is_a_missing_date(tmp_path: Path) -> None:
    wide = pd.DataFrame({"Date": DATES.strftime("%Y-%m-%d"), "P": 1.0, "Q": 2.0})
    wide.loc[3, "Q"] = np.nan
    path = tmp_path / "wide.csv"
    wide.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"^Q: dates do not align with P: it lacks 1 of P's dates"):
        load_portfolio(table=str(path))
    assert len(load_portfolio(table=str(path), align="intersect").index) == 29


def test_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one of dataset, paths or table"):
        load_portfolio()
    with pytest.raises(ValueError, match="exactly one of dataset, paths or table"):
        load_portfolio(dataset="sp500", table="x.csv")


def test_a_single_string_is_not_a_list() -> None:
    with pytest.raises(ValueError, match=r"paths='a.csv' must be a list, e.g. \[a.csv\]"):
        load_portfolio(paths="a.csv")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"symbols='KO' must be a list"):
        load_portfolio(dataset="sp500", symbols="KO")


def test_duplicate_asset_files(tmp_path: Path) -> None:
    a = _write(tmp_path / "AAA.csv", DATES, 0)
    (tmp_path / "d").mkdir()
    b = _write(tmp_path / "d" / "AAA.csv", DATES, 1)
    with pytest.raises(ValueError, match="name the same asset 'AAA'"):
        load_portfolio(paths=[a, b])
