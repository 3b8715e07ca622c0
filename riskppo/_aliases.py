"""Old module paths of riskppo, kept importable for one release (docs/design.md, Layout).

The package was split into one subpackage per concern; ``riskppo.train.trainer`` is now
:mod:`riskppo.agent`, ``riskppo.config_sections`` is :mod:`riskppo.config.sections`, and so on
(:data:`MOVED`). One meta-path finder answers every old name: importing it warns with a
:class:`DeprecationWarning` that names the new path and gives the new module itself (the same
object, so ``isinstance`` checks and monkeypatches hold). ``riskppo.train`` and ``riskppo.data``
become empty packages whose old top-level names (``from riskppo.train import
DistributionalPPO``) resolve with the same warning. Nothing is read from or written to disk:
checkpoints record no module path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "OLD_PACKAGES", "install"]

MOVED: dict[str, str] = {
    "riskppo.config_base": "riskppo.config.base",
    "riskppo.config_data": "riskppo.config.data",
    "riskppo.config_limits": "riskppo.config.limits",
    "riskppo.config_sections": "riskppo.config.sections",
    "riskppo.config_training": "riskppo.config.training",
    "riskppo.config_yaml": "riskppo.config.yaml_io",
    "riskppo.data.buffer": "riskppo.algo.buffer",
    "riskppo.train.state": "riskppo.algo.state",
    "riskppo.train.loop": "riskppo.algo.loop",
    "riskppo.train.collect": "riskppo.algo.collect",
    "riskppo.train.estimate": "riskppo.algo.estimate",
    "riskppo.train.losses": "riskppo.algo.losses",
    "riskppo.train.compiled": "riskppo.algo.compiled",
    "riskppo.train.update": "riskppo.algo.update",
    "riskppo.train.bc": "riskppo.algo.bc",
    "riskppo.train.settings": "riskppo.algo.settings",
    "riskppo.train.sb3_compat": "riskppo.algo.sb3_compat",
    "riskppo.train.scaling": "riskppo.algo.returns",
    "riskppo.train.risk": "riskppo.algo.constraint",
    "riskppo.train.metrics": "riskppo.algo.log",
    "riskppo.train.predict_args": "riskppo.nn.predict_args",
    "riskppo.train.outputs": "riskppo.nn.outputs",
    "riskppo.train.checkpoint": "riskppo.persist.checkpoint",
    "riskppo.train.ckpt_io": "riskppo.persist.files",
    "riskppo.train.ckpt_bounds": "riskppo.persist.bounds",
    "riskppo.train.codec": "riskppo.persist.codec",
    "riskppo.train.snapshot": "riskppo.persist.snapshot",
    "riskppo.train.alerts": "riskppo.monitor.alerts",
    "riskppo.train.monitor": "riskppo.monitor.writer",
    "riskppo.train.progress": "riskppo.monitor.progress",
    "riskppo.train.rundir": "riskppo.runs.rundir",
    "riskppo.train.runlock": "riskppo.runs.lock",
    "riskppo.train.record": "riskppo.runs.record",
    "riskppo.train.interrupt": "riskppo.runs.interrupt",
    "riskppo.train.vec_env": "riskppo.envs.vec.build",
    "riskppo.train.bc_teacher": "riskppo.envs.teacher",
    "riskppo.train.episodes": "riskppo.envs.episodes",
    "riskppo.envs.data": "riskppo.envs.market.ohlcv",
    "riskppo.envs.data_errors": "riskppo.envs.market.errors",
    "riskppo.envs.data_limits": "riskppo.envs.market.limits",
    "riskppo.envs.datasets": "riskppo.envs.market.datasets",
    "riskppo.envs.timestamps": "riskppo.envs.market.timestamps",
    "riskppo.envs.splits": "riskppo.envs.market.splits",
    "riskppo.data.demo_types": "riskppo.demos.types",
    "riskppo.data.demo_parquet": "riskppo.demos.parquet",
    "riskppo.data.demos": "riskppo.demos.files",
    "riskppo.train.trainer": "riskppo.agent",
    "riskppo.envs.trading_batch": "riskppo.envs.trading.batch",
    "riskppo.envs.trading_vec": "riskppo.envs.trading.vec",
    "riskppo.envs.trading_args": "riskppo.envs.trading.args",
    "riskppo.envs.sizing": "riskppo.envs.trading.sizing",
    "riskppo.envs.fills": "riskppo.envs.trading.fills",
    "riskppo.envs.overlay": "riskppo.envs.trading.overlay",
    "riskppo.envs.strategies": "riskppo.envs.trading.strategies",
    "riskppo.envs.gym_vector": "riskppo.envs.vec.gym_vector",
    "riskppo.envs.native_vec": "riskppo.envs.vec.native",
    "riskppo.envs.cartpole_vec": "riskppo.envs.vec.cartpole",
    "riskppo.envs.vec_episodes": "riskppo.envs.vec.infos",
    "riskppo.envs.tensors": "riskppo.envs.vec.tensors",
    "riskppo.envs.synthetic": "riskppo.envs.market.synthetic",
    "riskppo.envs.nonstationary": "riskppo.envs.tasks.nonstationary",
    "riskppo.envs.masked": "riskppo.envs.tasks.masked",
    "riskppo.envs.risk_envs": "riskppo.envs.tasks.risk",
    "riskppo.evaluation.wf_plan": "riskppo.evaluation.walkforward.plan",
    "riskppo.evaluation.wf_analysis": "riskppo.evaluation.walkforward.analysis",
    "riskppo.evaluation.wf_report": "riskppo.evaluation.walkforward.report",
    "riskppo.evaluation.stats": "riskppo.stats",
    "riskppo.evaluation.stats_core": "riskppo.stats.core",
    "riskppo.evaluation.stats_bootstrap": "riskppo.stats.bootstrap",
    "riskppo.evaluation.stats_null": "riskppo.stats.null",
}
"""Old module → the module that holds its code now."""

OLD_PACKAGES: dict[str, dict[str, str]] = {
    "riskppo.train": {
        "CheckpointError": "riskppo.persist.checkpoint",
        "DistributionalPPO": "riskppo.agent",
    },
    "riskppo.data": {},
}
"""Old package → its re-exported names and the module each lives in now."""


def _warn(old: str, new: str) -> None:
    """One DeprecationWarning at the user's import: ``stacklevel=3`` passes over this module's
    caller, and :func:`warnings.warn` itself passes over the import machinery's frames."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=3,
    )


