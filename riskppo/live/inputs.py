"""A run's env on a user's price file: the run's config with its data replaced by the file.

:func:`file_env_factory` gives the factory that :func:`~riskppo.evaluation.episode.
run_agent_episode` (the backtest's stepping) makes its env with: the run's own ``env.kwargs``
(features, window, sizing, overlay with the ``risk`` limit, fees, fill) and ``data`` section (how
files are read, and whatever columns it names), with the data replaced by the file and the whole
file as the trading range — from its first bar with complete features, or from ``start``.

A single-asset run reads the file like ``data.path``; a portfolio run reads it like
``env.kwargs.table`` (long or wide), holding the run's symbols in the run's order.

``bars_per_year`` (which annualises the sizing's volatility) is pinned to the run's: its
``env.kwargs.bars_per_year``, else the figure of the run's own data (so a short file, whose
calendar says less, sizes like the backtest); only when the run's data cannot be read is it the
file's own (:func:`~riskppo.envs.market.calendar.file_bars_per_year`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import pandas as pd

from riskppo.config import Config, ConfigError
from riskppo.envs.execution.episode_range import resolve_bar
from riskppo.envs.features import DEFAULT_FEATURES, split_features
from riskppo.envs.market.errors import DataError
from riskppo.envs.market.parts import FileOptions
from riskppo.envs.portfolio.data import load_portfolio
from riskppo.envs.portfolio.env import PORTFOLIO_FEATURES
from riskppo.envs.portfolio.factory import make_portfolio_env
from riskppo.envs.registration import (
    data_kwargs,
    market_kind,
    portfolio_data_kwargs,
    resolve_overlay,
)
from riskppo.envs.trading.factory import make_trading_env, read_bars

__all__ = ["LiveInputError", "RunData", "file_env_factory", "run_data"]

# env.kwargs of a portfolio run that name its assets (replaced by the file)
_ASSET_KEYS = ("dataset", "symbols", "paths", "table")


class LiveInputError(ValueError):
    """A price file, feed or paper state that does not fit the run (one line for the CLI)."""


class RunData(NamedTuple):
    """What a run's own data fixes for its live envs."""

    kind: str  # "trading" | "portfolio"
    bars_per_year: float | None  # None: the file's own figure
    symbols: tuple[str, ...] | None  # a portfolio's assets in the run's order


def run_data(cfg: Config) -> RunData:
    """The run's kind, ``bars_per_year`` and (portfolio) symbols (module docstring); raises
    :class:`LiveInputError` for a run that is neither a trading nor a portfolio run."""
    try:
        kind = market_kind(cfg.env.id, "signal and paper").name
    except ConfigError as exc:
        raise LiveInputError(f"the run trains {cfg.env.id!r}; {exc}") from None
    kwargs = resolve_overlay(cfg.env.kwargs, cfg.risk)
    bpy = kwargs.get("bars_per_year")
    symbols = tuple(kwargs["symbols"]) if kwargs.get("symbols") else None
    if bpy is not None and (kind == "trading" or symbols is not None):
        return RunData(kind, float(bpy), symbols)
    try:  # the run's own env on its own data: what its backtest sized with
        if kind == "trading":
            env: Any = make_trading_env(**data_kwargs(cfg.data), part="train", **kwargs)
        else:
            env = make_portfolio_env(**kwargs, **portfolio_data_kwargs(cfg.data), part="train")
            symbols = tuple(env.symbols)
    except (DataError, ConfigError, OSError, ValueError):
        if kind == "portfolio" and symbols is None:
            raise LiveInputError(
                "the run's own data cannot be read, and its config names no "
                "env.kwargs.symbols: which of the file's assets it holds is unknown"
            ) from None
        return RunData(kind, None if bpy is None else float(bpy), symbols)
    return RunData(kind, float(bpy if bpy is not None else env.bars_per_year), symbols)


def _forget_read_files() -> None:
    """Drop the env factories' caches of files read by path: a feed grows under the same name,
    and a second read in this process must see its new bars. The caches already read a file
    again when its modification time or size changed; this also covers a rewrite of the same
    size within one tick of the file system's clock. The env built later in the call is cut at
    the bars read here (``data.bars``), so bars appended meanwhile do not reach it."""
    from riskppo.envs.portfolio import factory as portfolio_factory
    from riskppo.envs.trading import factory

    factory._frame.cache_clear()
    portfolio_factory._read.cache_clear()


def _file_bars(cfg: Config, path: Path, run: RunData) -> pd.DatetimeIndex:
    """The timestamps of ``path`` read as the run reads its data."""
    if run.kind == "trading":
        data = {**data_kwargs(cfg.data), "dataset": None, "symbol": None, "path": str(path)}
        return pd.DatetimeIndex(read_bars(data).index)
    options = {k: v for k, v in portfolio_data_kwargs(cfg.data).items() if k in FileOptions._fields}
    align = cfg.env.kwargs.get("align", "strict")
    return load_portfolio(table=str(path), symbols=run.symbols, align=align, **options).index


