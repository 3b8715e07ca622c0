"""A user's own signal column, end to end: ``riskppo train --set data.signals=[...]`` on a CSV
with an extra column (real process, real files), its one-line error for a misspelt column, and
the Python route: a DataFrame passed as ``df=`` with a registered feature, trained a few hundred
steps, evaluated, saved and loaded."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from riskppo import DistributionalPPO
from riskppo.config import ConfigError
from riskppo.envs.features import register, registered_features, unregister

SMALL = [
    "total_timesteps=256", "env.n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64",
    "policy.lstm_hidden_size=8",
]  # fmt: skip


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riskppo.cli", *args], capture_output=True, text=True, timeout=600
    )


def bars(n: int = 1000) -> pd.DataFrame:
    """``n`` business days of a random walk with a ``my_forecast`` column: the next bar's
    return plus noise, shifted so that each value is known at its own bar's close."""
    rng = np.random.default_rng(9)
    ret = rng.normal(0.0002, 0.012, n)
    close = 40.0 * np.exp(np.cumsum(ret))
    forecast = np.r_[ret[1:], 0.0] + rng.normal(0, 0.01, n)  # about bar t+1, published at t
    return pd.DataFrame(
        {
            "Date": pd.date_range("2015-01-05", periods=n, freq="B").strftime("%Y-%m-%d"),
            "Close": close,
            "my_forecast": forecast,
        }
    )


@pytest.fixture(scope="module")
def csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "prices.csv"
    bars().to_csv(path, index=False)
    return path


def sets(*items: str) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def test_cli_train_observes_the_signal_column(csv: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = sets(f"data.path={csv}", "data.signals=[my_forecast]", *SMALL)
    proc = cli("train", *args, "--run-dir", str(run))
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["data"]["signals"] == ["my_forecast"]
    report = (run / "backtest_test" / "report.html").read_text()
    assert "Signal columns (observed)" in report and "my_forecast" in report


def test_cli_misspelt_signal_is_one_line(csv: Path, tmp_path: Path) -> None:
    args = sets(f"data.path={csv}", "data.signals=[my_forcast]", *SMALL)
    proc = cli("train", *args, "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert (
        "prices.csv: signal column 'my_forcast' is not among its columns (Date, Close, "
        in (lines[0])
    )
    assert "did you mean 'my_forecast'?" in lines[0]


@pytest.fixture
def trend_feature() -> Iterator[str]:
    def trend_20(df: pd.DataFrame) -> np.ndarray:
        logc = np.log(df["close"])
        return (logc - logc.shift(20)).to_numpy()

    register("trend_20", trend_20, lookback=20)
    yield "trend_20"
    if "trend_20" in registered_features():
        unregister("trend_20")


def test_a_dataframe_and_a_registered_feature_in_python(trend_feature: str, tmp_path: Path):
    df = bars()  # a Date column, as read from a spreadsheet
    config = {
        "data": {"signals": ["my_forecast"]},
        "env": {"n_envs": 2, "kwargs": {"features": ["ret_1", trend_feature], "window": 2}},
    }
    kw = dict(n_steps=64, batch_size=64, lstm_hidden_size=8, seed=1)
    model = DistributionalPPO("riskppo/Trading-v0", df=df, config=config, **kw)
    names = model.env.get_attr("observation_names", [0])[0]
    assert names[:6] == [
        "ret_1[t-1]", "trend_20[t-1]", "my_forecast[t-1]", "ret_1[t]", "trend_20[t]",
        "my_forecast[t]",
    ]  # fmt: skip
    model.learn(256)
    assert model.num_timesteps == 256
    stats = model.evaluate(n_episodes=1, part="val")
    assert np.isfinite(stats["mean"])
    model.save(tmp_path / "ckpt")
    loaded = DistributionalPPO.load(tmp_path / "ckpt", df=df)
    assert loaded.evaluate(n_episodes=1, part="val") == stats
    again = DistributionalPPO("riskppo/Trading-v0", df=df, config=config, **kw).learn(256)
    assert again.evaluate(n_episodes=1, part="val") == stats  # deterministic for a seed


def test_df_is_refused_for_other_envs() -> None:
    with pytest.raises(ConfigError, match=r"df= \(a DataFrame of bars\) is for env "
                       "riskppo/Trading-v0, not CartPole-v1"):  # fmt: skip
        DistributionalPPO("CartPole-v1", df=bars())
