"""What a checkpoint may cost to load, decided before its tensors are read or a model is built.

The config and the spaces in ``state.json`` fix the policy's parameter count
(:meth:`riskppo.config.Config.parameter_count`); from it follow the largest size each tensor file
may have (:func:`tensor_file_caps`), checked with ``stat`` before a byte is read. The header of
``model.safetensors`` (8-byte length + JSON, the safetensors format) must then agree with the
spaces: the first LSTM layer reads the observation's size, the action head has one output per
action value (:func:`check_model_header`). A tiny ``state.json`` declaring ``Discrete(10**9)``
or a manifest listing gigabytes of zeros is refused in milliseconds, as a ``CheckpointError``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from riskppo.config import Config
from riskppo.config.limits import MAX_PARAMETERS
from riskppo.config.yaml_io import short
from riskppo.persist.files import MAX_FILE_BYTES, CheckpointError, VerifiedFiles, load_json

__all__ = ["check_model_header", "space_values", "tensor_file_caps"]

# A tensor file may hold at most FACTOR × the float32 policy's bytes + MARGIN: the weights (x1),
# the optimizer's moments and the variance gradient scaler's statistics (x4); the rest (x1):
# observation statistics (16 bytes a value, less than the first LSTM layer's weights reading
# it) and the training state (generator states, per-env accumulators: in the margin).
FACTOR = {"optimizer.safetensors": 4}
MARGIN = 16 << 20
MAX_HEADER_BYTES = 1 << 20  # the JSON header of model.safetensors (names, dtypes, shapes)


def space_values(d: dict[str, Any]) -> int:
    """How many values a checked space of ``state.json`` has: a Box's size, a Discrete's ``n``,
    a MultiDiscrete's ``sum(nvec)`` (the action head's outputs; the observation's size)."""
    if d["type"] == "Box":
        return math.prod(int(n) for n in d["shape"])
    if d["type"] == "Discrete":
        return int(d["n"])
    return sum(int(n) for n in np.asarray(d["nvec"]).ravel())


def tensor_file_caps(cfg: Config, state: dict[str, Any], files: VerifiedFiles) -> dict[str, int]:
    """The largest size each listed tensor file may have for this config and these spaces;
    raises ``CheckpointError`` (naming the file) for a model too large to build or a file over
    its cap, before anything is read."""
    obs = space_values(state["observation_space"])
    act = space_values(state["action_space"])
    count = cfg.parameter_count(obs, act)
    if count > MAX_PARAMETERS:
        raise CheckpointError(
            f"{files.path}: state.json: observation_space of {obs} values and action_space of "
            f"{act} need a policy of {count:.3g} parameters, more than the {MAX_PARAMETERS:.0e} "
            "a model may have"
        )
    need = 4 * (count + act)  # float32 weights, a Box's log-std included
    caps: dict[str, int] = {}
    for name in files.digests:
        if not name.endswith(".safetensors"):
            continue
        caps[name] = min(MAX_FILE_BYTES, FACTOR.get(name, 1) * need + MARGIN)
        size = files.size(name)
        if size > caps[name]:
            raise CheckpointError(
                f"{files.path}: {name} is too large ({size} bytes; this config's policy of "
                f"{count} parameters allows {caps[name]})"
            )
    return caps


def check_model_header(data: bytes, state: dict[str, Any], what: str) -> None:
    """The weights in ``model.safetensors`` (``data``) fit the spaces of ``state.json``: read
    from the safetensors header only, before the tensors are decoded."""
    size = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    if not 0 < size <= min(MAX_HEADER_BYTES, len(data) - 8):
        raise CheckpointError(f"{what} model.safetensors: not a safetensors file (bad header)")
    header = load_json(data[8 : 8 + size], f"{what} model.safetensors header")
    if not isinstance(header, dict):
        raise CheckpointError(f"{what} model.safetensors: not a safetensors file (bad header)")
    want = {
        "actor_lstm.weight_ih_l0": (1, space_values(state["observation_space"]), "observation"),
        "action_head.net.weight": (0, space_values(state["action_space"]), "action"),
    }
    for key, (axis, n, kind) in want.items():
        entry = header.get(key)
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or len(shape) != 2 or shape[axis] != n:
            got = f"shape {short(shape)}" if shape is not None else "missing"
            raise CheckpointError(
                f"{what} model.safetensors: {key} is {got}; state.json's {kind} space needs "
                f"{n} {'inputs' if axis else 'outputs'}"
            )