def read_feed(
    cfg: Config, path: Path, run: RunData, start: Any = None
) -> tuple[pd.DatetimeIndex, int]:
    """``(index, first)``: the bars of the price file ``path`` read as the run reads its data,
    and the row of ``start`` (a time; None: 0). Raises one line for a missing or malformed
    file or a ``--start`` outside it."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such price file; check the --data path")
    _forget_read_files()
    try:
        index = _file_bars(cfg, path, run)
    except DataError as exc:
        if exc.remedy is not None:
            raise
        fix = "fix the file or pass another --data"
        raise LiveInputError(f"{exc.render(cli=True)}; {fix}") from None
    return index, resolve_bar(index, start, 0, "--start")


def check_feed(run_dir: str | Path, data: str | Path, start: Any = None) -> None:
    """Read the price file ``data`` as the run in ``run_dir`` reads its data (its
    ``config.yaml``), before anything loads the model: a missing or malformed file, or a
    ``--start`` outside it, answers in a second instead of after the model's libraries load.
    Nothing where the run directory has no readable config (loading the run says what is
    wrong there)."""
    path = Path(run_dir) / "config.yaml"
    try:
        cfg = Config.from_yaml(path)
    except (OSError, ConfigError, ValueError):
        return
    read_feed(cfg, Path(data), run_data(cfg), start)


def file_env_factory(
    cfg: Config,
    path: str | Path,
    run: RunData,
    obs_shape: tuple[int, ...],
    start: Any = None,
) -> tuple[Callable[..., gym.Env[Any, Any]], pd.DatetimeIndex]:
    """``(factory, index)``: ``factory(**env.kwargs)`` makes the run's env over the whole file
    ``path`` (trading from ``start`` — a time, the first bar at or after it — or from the first
    bar with complete features) and checks that it observes the run's ``obs_shape``
    (:func:`check_observations`); ``index``: the file's bars."""
    path = Path(path)
    index, lo = read_feed(cfg, path, run, start)
    bars = (0, 0, min(lo, len(index) - 1), len(index))
    default = DEFAULT_FEATURES if run.kind == "trading" else PORTFOLIO_FEATURES
    features = tuple(cfg.env.kwargs.get("features") or default)

    def factory(**kwargs: Any) -> gym.Env[Any, Any]:
        env = _file_env(cfg, path, run, bars, kwargs)
        check_observations(env, obs_shape, path, features)
        return env

    return factory, index


def _file_env(
    cfg: Config, path: Path, run: RunData, bars: tuple[int, ...], kwargs: dict[str, Any]
) -> gym.Env[Any, Any]:
    """The run's env (``kwargs``: its ``env.kwargs``, overlay resolved) over rows ``bars``
    (``data.bars`` form: the test part is the trading range) of ``path``."""
    kwargs.pop("render_mode", None)
    kwargs["random_start"] = False
    if run.bars_per_year is not None:
        kwargs["bars_per_year"] = run.bars_per_year
    try:
        if run.kind == "trading":
            data = {**data_kwargs(cfg.data), "dataset": None, "symbol": None}
            return make_trading_env(
                **data | {"path": str(path), "bars": bars}, part="test", **kwargs
            )
        for key in _ASSET_KEYS:
            kwargs.pop(key, None)
        data = {**portfolio_data_kwargs(cfg.data), "bars": bars}
        return make_portfolio_env(
            table=str(path), symbols=run.symbols, part="test", **data, **kwargs
        )
    except ConfigError as exc:
        if "has no step" in str(exc) or "empty trading range" in str(exc):
            raise LiveInputError(
                f"{path}: {bars[3] - bars[2]} bars are too few for the run's warm-up: "
                f"{str(exc).split('): ', 1)[-1]}; give a file with more history"
            ) from None
        raise


def check_observations(
    env: Any, expected: tuple[int, ...], path: Path, features: Sequence[str]
) -> None:
    """Raise :class:`LiveInputError` when the file's env observes something else than the run
    (``expected``: its observation shape; ``features``: the features it asks for) — a
    close-only file leaves out the features that need high/low/volume."""
    got = tuple(env.observation_space.shape)
    if got == expected:
        return
    frame = env.df if hasattr(env, "df") else env.data.frames[0]
    columns = [str(c) for c in frame.columns]
    _, left_out = split_features(features, columns)
    if left_out:
        needed = sorted({c for cols in left_out.values() for c in cols})
        what = (
            f"lacks the columns {', '.join(needed)} that the run's features "
            f"{', '.join(left_out)} need"
        )
    else:
        what = f"gives {got[-1]} observations per bar where the run takes {expected[-1]}"
    raise LiveInputError(
        f"{path} {what} (its columns: {', '.join(columns)}); give a file with the columns of "
        "the run's data"
    )
