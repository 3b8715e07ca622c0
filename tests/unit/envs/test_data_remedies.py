"""Data errors name their remedy in the reader's words (``load_ohlcv`` keywords, ``data.*`` config
keys, ``--set`` options); the usual spellings of a missing value are missing values; ``data.path``
is kept absolute so a run directory works from any working directory."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from riskppo.cli.errors import user_error
from riskppo.config import Config, apply_overrides
from riskppo.envs.market.errors import Remedy
from riskppo.envs.market.ohlcv import DataError, load_ohlcv, validate_ohlcv
from riskppo.envs.registration import data_kwargs
from riskppo.envs.trading.factory import trading_range


def close_csv(path: Path, cells: list[str], start: str = "2020-01-01") -> Path:
    days = pd.bdate_range(start, periods=len(cells)).strftime("%Y-%m-%d")
    path.write_text("Date,Close\n" + "".join(f"{d},{c}\n" for d, c in zip(days, cells)))
    return path


@pytest.mark.parametrize("cell", [".", "ND", "NA", "n/a", "#N/A", "-", "null", " . "])
def test_common_missing_value_spellings_are_missing_in_files_and_frames(tmp_path, cell) -> None:
    cells = ["10", "10.5", cell, "11"]
    path = close_csv(tmp_path / "p.csv", cells)
    with pytest.raises(DataError, match=r"NaN in column 'close': a run of 1 missing value"):
        load_ohlcv(path)
    assert load_ohlcv(path, nan_policy="ffill")["close"].tolist() == [10, 10.5, 10.5, 11]
    frame = pd.DataFrame({"date": pd.bdate_range("2020-01-01", periods=4), "close": cells})
    assert validate_ohlcv(frame, nan_policy="ffill")["close"].tolist() == [10, 10.5, 10.5, 11]


def test_a_word_is_still_not_a_number(tmp_path) -> None:
    with pytest.raises(DataError, match=r"non-numeric value 'closed' in column 'close'"):
        load_ohlcv(close_csv(tmp_path / "p.csv", ["10", "closed", "11"]), nan_policy="ffill")


def test_a_remedy_is_spelled_for_python_config_and_command_line() -> None:
    fill = Remedy((("nan_policy", "ffill"), ("ffill_limit", 3)), "to forward-fill it")
    err = DataError("x.csv", "NaN in column 'close'", row=4, remedy=fill)
    assert str(err) == (
        "x.csv: data row 4: NaN in column 'close'; pass nan_policy='ffill', ffill_limit=3 "
        "to forward-fill it"
    )
    assert str(err.in_section("data")).endswith(
        "; set data.nan_policy=ffill, data.ffill_limit=3 to forward-fill it"
    )
    cli = user_error(err.in_section("data"))
    assert cli is not None and cli.endswith(
        "; add --set data.nan_policy=ffill --set data.ffill_limit=3 to forward-fill it"
    )
    either = Remedy((("dayfirst", True), ("dayfirst", False)), "for the date order", True)
    assert either.text("data", cli=True) == (
        "add --set data.dayfirst=true or --set data.dayfirst=false for the date order"
    )


def test_config_keys_fix_what_the_errors_name(tmp_path) -> None:
    """The keys a data error names exist and reach the loader: ``data.dayfirst`` and
    ``data.timestamp_format`` resolve what they are named for."""
    days = ["01/02/2020", "02/02/2020", "03/02/2020", "04/02/2020", "05/02/2020"]
    path = tmp_path / "slashed.csv"
    path.write_text("Date,Close\n" + "".join(f"{d},{10 + i}\n" for i, d in enumerate(days)))
    cfg = apply_overrides(Config(), [f"data.path={path}", "data.split=[0.4,0.2,0.4]"])
    with pytest.raises(DataError, match=r"ambiguous.*; set data.dayfirst=true or data.dayf"):
        trading_range(part="train", **data_kwargs(cfg.data))
    dayfirst = apply_overrides(cfg, ["data.dayfirst=true"]).data
    df, _, _ = trading_range(part="train", **data_kwargs(dayfirst))
    assert df.index[1] == pd.Timestamp("2020-02-02")
    iso = apply_overrides(cfg, ["data.timestamp_format=%d/%m/%Y"])
    assert trading_range(part="train", **data_kwargs(iso.data))[0].index[1].day == 2

    epoch = tmp_path / "epoch.csv"
    epoch.write_text("Date,Close\n" + "".join(f"{17e8 + 86400 * i:.1f},1\n" for i in range(5)))
    epoch_cfg = apply_overrides(cfg, [f"data.path={epoch}"])
    with pytest.raises(DataError, match=r"set data.timestamp_format=s or data.timestamp_format=ms"):
        trading_range(part="train", **data_kwargs(epoch_cfg.data))


def test_data_path_is_kept_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = apply_overrides(Config(), ["data.path=prices/x.csv"])
    assert cfg.data.path == str(tmp_path / "prices" / "x.csv")
    monkeypatch.chdir(tmp_path.parent)  # the stored config still points at the same file
    assert Config.build(cfg.to_dict()).data.path == str(tmp_path / "prices" / "x.csv")
    home = apply_overrides(Config(), ["data.path=~/x.csv"]).data.path
    assert home == os.path.expanduser("~/x.csv")
    with pytest.raises(ValueError, match=r"data.path: empty"):
        apply_overrides(Config(), ["data.path=' '"])