def lazy_names(
    package: str, module: str, names: frozenset[str] | None = None
) -> Callable[[str], Any]:
    """Module ``__getattr__`` (PEP 562) of ``package`` giving ``names`` (None: every name) of
    ``module``, imported on first use: a package that was ``module`` before keeps its names, and
    a package whose parts import one another can name its main class without building it."""

    def __getattr__(name: str) -> Any:
        if names is not None and name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return getattr(importlib.import_module(module), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__


def _package_getattr(package: ModuleType) -> Callable[[str], Any]:
    """Module ``__getattr__`` (PEP 562) of an old package: its old names, with a warning."""
    old = package.__name__

    def __getattr__(name: str) -> Any:
        module = OLD_PACKAGES[old].get(name)
        if module is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        _warn(f"{old}.{name}", f"{module}.{name}")
        value = getattr(importlib.import_module(module), name)
        setattr(package, name, value)  # warned once, not at every access
        return value

    return __getattr__


class _AliasLoader(importlib.abc.Loader):
    """Gives the new module for an old name; an old package is a fresh, empty package."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        new = MOVED.get(spec.name)
        if new is None:
            return None  # an old package: the default module object
        _warn(spec.name, new)
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__  # the import system overwrites it with the old spec
        return module

    def exec_module(self, module: ModuleType) -> None:
        if module.__name__ in OLD_PACKAGES:
            module.__getattr__ = _package_getattr(module)  # type: ignore[method-assign]
        else:
            module.__spec__ = self._specs[module.__name__]


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Answers only the old names (:data:`MOVED`, :data:`OLD_PACKAGES`)."""

    def __init__(self) -> None:
        self._loader = _AliasLoader()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED and fullname not in OLD_PACKAGES:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, self._loader, is_package=fullname in OLD_PACKAGES
        )


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): an old name never reaches a leftover
    directory of the old layout (e.g. a ``riskppo/train/__pycache__``)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
