"""What riskppo's own vec env adds to each step's infos, for vec envs that step all envs at once.

riskppo's in-process vec env (SB3's ``DummyVecEnv`` semantics, each env in a ``Monitor``) marks
every step's info with ``"TimeLimit.truncated"`` (truncated and not terminated); the info of an
episode's last step also carries ``"terminal_observation"`` (the observation the episode ended
on, the returned one being the next episode's first) and ``"episode"`` (``r``: the return
rounded to 6 decimals, ``l``: the length, ``t``: seconds since the vec env was made), as SB3's
``Monitor`` writes it. :class:`EpisodeTally` adds the same keys, so the trainer reads a batched
env's infos like its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

__all__ = ["EpisodeTally", "env_indices"]


def env_indices(indices: int | Iterable[int] | None, n: int) -> list[int]:
    """The env indices a ``VecEnv`` method's ``indices`` argument names (``None``: all ``n``)."""
    if indices is None:
        return list(range(n))
    return [indices] if isinstance(indices, int) else list(indices)


class EpisodeTally:
    """Per-env rewards of the episodes under way (``n`` envs)."""

    def __init__(self, n: int) -> None:
        self.t_start = time.time()
        self._rewards: list[list[float]] = [[] for _ in range(n)]

    def reset(self, i: int) -> None:
        """Env ``i`` starts a new episode."""
        self._rewards[i] = []

    def record(
        self,
        rewards: list[float],
        terminated: list[bool],
        truncated: list[bool],
        infos: list[dict[str, Any]],
    ) -> None:
        """Mark one step's ``infos`` (``n`` rewards and flags). The ``terminal_observation`` of
        each env whose episode ended is the caller's to add (it resets the env)."""
        for i, (r, term, trunc) in enumerate(zip(rewards, terminated, truncated, strict=True)):
            ep = self._rewards[i]
            ep.append(r)
            info = infos[i]
            info["TimeLimit.truncated"] = trunc and not term
            if term or trunc:
                # sum() of the list, as Monitor does: the same rounding in every Python version
                elapsed = round(time.time() - self.t_start, 6)
                info["episode"] = {"r": round(sum(ep), 6), "l": len(ep), "t": elapsed}
                self._rewards[i] = []
