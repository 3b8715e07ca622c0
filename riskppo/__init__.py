"""riskppo — risk-aware recurrent distributional PPO.

See SPEC §1 for the public surface: :class:`DistributionalPPO`, :mod:`riskppo.core` pure functions,
:mod:`riskppo.envs` trading environments and the ``riskppo`` command line.
"""

from __future__ import annotations

__version__ = "0.1.0"
