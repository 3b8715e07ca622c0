"""The portfolio env factory behind the ``riskppo/Portfolio-v0`` id: one part of the split.

The assets come from ``env.kwargs`` (``dataset`` + ``symbols``, ``paths`` or ``table``,
:func:`~riskppo.envs.portfolio.data.load_portfolio`); the ``data`` section gives the split
(``data.split`` or ``data.bars``) and how files are read (``data.nan_policy``, ...). Its
``data.dataset`` / ``data.symbol`` / ``data.path`` are the single-asset env's and are not read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from riskppo.config import ConfigError
from riskppo.envs.market.calendar import file_bars_per_year
from riskppo.envs.market.datasets import DATASETS
from riskppo.envs.market.errors import data_warnings_in
from riskppo.envs.market.ohlcv import DataError, NanPolicy, default_split, index_range
from riskppo.envs.market.parts import SPLIT_PARTS, FileOptions, bar_range, file_stamps
from riskppo.envs.portfolio.data import PortfolioData, load_portfolio
from riskppo.envs.portfolio.env import PortfolioEnv

__all__ = ["make_portfolio_env", "portfolio_range"]


class _Source(NamedTuple):
    """Which assets to read and how (the keywords of :func:`load_portfolio`)."""

    dataset: str | None
    symbols: tuple[str, ...] | None
    paths: tuple[str, ...] | None
    table: str | None
    align: str
    file_options: FileOptions


def _data(source: _Source) -> PortfolioData:
    """The assets, read again only when one of their files changed (:func:`_read`)."""
    return _read(source, file_stamps(*(source.paths or ()), source.table))


@lru_cache(maxsize=4)
def _read(source: _Source, stamps: tuple[tuple[int, int], ...]) -> PortfolioData:
    """:func:`load_portfolio`, cached by ``source`` and the files' ``stamps``
    (:func:`~riskppo.envs.market.parts.file_stamps`)."""
    del stamps  # only the cache's key
    try:
        with data_warnings_in("data"):
            return load_portfolio(
                dataset=source.dataset,
                symbols=source.symbols,
                paths=source.paths,
                table=source.table,
                align=source.align,
                **source.file_options._asdict(),
            )
    except DataError as exc:  # its remedy spelled as the config keys that set it
        raise exc.in_section(_remedy_section(exc)) from None
    except ValueError as exc:
        raise ConfigError(
            f"portfolio env: {exc}; see env.kwargs dataset/symbols/paths/table"
        ) from None


def read_data(data: Mapping[str, Any], env_kwargs: Mapping[str, Any]) -> None:
    """Read the assets that ``env_kwargs`` names (``dataset`` and ``symbols``, ``paths`` or
    ``table``) with the file options of ``data`` (the ``data`` section's keywords), as the env
    will, and keep them for it; nothing where none are named (the env says so). The ``reader``
    of the portfolio kind (:class:`~riskppo.envs.registration.EnvKind`)."""
    symbols, paths = env_kwargs.get("symbols"), env_kwargs.get("paths")
    if not (env_kwargs.get("dataset") or paths or env_kwargs.get("table")):
        return
    options = FileOptions(**{k: data[k] for k in FileOptions._fields})
    _data(
        _Source(
            env_kwargs.get("dataset"),
            None if symbols is None else tuple(symbols),
            None if paths is None else tuple(paths),
            env_kwargs.get("table"),
            env_kwargs.get("align", "strict"),
            options._replace(signals=tuple(options.signals)),
        )
    )


def _remedy_section(exc: DataError) -> str:
    """Where the keys of ``exc``'s remedy live: how files are read (``sep``, ``nan_policy``, ...:
    :class:`FileOptions`) under ``data``, the rest (``align``, ...) under ``env.kwargs``."""
    keys = {k for k, _ in exc.remedy.settings} if exc.remedy else set()
    return "data" if keys and keys <= set(FileOptions._fields) else "env.kwargs"


def portfolio_range(
    data: PortfolioData, split: Sequence[float], part: str, bars: Sequence[int] | None
) -> tuple[PortfolioData, int, int]:
    """``data`` (cut at ``bars[3]`` when given) and the ``[lo, hi)`` bars of ``part``, exactly as
    :func:`~riskppo.envs.trading.factory.trading_range` splits one asset."""
    if part not in SPLIT_PARTS:
        raise ValueError(f"portfolio env: part must be one of {SPLIT_PARTS}, got {part!r}")
    first = data.frames[0]
    if bars is not None:
        cut, lo, hi = bar_range(first, tuple(bars), part, data.label)
        return data.head(len(cut)), lo, hi
    try:
        parts = default_split(first, tuple(split))
    except ValueError as exc:
        raise DataError(data.label, str(exc)) from None
    lo, hi = index_range(first, getattr(parts, part))
    return data, lo, hi


def make_portfolio_env(
    *,
    dataset: str | None = None,
    symbols: Sequence[str] | None = None,
    paths: Sequence[str] | None = None,
    table: str | None = None,
    align: str = "strict",
    split: Sequence[float] = (0.7, 0.15, 0.15),
    part: str = "train",
    bars: Sequence[int] | None = None,
    nan_policy: NanPolicy = "raise",
    ffill_limit: int = 5,
    sort: bool = False,
    timestamp_format: str | None = None,
    dayfirst: bool | None = None,
    adjusted: bool = False,
    sep: str | None = None,
    decimal: str | None = None,
    signals: Sequence[str] = (),
    **env_kwargs: Any,
) -> PortfolioEnv:
    """A :class:`PortfolioEnv` trading only inside ``part``; evaluation parts run start to end.
    ``signals`` (``data.signals``): each asset's own columns, observed per asset."""
    env_kwargs.pop("render_mode", None)  # SB3's make_vec_env asks for rgb_array; nothing to render
    if not (dataset or paths or table):
        raise ConfigError(
            "portfolio env: set env.kwargs.dataset (sp500, with optional env.kwargs.symbols), "
            "env.kwargs.paths (one file per asset) or env.kwargs.table (one long or wide file)"
        )
    file_options = FileOptions(
        nan_policy, ffill_limit, sort, timestamp_format, dayfirst, adjusted, sep, decimal,
        tuple(signals),
    )  # fmt: skip
    data = _data(
        _Source(
            dataset,
            None if symbols is None else tuple(symbols),
            None if paths is None else tuple(paths),
            table,
            align,
            file_options,
        )
    )
    if dataset and dataset in DATASETS:
        env_kwargs.setdefault("bars_per_year", DATASETS[dataset].bars_per_year)
    else:  # files: the whole aligned history's count, whatever part or segment this env trades
        env_kwargs["bars_per_year"] = file_bars_per_year(
            data.index, data.label, env_kwargs.get("bars_per_year")
        )
    data, lo, hi = portfolio_range(data, split, part, bars)
    if part != "train":
        env_kwargs.setdefault("random_start", False)
    try:
        return PortfolioEnv(data, start=lo, end=hi, signals=file_options.signals, **env_kwargs)
    except ValueError as exc:  # env.kwargs that do not fit (this part of) the data
        raise ConfigError(
            f"portfolio env on {data.label} ({part} part, bars {lo}..{hi - 1} of "
            f"{len(data.index)}): {exc}"
        ) from None
