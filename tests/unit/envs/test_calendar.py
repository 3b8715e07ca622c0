"""Bars per year read from a price file's timestamps: counted against calendars whose number
of bars a year is known by construction, kept at 252 for daily bars, named in one warning
otherwise, and the same for every part and walk-forward segment of one file."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.envs.market import calendar
from riskppo.envs.market.calendar import bars_per_year_of, file_bars_per_year
from riskppo.envs.portfolio.factory import make_portfolio_env
from riskppo.envs.trading.factory import make_trading_env


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the once-per-process warnings afresh."""
    monkeypatch.setattr(calendar, "_warned", set())


def sessions(days: pd.DatetimeIndex, hours: range) -> pd.DatetimeIndex:
    """One bar at each of ``hours`` (o'clock) of every day in ``days``."""
    return pd.DatetimeIndex([d + pd.Timedelta(hours=h) for d in days for h in hours])


def test_the_count_matches_calendars_of_known_size() -> None:
    # 24/7 hourly bars over exactly one year of 365.25 days: 8766 a year by construction
    crypto = pd.date_range("2021-01-01", periods=8767, freq="h")
    assert bars_per_year_of(crypto) == pytest.approx(8766.0, rel=1e-12)
    # 24 h on weekdays (FX): 24 × 5 bars a week, 52.18 weeks a year → 6261
    days = pd.bdate_range("2017-01-02", "2018-12-28")
    assert bars_per_year_of(sessions(days, range(24))) == pytest.approx(24 * 5 * 52.18, rel=0.01)
    # seven hourly bars a weekday session (US equities, 9:30 .. 15:30 as 9 .. 15): 7 × 260.9
    assert bars_per_year_of(sessions(days, range(9, 16))) == pytest.approx(7 * 260.9, rel=0.01)
    assert bars_per_year_of(pd.date_range("2000-01-02", periods=521, freq="W")) == (
        pytest.approx(52.18, rel=0.01)
    )
    assert bars_per_year_of(pd.date_range("2000-01-01", periods=241, freq="MS")) == (
        pytest.approx(12.0, rel=0.001)
    )
    assert bars_per_year_of(pd.DatetimeIndex(["2020-01-01"])) is None


@pytest.mark.parametrize(
    "index",
    [
        pd.bdate_range("2010-01-04", periods=2500),  # weekdays: 261 a year
        pd.bdate_range("2010-01-04", periods=2500).delete(slice(600, 700)),  # a 5-month gap
        pd.bdate_range("2010-01-04", periods=2500)[::3],  # every third weekday: 87 a year
    ],
    ids=["weekdays", "weekdays-with-a-gap", "sparse"],
)
def test_daily_bars_keep_252_silently_and_others_are_named(index: pd.DatetimeIndex) -> None:
    counted = bars_per_year_of(index)
    assert counted is not None
    daily = 168 <= counted <= 302
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = file_bars_per_year(index, "my.csv", None)
    if daily:
        assert got == 252.0 and not caught
    else:
        assert got == float(round(counted)) and len(caught) == 1


def test_a_24_7_file_is_annualised_by_its_count_with_one_warning() -> None:
    crypto = pd.date_range("2023-01-01", periods=3000, freq="h")
    with pytest.warns(UserWarning) as record:
        assert file_bars_per_year(crypto, "btc.csv", None) == 8766.0
        assert file_bars_per_year(crypto, "btc.csv", None) == 8766.0  # once per process
    assert [str(w.message) for w in record] == [
        "btc.csv has about 8,766 bars a year (3,000 bars over 125 days), not daily bars: "
        "annualising with env.kwargs.bars_per_year=8766 (set it to override)"
    ]
    daily_crypto = pd.date_range("2015-01-01", periods=2000, freq="D")
    with pytest.warns(UserWarning, match="about 365 bars a year"):
        assert file_bars_per_year(daily_crypto, "eth.csv", None) == 365.0


def test_a_set_value_is_kept_and_named_only_when_far_from_the_count() -> None:
    crypto = pd.date_range("2023-01-01", periods=3000, freq="h")
    days = pd.bdate_range("2017-01-02", "2018-12-28")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert file_bars_per_year(sessions(days, range(24)), "fx.csv", 6240) == 6240
        assert file_bars_per_year(days, "d.csv", 252) == 252
    with pytest.warns(UserWarning) as record:
        assert file_bars_per_year(crypto, "btc.csv", 252) == 252
    assert str(record[0].message) == (
        "env.kwargs.bars_per_year=252, but btc.csv has about 8,766 bars a year (3,000 bars over "
        "125 days): its annualised figures and volatility target assume the set value"
    )
    for bad in (0, -1.0, float("nan"), "hourly", True):  # passed on for the env to name
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert file_bars_per_year(crypto, "btc.csv", bad) is bad


def write_hourly(path: Path, n: int, seed: int = 0, gap_at: int | None = None) -> Path:
    """``n`` 24/7 hourly closes; with ``gap_at``, the bars from there on ten days later (an
    exchange outage), so the bars a year of a part differ from the whole file's."""
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.004, n)))
    idx = pd.date_range("2023-01-01", periods=n, freq="h")
    if gap_at is not None:
        idx = idx[:gap_at].append(idx[gap_at:] + pd.Timedelta(days=10))
    pd.DataFrame({"timestamp": idx.strftime("%Y-%m-%d %H:%M"), "close": close}).to_csv(path)
    return path


def test_every_part_and_segment_of_a_file_gets_the_whole_files_count(tmp_path: Path) -> None:
    path = str(write_hourly(tmp_path / "btc.csv", 3000, gap_at=2000))
    whole = float(round(2999 / ((2999 + 240) / 8766)))  # 8116: the outage counted in
    kw = dict(path=path, features=("ret_1", "ret_5"), episode_length=64, sizing="none")
    with pytest.warns(UserWarning, match="8,116 bars a year"):
        envs = [make_trading_env(part=p, **kw) for p in ("train", "val", "test")]
    segment = make_trading_env(part="test", bars=(0, 900, 1000, 1200), **kw)  # before the gap
    assert [e.bars_per_year for e in [*envs, segment]] == [whole] * 4
    assert make_trading_env(bars_per_year=6000, **kw).bars_per_year == 6000
    # the bundled daily dataset keeps its own value, and a user's daily file 252
    assert make_trading_env(dataset="googl", features=("ret_1",)).bars_per_year == 252


def test_a_portfolio_of_hourly_files_gets_their_count(tmp_path: Path) -> None:
    paths = [str(write_hourly(tmp_path / f"{s}.csv", 1500, seed)) for seed, s in enumerate("ab")]
    kw = dict(paths=paths, features=("ret_1",), episode_length=64, sizing="none")
    with pytest.warns(UserWarning, match="8,766 bars a year"):
        env = make_portfolio_env(part="val", **kw)
    assert env.bars_per_year == 8766.0
    assert make_portfolio_env(bars_per_year=24 * 365, **kw).bars_per_year == 8760
