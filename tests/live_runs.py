"""Tiny trained runs and their price files for the ``riskppo signal`` / ``riskppo paper`` tests
(tests/integration/test_live_*.py): a few hundred training steps each, so the weights are a
trained run's (not the initial ones) while the tests stay fast on two cores."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from riskppo.cli.main import load_config, preset_path
from riskppo.cli.runner import train_run
from riskppo.config import Config
from riskppo.envs.market.datasets import load_dataset
from riskppo.envs.portfolio.data import load_portfolio

TINY = [
    "total_timesteps=512",
    "env.n_envs=2",
    "ppo.n_steps=64",
    "ppo.batch_size=64",
    "ppo.bptt_len=16",
    "ppo.n_epochs=1",
    "policy.lstm_hidden_size=16",
]
PORTFOLIO_SYMBOLS = ("AAPL", "KO", "XOM")
# kind -> (preset, overrides)
RUNS: dict[str, tuple[str, list[str]]] = {
    # the default trading agent: vol-targeted long-only signal with a core, risk overlay
    "googl": ("trading_googl.yaml", []),
    # hourly FX, long and short, no overlay
    "eurusd": (
        "trading_eurusd.yaml",
        ["env.kwargs.overlay=null", "data.bars=[0, 1500, 1800, 2100]"],
    ),
    # three stocks, per-asset weights and the portfolio overlay
    "portfolio": (
        "portfolio_sp20.yaml",
        [
            f"env.kwargs.symbols=[{', '.join(PORTFOLIO_SYMBOLS)}]",
            "env.kwargs.features=[vret_1, vret_20]",
            "data.bars=[0, 1300, 1500, 1700]",
        ],
    ),
}


def run_config(kind: str) -> Config:
    preset, overrides = RUNS[kind]
    return load_config(str(preset_path(preset)), [*TINY, *overrides])


def train(kind: str, run_dir: Path) -> Path:
    """Train the tiny run ``kind`` into ``run_dir`` (it ends with its test backtest)."""
    train_run(run_config(kind), run_dir, progress_bar=False)
    return run_dir


def price_frame(kind: str) -> pd.DataFrame:
    """The run's own bars as a price file holds them: OHLCV for a single asset, a wide table of
    closes (a ``date`` column, one column per symbol) for the portfolio."""
    if kind == "portfolio":
        data = load_portfolio(dataset="sp500", symbols=list(PORTFOLIO_SYMBOLS))
        wide = pd.DataFrame({s: f["close"] for s, f in zip(data.symbols, data.frames)})
        wide.index.name = "date"
        return wide
    frame = load_dataset(kind)
    frame.index.name = "date"
    return frame


def write_bars(frame: pd.DataFrame, path: Path) -> Path:
    """``frame`` as a CSV price file (floats written exactly: shortest round-trip repr)."""
    frame.to_csv(path)
    return path
