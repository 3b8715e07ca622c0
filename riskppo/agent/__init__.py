"""The façade's room: :class:`DistributionalPPO` (SB3-like API, :mod:`.facade`), the
Stable-Baselines3 habits it keeps (:mod:`.sb3_compat`) and how it builds itself from a
checkpoint's :class:`~riskppo.persist.snapshot.Snapshot` (:mod:`.loading`).

Only this room writes the façade's attributes; other packages call its methods.
"""

from __future__ import annotations

from riskppo.agent.facade import DistributionalPPO

__all__ = ["DistributionalPPO"]
