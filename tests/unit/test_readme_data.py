"""docs/data.md "Bring your own data" says what ``data.path`` accepts; these tests hold it to that:
every date example of its table loads, and the data length it gives for the default config is
what the default config needs. Real files, the real loader and env factory."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.cli.main import load_config
from riskppo.config import ConfigError
from riskppo.envs.market.ohlcv import load_ohlcv
from riskppo.envs.registration import resolve_overlay
from riskppo.envs.trading.factory import make_trading_env

README = Path(__file__).resolve().parents[2] / "docs" / "data.md"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("## Bring your own data", 1)[1].split("\n## ", 1)[0]


def write(path: Path, times: list[str], time_column: str = "Date") -> Path:
    n = len(times)
    frame = {time_column: times, "Open": [10.0] * n, "High": [11.0] * n, "Low": [9.0] * n}
    pd.DataFrame({**frame, "Close": [10.5] * n, "Volume": [0] * n}).to_csv(path, index=False)
    return path


def test_every_date_example_in_the_readme_loads(tmp_path: Path) -> None:
    rows = [r for r in section().splitlines() if r.startswith("| ") and "`" in r]
    examples = [e for r in rows for e in re.findall(r"`([^`]+)`", r.rsplit("|", 2)[1])]
    assert len(examples) >= 9
    for i, example in enumerate(examples):
        df = load_ohlcv(write(tmp_path / f"d{i}.csv", [example]))
        assert len(df) == 1 and df.index[0].year == 2024, example


def synthetic(path: Path, n: int) -> Path:
    close = 50.0 * np.exp(np.cumsum(np.random.default_rng(0).normal(0.0, 0.01, n)))
    idx = pd.date_range("2010-01-04", periods=n, freq="B")
    df = pd.DataFrame({"date": idx.strftime("%Y-%m-%d"), "open": close, "high": close * 1.01})
    df = df.assign(low=close * 0.99, close=close, volume=0.0)
    df.to_csv(path, index=False)
    return path


def test_the_data_length_the_readme_gives_is_what_the_default_config_needs(tmp_path) -> None:
    text = " ".join(section().split())
    warmup = int(re.search(r"features need (\d+) bars of history", text)[1])  # type: ignore[index]
    need = int(re.search(r"it needs about (\d+) bars in all", text)[1])  # type: ignore[index]
    cfg = load_config(None, [])
    kwargs = resolve_overlay(cfg.env.kwargs, cfg.risk)
    episode = kwargs["episode_length"]
    assert f"training episodes are {episode} bars" in text
    exact = min(n for n in range(100, 5000) if math.floor(0.7 * n) - 1 - warmup >= episode)
    assert abs(need - exact) <= 0.01 * exact  # "about"
    for n, fits in ((exact, True), (exact - 1, False)):
        path = str(synthetic(tmp_path / f"n{n}.csv", n))
        if fits:
            make_trading_env(dataset=None, path=path, part="train", **kwargs)
        else:
            with pytest.raises(ConfigError, match="use a shorter episode_length"):
                make_trading_env(dataset=None, path=path, part="train", **kwargs)
