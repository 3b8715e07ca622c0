"""Resource limits on configurations: how far a YAML document may expand and how
much memory a rollout buffer may take. :mod:`riskppo.config` turns each problem into a
``ConfigError``."""

from __future__ import annotations

import itertools
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


# Bounds on single fields: what the libraries and the machine can build.
MAX_SEED = 2**31 - 1  # numpy's legacy seeding takes < 2**32; the per-update/env offsets fit too
MAX_THREADS = 1024
MAX_QUANTILES = 1024  # the quantile loss is [batch, N, N]
MAX_ATOMS = 1024
MAX_LOG_STD = 20.0  # |log σ|: exp(20) ≈ 5e8, beyond any action scale
MAX_SUPPORT = 1e15  # |v_min|, |v_max| of the categorical support (float32 atoms and their squares)
MAX_CVAR_WINDOW = 1_000_000  # finished segments kept (a list in every checkpoint)
MAX_HORIZON = 10**9  # steps; compared with int64 step counters
# 16 bytes per parameter (weights, gradients, Adam's two moments): 1.6 GB at the cap.
MAX_PARAMETERS = 100_000_000


def lstm_parameters(inputs: int, hidden: int, layers: int) -> int:
    """Weights and biases of a ``torch.nn.LSTM``-shaped stack (two bias vectors per layer)."""
    first = 4 * hidden * (inputs + hidden) + 8 * hidden
    return first + (layers - 1) * (4 * hidden * 2 * hidden + 8 * hidden)


def mlp_parameters(inputs: int, sizes: list[int], outputs: int) -> int:
    """Weights and biases of ``Linear`` layers ``inputs → sizes… → outputs``."""
    dims = [inputs, *sizes, outputs]
    return sum(a * b + b for a, b in itertools.pairwise(dims))


def policy_parameters(
    hidden: int,
    layers: int,
    net_arch: list[int],
    n_lstms: int,
    n_heads: int,
    head_out: int,
    *,
    obs_size: int = 1,
    action_outputs: int = 1,
) -> int:
    """The policy's parameter count: ``n_lstms`` LSTM stacks reading ``obs_size`` values, an
    actor MLP with an ``action_outputs`` head and ``n_heads`` critic MLPs with ``head_out``
    outputs each (:class:`riskppo.nn.policy.RecurrentActorCritic`; a Box's log-std not counted)."""
    lstms = n_lstms * lstm_parameters(obs_size, hidden, layers)
    actor = mlp_parameters(hidden, net_arch, action_outputs)
    return lstms + actor + n_heads * mlp_parameters(hidden, net_arch, head_out)
