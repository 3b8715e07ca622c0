"""riskppo — risk-aware recurrent distributional PPO.

Public surface (docs/design.md §1): :class:`DistributionalPPO`, :mod:`riskppo.core` pure functions,
:mod:`riskppo.envs` trading environments and the ``riskppo`` command line. Heavy modules are
imported on first use (PEP 562), so ``import riskppo.envs`` does not pull in the trainer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from riskppo.version import __version__

_LAZY = {
    "DistributionalPPO": "riskppo.agent",
    "CheckpointError": "riskppo.persist.checkpoint",
    "Config": "riskppo.config",
    "ConfigError": "riskppo.config",
}

__all__ = ["CheckpointError", "Config", "ConfigError", "DistributionalPPO", "__version__"]

if TYPE_CHECKING:
    from riskppo.agent import DistributionalPPO
    from riskppo.config import Config, ConfigError
    from riskppo.persist.checkpoint import CheckpointError


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'riskppo' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
