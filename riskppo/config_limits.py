"""Resource limits on configurations (issue 16): how far a YAML document may expand and how
much memory a rollout buffer may take. :mod:`riskppo.config` turns each problem into a
``ConfigError``."""

from __future__ import annotations

import os
from typing import Any

# Bounds on what a YAML config file may expand to: a "billion laughs" alias bomb of a few hundred
# bytes expands to 10^9 nodes once its aliases are followed (PyYAML shares them, pydantic does not).
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_NODES = 100_000
MAX_CONFIG_DEPTH = 64


def expansion_problem(data: Any) -> str | None:
    """Why a loaded YAML document is refused: it expands (aliases followed) to more than
    ``MAX_CONFIG_NODES`` values or nests deeper than ``MAX_CONFIG_DEPTH``; ``None`` if it is not.
    Counting stops at the limit, so a billion-laughs bomb costs microseconds."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_CONFIG_NODES:
            return (
                f"the YAML expands to more than {MAX_CONFIG_NODES} values (an alias bomb?); "
                "a config needs far fewer"
            )
        if depth > MAX_CONFIG_DEPTH:
            return f"YAML nested deeper than {MAX_CONFIG_DEPTH} levels"
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
            stack.extend((k, depth + 1) for k in node)
        elif isinstance(node, list | tuple):
            stack.extend((v, depth + 1) for v in node)
    return None


def rollout_bytes(n_steps: int, n_envs: int, obs_size: int, act_size: int = 1) -> int:
    """A lower estimate of the memory one rollout takes: float32 observations, actions and
    about 16 per-step scalars (rewards, values, log-probs, advantages, ...), twice over for the
    copies an update makes."""
    return 2 * 4 * n_steps * n_envs * (obs_size + act_size + 16)


def physical_memory() -> int | None:
    """The machine's physical RAM in bytes, or ``None`` where it cannot be told."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
