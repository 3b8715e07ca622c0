"""riskppo — risk-aware recurrent distributional PPO.

See SPEC §1 for the public surface: :class:`DistributionalPPO`, :mod:`riskppo.core` pure functions,
:mod:`riskppo.envs` trading environments and the ``riskppo`` command line.
"""

from __future__ import annotations

__version__ = "0.1.0"

from riskppo.config import Config, ConfigError  # noqa: E402
from riskppo.train.checkpoint import CheckpointError  # noqa: E402
from riskppo.train.trainer import DistributionalPPO  # noqa: E402

__all__ = ["CheckpointError", "Config", "ConfigError", "DistributionalPPO", "__version__"]
