"""Gymnasium ids for riskppo's environments, so configs and the CLI can name them.

Registration is cheap (string entry points): nothing heavy is imported until an env is made. The
data config's keyword arguments for the trading factory live here for the same reason (a run
that never makes a trading env never imports pandas).

* ``riskppo/Trading-v0`` — :class:`~riskppo.envs.trading.TradingEnv` on one part (train / val /
  test) of a dataset, features warmed up on the bars before that part
  (:func:`riskppo.envs.trading.factory.make_trading_env`);
* ``riskppo/Portfolio-v0`` — :class:`~riskppo.envs.portfolio.env.PortfolioEnv` on many assets
  (:func:`riskppo.envs.portfolio.factory.make_portfolio_env`);
* ``riskppo/RiskyChoice-v0``, ``riskppo/Chain-v0`` (:mod:`riskppo.envs.tasks.risk`);
* ``riskppo/MaskedVelocityCartPole-v1``, ``riskppo/MaskedVelocityPendulum-v1``
  (:mod:`riskppo.envs.tasks.masked`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from riskppo.config import ConfigError, DataConfig, RiskConfig
from riskppo.config.data import PORTFOLIO_ID
from riskppo.config.sections import TRADING_ID

__all__ = [
    "PORTFOLIO_ID",
    "TRADING_ID",
    "data_kwargs",
    "data_label",
    "portfolio_data_kwargs",
    "register_envs",
    "resolve_overlay",
]
SIMPLE_IDS = {
    "riskppo/RiskyChoice-v0": "riskppo.envs.tasks.risk:RiskyChoiceEnv",
    "riskppo/Chain-v0": "riskppo.envs.tasks.risk:ChainEnv",
}
MASKED_IDS = {
    "riskppo/MaskedVelocityCartPole-v1": "CartPole-v1",
    "riskppo/MaskedVelocityPendulum-v1": "Pendulum-v1",
}


def data_kwargs(data: DataConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`make_trading_env` / :func:`trading_range` that the
    ``data`` config section sets (all but ``part``)."""
    return {
        "dataset": data.dataset,
        "symbol": data.symbol,
        "path": data.path,
        "split": tuple(data.split),
        "nan_policy": data.nan_policy,
        "ffill_limit": data.ffill_limit,
        "sort": data.sort,
        "timestamp_format": data.timestamp_format,
        "dayfirst": data.dayfirst,
        "adjusted": data.adjusted,
        "bars": data.bars,
        "sep": data.sep,
        "decimal": data.decimal,
        "signals": tuple(data.signals),
    }


def portfolio_data_kwargs(data: DataConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`~riskppo.envs.portfolio.factory.make_portfolio_env` that
    the ``data`` section sets: the split and how files are read (its assets are in
    ``env.kwargs``)."""
    kwargs = data_kwargs(data)
    for key in ("dataset", "symbol", "path"):
        del kwargs[key]
    return kwargs


def resolve_overlay(kwargs: Mapping[str, Any], risk: RiskConfig | None) -> dict[str, Any]:
    """``env.kwargs`` with its risk ``overlay`` (:mod:`riskppo.envs.execution.overlay`) completed:
    ``true`` or a mapping without ``limit`` / ``alpha`` / ``horizon`` takes them from the ``risk``
    section (``risk.cvar_limit``, ``risk.cvar_alpha``, ``risk.cvar_horizon``), so the overlay keeps
    the limit the constraint keeps; ``false`` / ``null`` removes it."""
    out = dict(kwargs)
    overlay = out.pop("overlay", None)
    if overlay is None or overlay is False:
        return out
    if overlay is True:
        overlay = {}
    if not isinstance(overlay, Mapping):
        raise ConfigError(f"env.kwargs.overlay={overlay!r}: must be true, false or a mapping")
    filled = dict(overlay)
    for key, field in (
        ("limit", "cvar_limit"),
        ("alpha", "cvar_alpha"),
        ("horizon", "cvar_horizon"),
    ):
        if filled.get(key) is None:
            value = None if risk is None else getattr(risk, field)
            if value is None:
                where = f"risk.{field} (or env.kwargs.overlay.{key})"
                raise ConfigError(f"env.kwargs.overlay needs a {key}: set {where}")
            filled[key] = value
    out["overlay"] = filled
    return out


def data_label(dataset: str | None, path: str | None, symbol: str | None = None) -> str:
    """The name of the data a trading env trades, for titles and messages: the file name of
    ``path`` (it wins over ``dataset``, as in :func:`make_trading_env`), else the stock of a
    multi-asset dataset (``"AAPL"``), else the bundled dataset's name in capitals (``"GOOGL"``)."""
    if path is not None:
        return Path(path).name
    if symbol is not None:
        return symbol.upper()
    return dataset.upper() if dataset else "data"


def register_envs() -> None:
    """Register riskppo's env ids with Gymnasium (idempotent)."""
    if TRADING_ID not in gym.registry:
        gym.register(TRADING_ID, entry_point="riskppo.envs.trading.factory:make_trading_env")
    if PORTFOLIO_ID not in gym.registry:
        gym.register(PORTFOLIO_ID, entry_point="riskppo.envs.portfolio.factory:make_portfolio_env")
    for name, entry in SIMPLE_IDS.items():
        if name not in gym.registry:
            gym.register(name, entry_point=entry)
    for name, base in MASKED_IDS.items():
        if name not in gym.registry:
            gym.register(
                name, entry_point="riskppo.envs.tasks.masked:make_masked", kwargs={"base_id": base}
            )


def env_spec(env_id: str) -> EnvSpec:
    """The registered spec of ``env_id``: riskppo's ids, Gymnasium's, or a user's.

    ``"module:Name-v1"`` first imports ``module`` (whose import registers ``Name-v1``), as
    ``gym.make`` does; a module that cannot be found raises ``gymnasium.error.UnregisteredEnv``
    saying so. An id that is still not registered raises Gymnasium's ``NameNotFound`` /
    ``VersionNotFound`` (also ``UnregisteredEnv``).
    """
    register_envs()
    module, colon, name = env_id.rpartition(":")
    if colon:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise gym.error.UnregisteredEnv(
                f"env id {env_id!r}: cannot import {module!r} to register {name!r} ({exc}); "
                "put the module on the Python path (PYTHONPATH) or install it"
            ) from None
    return gym.spec(name)
