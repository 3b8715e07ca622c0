"""Gymnasium ids for riskppo's environments, so configs and the CLI can name them, and the
registry of env kinds: one :class:`EnvKind` record per bar env (its factory, env class, batched
form, accepted keywords, the data section's keywords and the evaluation hooks the evaluation
layer registers on it), which the rest of the library asks instead of comparing env ids.

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

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from riskppo.config import ConfigError, DataConfig, RiskConfig
from riskppo.config.data import PORTFOLIO_ID
from riskppo.config.sections import TRADING_ID

__all__ = [
    "KINDS",
    "PORTFOLIO_ID",
    "TRADING_ID",
    "EnvKind",
    "data_kwargs",
    "data_label",
    "env_kind",
    "market_kind",
    "portfolio_data_kwargs",
    "register_envs",
    "register_hooks",
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


@dataclass(frozen=True)
class EnvKind:
    """One kind of bar env, as the library uses it (entry points are ``"module:name"`` strings,
    imported on use, so the registry imports no env and no pandas):

    * ``id``: its Gymnasium id; ``name``: ``"trading"`` / ``"portfolio"`` in messages and files;
    * ``factory``: the function ``gym.make(id, **kwargs)`` calls (one part of the data);
      ``env_class``: the env it builds; ``frame``: the class's arguments the factory sets itself
      (the bars and the range), not ``env.kwargs``;
    * ``batched``: a ``VecEnv`` class taking ``(env, n_envs)`` that steps ``n_envs`` copies of one
      env as array operations, or ``None``;
    * ``data_kwargs``: the factory's keywords that the ``data`` section sets;
    * ``reader``: ``reader(data_kwargs, env_kwargs)`` reads the data a config names as the
      factory will and keeps it for the factory (:meth:`read_data`);
    * ``single_asset``: the data section names its one asset (file or dataset and symbol), so
      runs are labelled by it, splits are periods of it and its per-bar backtest applies;
    * ``hooks``: what evaluation does with a run of the kind (``rows``, ``backtest``,
      ``walkforward_cell``, ``walkforward_outputs``, ``backtest_run``),
      registered from above by :mod:`riskppo.evaluation.kinds` and
      :mod:`riskppo.walkforward.kinds` (:func:`register_hooks`); :meth:`hook` looks one up.
    """

    id: str
    name: str
    factory: str
    env_class: str
    frame: frozenset[str]
    batched: str | None
    data_kwargs: Callable[[DataConfig], dict[str, Any]]
    reader: str
    single_asset: bool
    hooks: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def load(self, entry: str) -> Any:
        """The object of entry point ``entry`` (``"module:name"``)."""
        module, _, name = entry.partition(":")
        return getattr(importlib.import_module(module), name)

    def read_data(self, data: DataConfig, env_kwargs: Mapping[str, Any]) -> None:
        """Read the data of a config's ``data`` section and ``env.kwargs`` as the factory
        will, and keep it for the env built later in this process: a missing or malformed file
        raises its one-line error here, before the model's libraries load."""
        self.load(self.reader)(self.data_kwargs(data), env_kwargs)

    def accepted_kwargs(self) -> frozenset[str]:
        """The keywords ``env.kwargs`` may set: the factory's and the env class's (the shared
        ones of :class:`~riskppo.envs.execution.spec.BarSpec` among them), less those the
        factory sets from the data."""
        own = named_parameters(self.load(self.env_class)) - self.frame
        return named_parameters(self.load(self.factory)) | own

    def hook(self, name: str) -> Callable[..., Any]:
        """Evaluation hook ``name`` of this kind (an entry point is imported here);
        ``ConfigError`` if the kind has none."""
        hook = self.hooks.get(name)
        if hook is None:
            raise ConfigError(f"{name.replace('_', ' ')} is not available for {self.id}")
        return self.load(hook) if isinstance(hook, str) else hook


KINDS: dict[str, EnvKind] = {
    kind.id: kind
    for kind in (
        EnvKind(
            id=TRADING_ID,
            name="trading",
            factory="riskppo.envs.trading.factory:make_trading_env",
            env_class="riskppo.envs.trading.env:TradingEnv",
            frame=frozenset({"df", "start", "end"}),
            batched="riskppo.envs.trading.vec:BatchedTradingVecEnv",
            data_kwargs=data_kwargs,
            reader="riskppo.envs.trading.factory:read_data",
            single_asset=True,
        ),
        EnvKind(
            id=PORTFOLIO_ID,
            name="portfolio",
            factory="riskppo.envs.portfolio.factory:make_portfolio_env",
            env_class="riskppo.envs.portfolio.env:PortfolioEnv",
            frame=frozenset({"data", "start", "end"}),
            batched=None,
            data_kwargs=portfolio_data_kwargs,
            reader="riskppo.envs.portfolio.factory:read_data",
            single_asset=False,
        ),
    )
}
"""The bar env kinds by id."""


def env_kind(env_id: Any) -> EnvKind | None:
    """The kind record of env id ``env_id``, or ``None`` (another id, a factory, a VecEnv)."""
    return KINDS.get(env_id) if isinstance(env_id, str) else None


def market_kind(env_id: Any, what: str, *, single_asset: bool = False) -> EnvKind:
    """The kind of ``env_id`` for ``what`` (``"walk-forward"``, ...), which needs a bar env
    (and with ``single_asset``, one trading a single asset); ``ConfigError`` naming those that
    fit otherwise."""
    kind = env_kind(env_id)
    if kind is None or (single_asset and not kind.single_asset):
        fits = [k.id for k in KINDS.values() if k.single_asset or not single_asset]
        names = " or ".join(repr(i) for i in fits)
        raise ConfigError(f"{what} needs a run on {names}, not {env_id!r}")
    return kind


def register_hooks(env_id: str, **hooks: Any) -> None:
    """Set evaluation hooks (callables or ``"module:name"`` entry points) on the kind of
    ``env_id``: the evaluation layer registers them from above, the library looks them up with
    :meth:`EnvKind.hook`."""
    KINDS[env_id].hooks.update(hooks)


def named_parameters(fn: Callable[..., Any]) -> frozenset[str]:
    """The names ``fn`` takes as keywords (``frozenset()`` for a builtin without a signature)."""
    try:
        params: Iterable[inspect.Parameter] = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in params if p.kind in kinds)


def register_envs() -> None:
    """Register riskppo's env ids with Gymnasium (idempotent)."""
    for kind in KINDS.values():
        if kind.id not in gym.registry:
            gym.register(kind.id, entry_point=kind.factory)
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
