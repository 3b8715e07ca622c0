"""R-TRADE-1: OHLCV loading, validation with clear errors, bundled datasets and splits."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.envs import (
    DataError,
    dataset_path,
    default_split,
    gbm,
    index_range,
    load_dataset,
    load_ohlcv,
    split_by_date,
    validate_ohlcv,
    walk_forward,
)

HEADER = "Date,Open,High,Low,Close,Adj Close,Volume"
GOOD_ROWS = [
    "2020-01-01,10,11,9,10.5,10.4,100",
    "2020-01-02,10.5,12,10,11,10.9,200",
    "2020-01-03,11,11.5,10.5,11.2,11.1,300",
    "2020-01-06,11.2,11.8,10.9,11.5,11.4,400",
    "2020-01-07,11.5,12.1,11.3,12,11.9,500",
]


def write_csv(tmp_path: Path, rows: list[str], header: str = HEADER, name: str = "p.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def replace_row(i: int, row: str) -> list[str]:
    rows = list(GOOD_ROWS)
    rows[i - 1] = row  # i is the 1-based data row
    return rows


def assert_error(path: Path, match: str, row: int | None, **kwargs) -> DataError:
    with pytest.raises(DataError, match=match) as ei:
        load_ohlcv(path, **kwargs)
    err = ei.value
    msg = str(err)
    assert str(path) in msg, msg
    assert err.source == str(path)
    if row is not None:
        assert err.row == row, msg
        assert f"data row {row}" in msg, msg
    return err


# ----------------------------------------------------------------------------- happy paths


def test_load_csv_canonical_frame(tmp_path):
    df = load_ohlcv(write_csv(tmp_path, GOOD_ROWS))
    assert list(df.columns) == ["open", "high", "low", "close", "volume"]
    assert all(dt == np.float64 for dt in df.dtypes)
    assert isinstance(df.index, pd.DatetimeIndex) and df.index.name == "timestamp"
    assert df.index.tz is None and df.index.is_monotonic_increasing and df.index.is_unique
    assert df["close"].iloc[0] == 10.5  # Adj Close ignored by default
    assert df.index[0] == pd.Timestamp("2020-01-01")


def test_adjusted_close_scales_ohlc(tmp_path):
    df = load_ohlcv(write_csv(tmp_path, GOOD_ROWS), adjusted=True)
    assert df["close"].iloc[0] == 10.4
    np.testing.assert_allclose(df["open"].iloc[0], 10 * 10.4 / 10.5)
    assert (df["high"] >= df[["open", "close"]].max(axis=1)).all()


def test_parquet_roundtrip_and_in_memory_validation(tmp_path):
    src = gbm(50, seed=1)
    path = tmp_path / "x.parquet"
    src.to_parquet(path)
    df = load_ohlcv(path)
    pd.testing.assert_frame_equal(df, src, check_freq=False, check_index_type=False)
    # a timestamp column (not an index) in Parquet works too
    src.reset_index().rename(columns={"timestamp": "Datetime"}).to_parquet(tmp_path / "y.pq")
    assert load_ohlcv(tmp_path / "y.pq").equals(df)
    assert validate_ohlcv(src.rename(columns=str.upper)).equals(df)


def test_dayfirst_and_tz_and_separate_date_time(tmp_path):
    rows = [
        "01.02.2017 22:00:00.000,1,2,0.5,1.5,10",
        "13.02.2017 23:00:00.000,1.5,2,1,1.2,11",
    ]
    df = load_ohlcv(write_csv(tmp_path, rows, header="Time,Open,High,Low,Close,Volume"))
    assert list(df.index) == [pd.Timestamp("2017-02-01 22:00"), pd.Timestamp("2017-02-13 23:00")]

    rows = ["2017-01-01T10:00:00+01:00,1,2,0.5,1.5,10", "2017-01-01T10:00:00+00:00,1,2,1,1.2,11"]
    df = load_ohlcv(write_csv(tmp_path, rows, header="timestamp,open,high,low,close,volume"))
    assert df.index.tz is None and df.index[0] == pd.Timestamp("2017-01-01 09:00")

    rows = ["2017-01-01,10:00,1,2,0.5,1.5,10", "2017-01-01,11:00,1,2,1,1.2,11"]
    df = load_ohlcv(write_csv(tmp_path, rows, header="Date,Time,Open,High,Low,Close,Volume"))
    assert df.index[1] == pd.Timestamp("2017-01-01 11:00")


def test_ambiguous_slash_dates(tmp_path):
    rows = ["01/02/2017,1,2,0.5,1.5,10", "01/03/2017,1.5,2,1,1.2,11"]
    path = write_csv(tmp_path, rows, header="Date,Open,High,Low,Close,Volume")
    with pytest.raises(DataError, match="ambiguous"):
        load_ohlcv(path)
    assert load_ohlcv(path, dayfirst=True).index[1] == pd.Timestamp("2017-03-01")
    assert load_ohlcv(path, dayfirst=False).index[1] == pd.Timestamp("2017-01-03")
    # only one reading is increasing: it wins
    rows = ["12/01/2017,1,2,0.5,1.5,10", "01/02/2017,1.5,2,1,1.2,11"]
    path = write_csv(tmp_path, rows, header="Date,Open,High,Low,Close,Volume")
    assert load_ohlcv(path).index[1] == pd.Timestamp("2017-02-01")


# ----------------------------------------------------------------------------- malformed files


def test_missing_columns_are_listed(tmp_path):
    path = write_csv(tmp_path, ["2020-01-01,10,9"], header="Date,Open,Low")
    err = assert_error(path, "missing required columns", None)
    assert "['close']" in str(err)  # close is the one required column
    err = assert_error(path, "missing required columns", None, require_volume=True)
    assert "['close', 'volume']" in str(err)
    path = write_csv(tmp_path, ["10,11,9,10.5,100"], header="open,high,low,close,volume")
    assert_error(path, "timestamp", None)


def test_unparsable_timestamp(tmp_path):
    path = write_csv(tmp_path, replace_row(3, "not-a-date,11,11.5,10.5,11.2,11.1,300"))
    assert_error(path, "unparsable timestamp 'not-a-date'", 3)


def test_duplicate_timestamp(tmp_path):
    path = write_csv(tmp_path, replace_row(4, "2020-01-03,11.2,11.8,10.9,11.5,11.4,400"))
    err = assert_error(path, "duplicate timestamp", 4)
    assert "data rows 3 and 4" in str(err) and "2020-01-03" in str(err)


def test_unsorted_timestamps_raise_unless_sort(tmp_path):
    rows = list(GOOD_ROWS)
    rows[1], rows[2] = rows[2], rows[1]
    path = write_csv(tmp_path, rows)
    assert_error(path, "not sorted.*; pass sort=True to sort the rows by time$", 3)
    df = load_ohlcv(path, sort=True)
    assert df.index.is_monotonic_increasing and len(df) == len(rows)
    assert df.loc["2020-01-02", "close"] == 11.0


def test_row_numbers_refer_to_file_order_after_sort(tmp_path):
    rows = list(GOOD_ROWS)
    rows[0], rows[4] = rows[4], rows[0]
    rows[1] = "2020-01-02,10.5,9,10,11,10.9,200"  # high < low at data row 2
    assert_error(write_csv(tmp_path, rows), "high < low", 2, sort=True)


def test_non_positive_price(tmp_path):
    path = write_csv(tmp_path, replace_row(2, "2020-01-02,10.5,12,0,11,10.9,200"))
    err = assert_error(path, "non-positive price: low", 2)
    assert "2020-01-02" in str(err)
    path = write_csv(tmp_path, replace_row(5, "2020-01-07,-1,12.1,11.3,12,11.9,500"))
    assert_error(path, "non-positive price: open", 5)


def test_high_low_inconsistencies(tmp_path):
    path = write_csv(tmp_path, replace_row(2, "2020-01-02,10.5,9.5,10,9.8,10.9,200"))
    assert_error(path, r"high < low", 2)
    path = write_csv(tmp_path, replace_row(3, "2020-01-03,11,11.1,10.5,11.2,11.1,300"))
    assert_error(path, r"high < max\(open, close\)", 3)
    path = write_csv(tmp_path, replace_row(4, "2020-01-06,11.2,11.8,11.3,11.5,11.4,400"))
    assert_error(path, r"low > min\(open, close\)", 4)


def test_nan_raise_policy(tmp_path):
    rows = replace_row(2, "2020-01-02,10.5,12,10,,10.9,200")
    rows[2] = "2020-01-03,11,11.5,10.5,,11.1,300"
    path = write_csv(tmp_path, rows)
    err = assert_error(path, "NaN in column 'close'", 2)
    assert "run of 2" in str(err) and "data rows 2-3" in str(err)


def test_nan_ffill_within_and_beyond_limit(tmp_path):
    # a whole missing bar, filled from the previous bar
    rows = replace_row(3, "2020-01-03,,,,,,")
    df = load_ohlcv(write_csv(tmp_path, rows), nan_policy="ffill", ffill_limit=1)
    assert df.loc["2020-01-03"].tolist() == df.loc["2020-01-02"].tolist()
    # two missing closes in a row: longer than the limit of 1
    rows = replace_row(3, "2020-01-03,11,11.5,10.5,,11.1,300")
    rows[3] = "2020-01-06,11.2,11.8,10.9,,11.4,400"
    path = write_csv(tmp_path, rows)
    err = assert_error(
        path, "longer than the forward-fill limit of 1; pass ffill_limit=2 to", 3,
        nan_policy="ffill", ffill_limit=1,
    )  # fmt: skip
    assert "run of 2" in str(err)
    # within a limit of 2 both are filled with the last close
    df = load_ohlcv(path, nan_policy="ffill", ffill_limit=2)
    assert df["close"].iloc[1:4].tolist() == [11.0, 11.0, 11.0]
    # filled values are still checked for OHLC consistency (filled close 11 > high 10.8)
    path = write_csv(tmp_path, replace_row(3, "2020-01-03,10.6,10.8,10.5,,11.1,300"))
    assert_error(path, r"high < max\(open, close\)", 3, nan_policy="ffill", ffill_limit=2)
    # nothing to fill the first row from
    path = write_csv(tmp_path, replace_row(1, "2020-01-01,10,11,9,,10.4,100"))
    assert_error(path, "first row", 1, nan_policy="ffill", ffill_limit=3)


def test_non_numeric_value(tmp_path):
    path = write_csv(tmp_path, replace_row(2, "2020-01-02,10.5,12,10,abc,10.9,200"))
    assert_error(path, "non-numeric value 'abc' in column 'close'", 2)


def test_wrong_field_counts(tmp_path):
    path = write_csv(tmp_path, replace_row(3, "2020-01-03,11,11.5,10.5,11.2,11.1,300,999"))
    assert_error(path, "8 fields, expected 7", 3)
    path = write_csv(tmp_path, replace_row(1, "2020-01-01,10,11,9,10.5,10.4,100,999"))
    assert_error(path, "more fields than the 7 header columns", 1)


def test_empty_files(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert_error(empty, "empty file", None)
    header_only = write_csv(tmp_path, [], name="header.csv")
    assert_error(header_only, "empty file", None)


def test_unknown_suffix(tmp_path):
    path = tmp_path / "prices.xlsx"
    path.write_text("whatever")
    err = assert_error(path, "unknown file suffix", None)
    assert ".parquet" in str(err) and ".csv" in str(err)


def test_malformed_parquet_names_file_and_row(tmp_path):
    src = gbm(20, seed=3)
    src.iloc[6, src.columns.get_loc("high")] = src["low"].iloc[6] * 0.5
    path = tmp_path / "bad.parquet"
    src.to_parquet(path)
    err = assert_error(path, "high < low", 7)
    assert str(src.index[6]) in str(err)


def test_validate_in_memory_frame_names_source():
    src = gbm(10, seed=0)
    src.iloc[4, 0] = np.nan
    with pytest.raises(DataError, match=r"mine: data row 5 .*NaN in column 'open'"):
        validate_ohlcv(src, source="mine")


# ----------------------------------------------------------------------------- bundled data


def test_load_googl():
    df = load_dataset("googl")
    assert len(df) == 2335
    assert df.index.is_monotonic_increasing and df.index.is_unique
    assert df.index[0] == pd.Timestamp("2009-05-22")
    assert df.index[-1] == pd.Timestamp("2018-08-29")
    assert df["close"].iloc[0] == pytest.approx(196.946945)


def test_load_eurusd_is_day_first():
    df = load_dataset("EURUSD")
    assert len(df) == 6225
    assert df.index.is_monotonic_increasing and df.index.is_unique
    assert df.index[0] == pd.Timestamp("2017-01-01 22:00")
    assert df.index[-1] == pd.Timestamp("2017-12-29 21:00")
    # the auto-detected format agrees with the explicit one (day-first dotted dates)
    pd.testing.assert_frame_equal(load_ohlcv(dataset_path("eurusd")), df)


def test_unknown_dataset_lists_names():
    with pytest.raises(ValueError, match=r"\['eurusd', 'googl', 'sp500'\]"):
        load_dataset("spx")


def test_dataset_path_does_not_import_gym_anytrading():
    # importing gym_anytrading registers envs in gymnasium's global registry: avoid it
    if "gym_anytrading" in sys.modules:
        pytest.skip("gym_anytrading was imported elsewhere in this process")
    load_dataset("googl")
    assert dataset_path("eurusd").is_file()
    assert "gym_anytrading" not in sys.modules


# ----------------------------------------------------------------------------- splits


@pytest.fixture(scope="module")
def googl() -> pd.DataFrame:
    return load_dataset("googl")


def _assert_ordered_disjoint(*parts: pd.DataFrame) -> None:
    for a, b in itertools.pairwise(parts):
        assert len(a) and len(b)
        assert a.index[-1] < b.index[0]
        assert a.index.intersection(b.index).empty


def test_split_by_date(googl):
    s = split_by_date(googl, "2016-01-01", "2017-06-01")
    _assert_ordered_disjoint(s.train, s.val, s.test)
    assert len(s.train) + len(s.val) + len(s.test) == len(googl)
    assert s.train.index[-1] < pd.Timestamp("2016-01-01") <= s.val.index[0]
    assert s.val.index[-1] < pd.Timestamp("2017-06-01") <= s.test.index[0]
    with pytest.raises(ValueError, match="before"):
        split_by_date(googl, "2017-01-01", "2016-01-01")
    with pytest.raises(ValueError, match="test part"):
        split_by_date(googl, "2016-01-01", "2030-01-01")


def test_default_split_fractions(googl):
    s = default_split(googl)
    _assert_ordered_disjoint(s.train, s.val, s.test)
    n = len(googl)
    assert len(s.train) == int(0.7 * n) and len(s.train) + len(s.val) + len(s.test) == n
    assert abs(len(s.val) - 0.15 * n) <= 1
    with pytest.raises(ValueError, match="fractions"):
        default_split(googl, (0.5, 0.5, 0.5))


def test_index_range_maps_parts_to_positions(googl):
    s = default_split(googl)
    for part in s:
        lo, hi = index_range(googl, part)
        assert googl.iloc[lo:hi].equals(part)
    with pytest.raises(ValueError, match="contiguous"):
        index_range(googl, pd.concat([s.train.iloc[:5], s.test.iloc[:5]]))


def test_walk_forward_windows(googl):
    folds = list(walk_forward(googl, n_folds=4, train_size=500, test_size=100))
    assert len(folds) == 4
    for k, (train, test) in enumerate(folds):
        assert len(train) == 500 and len(test) == 100
        _assert_ordered_disjoint(train, test)
        assert googl.index.get_loc(test.index[0]) == googl.index.get_loc(train.index[-1]) + 1
        if k:
            prev_test = folds[k - 1].test
            _assert_ordered_disjoint(prev_test, test)  # test windows tile without overlap
            assert (
                googl.index.get_loc(test.index[0]) == googl.index.get_loc(prev_test.index[-1]) + 1
            )
    assert folds[-1].test.index[-1] == googl.index[-1]  # aligned to the end of the data

    anchored = list(walk_forward(googl, 3, 500, 100, anchored=True))
    assert [len(f.train) for f in anchored] == [500, 600, 700]
    assert len({f.train.index[0] for f in anchored}) == 1
    with pytest.raises(ValueError, match="needs"):
        list(walk_forward(googl, 100, 500, 100))


# ----------------------------------------------------------------------- edge cases ----------


def test_year_past_2262_is_an_error_naming_file_and_row_not_a_wrapped_bar(tmp_path):
    path = write_csv(tmp_path, replace_row(3, "2920-01-30,11,11.5,10.5,11.2,11.1,300"))
    for sort in (False, True):
        err = assert_error(path, r"'2920-01-30' is outside the range", row=3, sort=sort)
        assert "\n" not in str(err)


def test_epoch_seconds_and_milliseconds_columns_parse(tmp_path):
    secs = [1577836800 + 86400 * k for k in range(5)]
    rows = [f"{t},{r.split(',', 1)[1]}" for t, r in zip(secs, GOOD_ROWS)]
    want = pd.date_range("2020-01-01", periods=5, freq="D")
    df = load_ohlcv(write_csv(tmp_path, rows, name="s.csv"))
    assert list(df.index) == list(want)
    rows_ms = [f"{t * 1000},{r.split(',', 1)[1]}" for t, r in zip(secs, GOOD_ROWS)]
    df = load_ohlcv(write_csv(tmp_path, rows_ms, name="ms.csv"))
    assert list(df.index) == list(want)


def test_fractional_epoch_gets_a_timestamp_format_hint(tmp_path):
    rows = [f"{1577836800.5 + 86400 * k},{r.split(',', 1)[1]}" for k, r in enumerate(GOOD_ROWS)]
    assert_error(write_csv(tmp_path, rows), r"timestamp_format='s'", row=1)


def test_wrong_delimiter_gets_a_hint(tmp_path):
    """A ';' file read with sep=',' (detection reads it: tests/unit/envs/test_european_files.py)
    names the setting that reads it."""
    rows = [r.replace(",", ";") for r in GOOD_ROWS]
    path = write_csv(tmp_path, rows, header=HEADER.replace(",", ";"))
    err = assert_error(
        path, r"seems to use it as delimiter; pass sep=';' to read it", None, sep=","
    )
    assert "\n" not in str(err)


def test_directory_named_csv_is_a_data_error(tmp_path):
    path = tmp_path / "x.csv"
    path.mkdir()
    assert_error(path, r"is a directory", row=None)


def test_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "f.csv"
    os.mkfifo(path)
    assert_error(path, r"not a regular file", row=None)


def test_file_too_short_to_split_names_file_and_bars_needed(tmp_path):
    from riskppo.envs.trading.factory import make_trading_env

    path = write_csv(tmp_path, GOOD_ROWS[:2], name="short.csv")
    with pytest.raises(DataError, match=r"at least 4 bars are needed") as ei:
        make_trading_env(dataset=None, path=str(path))
    assert str(path) in str(ei.value)


def test_data_config_options_reach_the_loader(tmp_path):
    from riskppo.config import Config, apply_overrides
    from riskppo.envs.registration import data_kwargs
    from riskppo.envs.trading.factory import trading_range

    rows = replace_row(3, "2020-01-03,,11.5,10.5,11.2,11.1,300")
    rows = [rows[i] for i in (1, 0, 2, 3, 4)] + [
        f"2020-01-{d:02d},11.5,12.1,11.3,12,11.9,500" for d in range(8, 28)
    ]
    path = write_csv(tmp_path, rows)
    cfg = apply_overrides(Config(), [f"data.path={path}"])
    # each error's remedy is spelled as the config keys that set it
    with pytest.raises(DataError, match=r"not sorted.*; set data.sort=true to sort the rows"):
        trading_range(part="train", **data_kwargs(cfg.data))
    cfg = apply_overrides(cfg, ["data.sort=true"])
    with pytest.raises(DataError, match=r"; set data.nan_policy=ffill to forward-fill it$"):
        trading_range(part="train", **data_kwargs(cfg.data))
    cfg = apply_overrides(cfg, ["data.nan_policy=ffill", "data.ffill_limit=0"])
    with pytest.raises(DataError, match=r"limit of 0; set data.ffill_limit=1 to forward-fill"):
        trading_range(part="train", **data_kwargs(cfg.data))
    cfg = apply_overrides(cfg, ["data.ffill_limit=1"])
    df, _lo, _hi = trading_range(part="train", **data_kwargs(cfg.data))
    assert df.index.is_monotonic_increasing and df["open"].iloc[2] == df["open"].iloc[1] == 10.5


def test_data_nan_policy_reaches_the_training_env(tmp_path):
    """`data.nan_policy: ffill` set in the config is what the training env's loader uses."""
    from riskppo import DistributionalPPO
    from riskppo.config import Config, apply_overrides
    from riskppo.envs.market.synthetic import gbm

    df = gbm(600, seed=3)
    df.index.name = "date"
    df.iloc[300, df.columns.get_loc("close")] = float("nan")
    path = tmp_path / "gap.csv"
    df.to_csv(path)
    base = Config.from_yaml(Path(__file__).parents[3] / "riskppo/configs/trading_googl.yaml")
    over = [f"data.path={path}", "env.n_envs=2", "ppo.n_steps=16", "ppo.batch_size=32"]
    over += ["env.kwargs.features=[ret_1,vol_20]", "env.kwargs.episode_length=50"]
    with pytest.raises(ValueError, match=r"NaN in column 'close'.*set data.nan_policy=ffill"):
        DistributionalPPO(config=apply_overrides(base, over))
    model = DistributionalPPO(config=apply_overrides(base, [*over, "data.nan_policy=ffill"]))
    model.close()


