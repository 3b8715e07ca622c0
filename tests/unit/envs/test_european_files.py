"""European CSV files (``;``-separated, decimal commas), tab- and ``|``-separated ones: read with
``data.sep`` / ``data.decimal`` (``sep`` / ``decimal`` in Python) or detected with one notice; what
cannot be detected names the settings, in the reader's words. Real files in ``tmp_path``."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.cli.errors import user_error
from riskppo.config import Config, ConfigError, apply_overrides
from riskppo.envs.market.errors import DataWarning
from riskppo.envs.market.ohlcv import DataError, load_ohlcv
from riskppo.envs.portfolio.data import load_portfolio
from riskppo.envs.registration import data_kwargs
from riskppo.envs.trading.factory import trading_range

N = 12
DAYS = pd.bdate_range("2021-03-01", periods=N)
CLOSE = np.round(1000 + 25 * np.sin(np.arange(N)), 2)  # 975.xx .. 1024.xx: some need a dot
VOLUME = np.arange(N) * 1500 + 1200  # 1200 .. 17700: some written with thousands dots


def euro(x: float) -> str:
    return f"{x:.2f}".replace(".", ",")


def write(path: Path, sep: str, dec: str, thousands: bool = False) -> Path:
    """Date, Open, High, Low, Close, Volume with field separator ``sep`` and decimal mark
    ``dec``; ``thousands``: volumes above 999 as ``1.200`` (with ``dec=","``)."""
    num = euro if dec == "," else (lambda x: f"{x:.2f}")
    rows = [sep.join(["Date", "Open", "High", "Low", "Close", "Vol"])]
    for d, c, v in zip(DAYS, CLOSE, VOLUME):
        vol = f"{v:,}".replace(",", ".") if thousands else str(v)
        prices = [num(c - 1), num(c + 2), num(c - 3), num(c)]
        rows.append(sep.join([d.strftime("%d.%m.%Y"), *prices, vol]))
    path.write_text("\n".join(rows) + "\n")
    return path


def loaded(path: Path, **kwargs) -> tuple[pd.DataFrame, list[str]]:
    """The frame and the DataWarnings loading it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = load_ohlcv(path, **kwargs)
    return df, [str(w.message) for w in caught if issubclass(w.category, DataWarning)]


def assert_values(df: pd.DataFrame) -> None:
    np.testing.assert_array_equal(df["close"].to_numpy(), CLOSE)
    np.testing.assert_array_equal(df["volume"].to_numpy(), VOLUME.astype(float))
    assert list(df.index) == list(DAYS)


def test_semicolons_and_decimal_commas_are_detected_with_one_notice(tmp_path) -> None:
    df, notes = loaded(write(tmp_path / "eu.csv", ";", ",", thousands=True))
    assert_values(df)
    assert notes == [
        f"{tmp_path / 'eu.csv'}: read with ';' as the field separator (from the header) and ',' "
        "as the decimal mark (from the numbers); pass sep=';', decimal=',' to set this and not be "
        "told again"
    ]
    # the settings it names read the same without a word
    df, notes = loaded(tmp_path / "eu.csv", sep=";", decimal=",")
    assert_values(df)
    assert notes == []


def test_semicolons_with_decimal_points_and_other_separators(tmp_path) -> None:
    df, notes = loaded(write(tmp_path / "semi.csv", ";", "."))
    assert_values(df)
    assert len(notes) == 1 and "';' as the field separator" in notes[0]
    assert "decimal mark" not in notes[0]
    for sep, word in (("\t", "tab"), ("|", "pipe")):
        path = write(tmp_path / f"{word}.txt", sep, ".")
        df, notes = loaded(path)
        assert_values(df)
        assert len(notes) == 1 and f"pass sep='{word}' to set this" in notes[0]
        assert loaded(path, sep=word)[1] == []


def test_comma_files_read_as_before_without_a_notice(tmp_path) -> None:
    df, notes = loaded(write(tmp_path / "plain.csv", ",", "."))
    assert_values(df)
    assert notes == []