# ----------------------------------------------------------------------- bounded reading


def _bars(n: int) -> str:
    """``n`` valid hourly bars as CSV text (about 45 bytes a row)."""
    days = pd.date_range("1990-01-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M")
    return HEADER + "\n" + "".join(f"{d},10,11,9,10.5,10.4,100\n" for d in days)


@pytest.mark.parametrize("suffix", [".csv.gz", ".csv.bz2", ".csv.xz"])
def test_a_compressed_file_is_read_only_up_to_the_cap(tmp_path, monkeypatch, suffix):
    import bz2
    import gzip
    import lzma
    import tracemalloc

    opener = {".csv.gz": gzip.open, ".csv.bz2": bz2.open, ".csv.xz": lzma.open}[suffix]
    path = tmp_path / f"p{suffix}"
    with opener(path, "wt") as f:
        f.write(_bars(40_000))  # ≈ 1.8 MB of text in a few kB
    monkeypatch.setenv("RISKPPO_MAX_DATA_MB", "1")
    tracemalloc.start()
    try:
        err = assert_error(path, "expands to more than 1 MiB", None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(err).endswith(
        "the limit on a data file; raise it with the environment variable RISKPPO_MAX_DATA_MB "
        "(e.g. RISKPPO_MAX_DATA_MB=2)"
    )
    assert peak < 12 << 20, peak  # the whole file as a frame takes ≈ 20 MB
    monkeypatch.setenv("RISKPPO_MAX_DATA_MB", "8")
    assert len(load_ohlcv(path)) == 40_000


def test_an_uncompressed_file_over_the_cap_is_not_read(tmp_path, monkeypatch):
    import tracemalloc

    path = tmp_path / "p.csv"
    path.write_text(_bars(50_000))  # ≈ 2.2 MB
    monkeypatch.setenv("RISKPPO_MAX_DATA_MB", "1")
    tracemalloc.start()
    try:
        assert_error(path, "expands to more than 1 MiB", None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 << 10, peak  # refused by its size, before a byte is parsed
    monkeypatch.delenv("RISKPPO_MAX_DATA_MB")
    with open(path, "r+b") as f:
        f.truncate(3 << 30)  # sparse: reading it would take gigabytes
    assert_error(path, "expands to more than 256 MiB", None)  # the default cap
    monkeypatch.setenv("RISKPPO_MAX_DATA_MB", "lots")
    with pytest.raises(DataError, match="RISKPPO_MAX_DATA_MB: must be a whole number of MiB"):
        load_ohlcv(path)


def test_a_parquet_file_over_the_cap_is_not_read(tmp_path, monkeypatch):
    frame = load_ohlcv(write_csv(tmp_path, GOOD_ROWS))
    big = pd.concat([frame.reset_index()] * 40_000, ignore_index=True)  # 200k rows, ≈ 10 MB
    big.to_parquet(tmp_path / "p.parquet")
    monkeypatch.setenv("RISKPPO_MAX_DATA_MB", "1")
    assert_error(tmp_path / "p.parquet", "expands to more than 1 MiB", None)


def test_a_huge_cell_is_quoted_short(tmp_path):
    path = write_csv(tmp_path, replace_row(2, "2020-01-02,10.5,12,10," + "x" * 5_000_000 + ",1,2"))
    err = assert_error(path, "non-numeric value 'xxx", 2)
    assert len(str(err)) < 300 and "…" in str(err)