def test_more_fields_than_the_header_names_the_european_settings(tmp_path) -> None:
    """Read with ',' (given), the European file's rows are longer than its one-column header:
    the message names the settings in Python, config and command-line words."""
    path = write(tmp_path / "eu.csv", ";", ",")
    with pytest.raises(DataError) as ei:
        load_ohlcv(path, sep=",")
    assert str(ei.value) == (
        f"{path}: data row 1: more fields than the 1 header columns; pass sep=';', decimal=',' "
        "if the file separates fields with ';' and writes decimal commas"
    )
    cli = user_error(ei.value.in_section("data"))
    assert cli is not None and cli.endswith(
        'data row 1: more fields than the 1 header columns; add --set data.sep=";" '
        "--set data.decimal=\",\" if the file separates fields with ';' and writes decimal commas"
    )


def test_undecidable_decimal_marks_name_the_settings(tmp_path) -> None:
    """Decimal commas in one column, decimal points in another: no guess, the fix is named."""
    path = tmp_path / "mixed.csv"
    rows = [f"{d:%Y-%m-%d};{euro(c)};{c:.1f}" for d, c in zip(DAYS, CLOSE)]
    path.write_text("Date;Close;Volume\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"cannot tell the decimal mark: numbers with ','") as ei:
        load_ohlcv(path)
    assert "in column 'Close') and with '.' (" in str(ei.value)
    cli = user_error(ei.value.in_section("data"))
    assert cli is not None and 'add --set data.sep=";" --set data.decimal=","' in cli
    with pytest.raises(DataError, match=r"column 'volume' \(with the decimal mark ','"):
        load_ohlcv(path, sep=";", decimal=",")  # a '.' is then only a thousands separator


def test_a_decimal_comma_read_with_points_names_the_setting(tmp_path) -> None:
    path = write(tmp_path / "eu.csv", ";", ",")
    with pytest.raises(DataError, match=r"non-numeric value '\d+,\d\d' .*pass decimal=','"):
        load_ohlcv(path, sep=";", decimal=".")


def test_config_keys_are_validated_and_reach_the_loader(tmp_path) -> None:
    path = write(tmp_path / "eu.csv", ";", ",", thousands=True)
    cfg = apply_overrides(Config(), [f"data.path={path}", 'data.sep=";"', 'data.decimal=","'])
    assert (cfg.data.sep, cfg.data.decimal) == (";", ",")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # given: nothing detected, nothing said
        df, _, _ = trading_range(part="train", **data_kwargs(cfg.data))
    np.testing.assert_array_equal(df["close"].to_numpy(), CLOSE)
    assert apply_overrides(Config(), ["data.sep=tab"]).data.sep == "\t"
    assert apply_overrides(Config(), ["data.sep=pipe"]).data.sep == "|"
    with pytest.raises(ConfigError, match=r"^invalid configuration: data.sep: unknown field sep"):
        apply_overrides(Config(), ["data.sep=x"])
    with pytest.raises(ConfigError, match=r"^invalid configuration: data.decimal: "):
        apply_overrides(Config(), ["data.decimal=x"])
    with pytest.raises(ValueError, match="unknown field separator ':'"):
        load_ohlcv(path, sep=":")


def test_a_portfolio_table_is_detected_too(tmp_path) -> None:
    rows = [f"{d:%Y-%m-%d};{s};{euro(c * k)}" for d, c in zip(DAYS, CLOSE) for s, k in
            (("AAA", 1.0), ("BBB", 0.5))]  # fmt: skip
    path = tmp_path / "table.csv"
    path.write_text("Date;Symbol;Close\n" + "\n".join(rows) + "\n")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        data = load_portfolio(table=str(path))
    np.testing.assert_allclose(data.close()[:, 0], CLOSE)
    assert load_portfolio(table=str(path), sep=";", decimal=",").symbols == ("AAA", "BBB")


def test_a_portfolio_files_remedy_names_the_data_keys_that_set_it(tmp_path) -> None:
    """A portfolio's files are read with ``data.*`` options: a remedy about reading them names
    ``data.sep``, not ``env.kwargs.sep`` (where the portfolio's own keys, such as align, live)."""
    from riskppo.envs.market.parts import FileOptions
    from riskppo.envs.portfolio.factory import read_data

    path = tmp_path / "mixed.csv"
    rows = [f"{d:%Y-%m-%d};AAA;{euro(c)};{c:.1f}" for d, c in zip(DAYS, CLOSE)]
    path.write_text("Date;Symbol;Close;Volume\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataError) as ei:
        read_data(FileOptions()._asdict(), {"table": str(path)})
    cli = user_error(ei.value)
    assert cli is not None and 'add --set data.sep=";" --set data.decimal=","' in cli, cli
