"""Checkpoint directories: safetensors for tensors, JSON for the rest, a SHA-256 manifest.

No pickle anywhere (R-REL-1). Layout (design §1.4), format 2::

    manifest.json            files + SHA-256 + versions (riskppo.persist.files)
    config.json              the resolved Config
    state.json               spaces, n_envs, optimizer structure, and the training state's
                             JSON part under "training"
    model.safetensors        policy parameters
    optimizer.safetensors    optimizer (and VGS) state tensors
    normalizer.safetensors   observation statistics (when the env normalises observations)
    training.safetensors     the training state's tensors: return and risk statistics, open CVaR
                             segments, random generators (riskppo.persist.codec)

The training state (:class:`~riskppo.algo.state.TrainingState`) is saved whole by
:mod:`riskppo.persist.codec` and decoded on the model's initial state, so a field added to it
is checkpointed without a hand-kept list. Format-1 checkpoints are migrated on load
(:func:`migrate_v1`). Writes go to a temporary sibling directory renamed into place (R-REL-2).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes
from stable_baselines3.common.running_mean_std import RunningMeanStd

from riskppo.algo.constraints.cvar import RiskState
from riskppo.algo.returns import ReturnScaling
from riskppo.algo.state import Rngs, TrainingState, check_invariants, initial_training_state
from riskppo.config import Config, ConfigError
from riskppo.core.lagrange import PIDLagrangeState
from riskppo.core.scaling import RunningMoments
from riskppo.core.schedules import EntropyFloorState, EntropyScheduleState
from riskppo.persist.bounds import check_model_header, tensor_file_caps
from riskppo.persist.codec import StateDecodeError, decode, encode
from riskppo.persist.files import (
    FORMAT_VERSION,
    MAX_JSON_BYTES,
    CheckpointError,
    load_json,
    open_verified,
    remove_leftovers,
    replace_dir,
    resolve_latest,
    sha256,
    verify_checkpoint,
    write_error_reason,
    write_file,
    write_manifest,
)
from riskppo.persist.snapshot import Snapshot
from riskppo.safefs import ensure_real_dir, remove_entry

__all__ = [
    "CheckpointData",
    "CheckpointError",
    "Snapshot",
    "read_checkpoint",
    "read_snapshot",
    "remove_leftovers",
    "resolve_latest",
    "save_checkpoint",
    "sha256",
    "snapshot_of",
    "verify_checkpoint",
]

log = logging.getLogger("riskppo")


# ---- nested structures with tensors ↔ (JSON, flat tensor dict) ---------------------------------
def split_tensors(obj: Any, prefix: str, out: dict[str, torch.Tensor]) -> Any:
    """Replace every tensor in a nested dict/list by ``{"__tensor__": key}``; fill ``out``."""
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj.detach().cpu().contiguous().clone()
        return {"__tensor__": prefix}
    if isinstance(obj, dict):
        return {str(k): split_tensors(v, f"{prefix}/{k}", out) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [split_tensors(v, f"{prefix}/{i}", out) for i, v in enumerate(obj)]
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    raise CheckpointError(f"cannot store {type(obj).__name__} at {prefix!r} without pickle")


def join_tensors(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            key = obj["__tensor__"]
            if key not in tensors:
                raise CheckpointError(f"tensor {key!r} missing from the checkpoint")
            return tensors[key]
        return {k: join_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [join_tensors(v, tensors) for v in obj]
    return obj


def optimizer_state_from_json(obj: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Any:
    sd = join_tensors(obj, tensors)
    sd["state"] = {int(k): v for k, v in sd.get("state", {}).items()}
    return sd


# ---- spaces ------------------------------------------------------------------------------------
def space_to_json(space: spaces.Space) -> dict[str, Any]:
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist()}
    raise CheckpointError(f"cannot store space {space!r}")


def space_from_json(d: dict[str, Any]) -> spaces.Space:
    if d["type"] == "Box":
        return spaces.Box(
            np.asarray(d["low"], dtype=d["dtype"]),
            np.asarray(d["high"], dtype=d["dtype"]),
            dtype=np.dtype(d["dtype"]),
        )
    if d["type"] == "Discrete":
        return spaces.Discrete(int(d["n"]))
    if d["type"] == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(d["nvec"]))
    raise CheckpointError(f"unknown space type {d.get('type')!r}")


# ---- save --------------------------------------------------------------------------------------
def save_checkpoint(snap: Snapshot, path: Path) -> Path:
    """Write the model state ``snap`` to the directory ``path`` atomically; returns ``path``.

    Every file is fsynced, then the temporary directory, then (after the rename) its parent.
    Any write error (a full disk, ``ulimit -f``, an I/O error, raised by the OS or by
    safetensors) becomes one :class:`CheckpointError` naming ``path`` and the reason; the
    temporary directory is removed and an existing checkpoint is left as it was.
    """
    path = Path(path)
    ensure_real_dir(path.parent)
    remove_leftovers(path.parent)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        remove_entry(tmp)
    try:
        tmp.mkdir()
        _write_files(snap, tmp)
        write_manifest(tmp)
        replace_dir(tmp, path)
    except (OSError, SafetensorError) as exc:  # nothing half-written is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"cannot write checkpoint {path}: {write_error_reason(exc)}; the previous "
            "checkpoint is untouched"
        ) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def save_file(tensors: dict[str, torch.Tensor], path: str) -> None:
    """``safetensors.torch.save_file``, but written by Python: an OS error (a full disk) is an
    ``OSError`` naming the file, not a ``SafetensorError`` naming none."""
    write_file(Path(path), save_bytes(tensors))


def _write_files(snap: Snapshot, d: Path) -> None:
    save_file(
        {k: v.detach().cpu().contiguous().clone() for k, v in snap.policy.items()},
        str(d / "model.safetensors"),
    )
    opt_tensors: dict[str, torch.Tensor] = {}
    opt_json = split_tensors(snap.optimizer, "optimizer", opt_tensors)
    vgs_json = split_tensors(snap.vgs, "vgs", opt_tensors) if snap.vgs is not None else None
    save_file(opt_tensors, str(d / "optimizer.safetensors"))
    norm: dict[str, torch.Tensor] = {}
    rms = snap.obs_rms
    if rms is not None:
        norm["obs/mean"] = torch.as_tensor(np.asarray(rms.mean, dtype=np.float64))
        norm["obs/var"] = torch.as_tensor(np.asarray(rms.var, dtype=np.float64))
        norm["obs/count"] = torch.tensor(float(rms.count), dtype=torch.float64)
    save_file(norm, str(d / "normalizer.safetensors"))
    training_json, training_tensors = encode(snap.training, "training")
    save_file(training_tensors, str(d / "training.safetensors"))
    state = {
        "format_version": FORMAT_VERSION,
        "observation_space": space_to_json(snap.observation_space),
        "action_space": space_to_json(snap.action_space),
        "n_envs": snap.n_envs,
        "env_is_id": snap.env_is_id,  # trained on config env.id (not a factory / VecEnv)
        "optimizer": opt_json,
        "vgs": vgs_json,
        "training": training_json,
    }
    write_file(d / "state.json", json.dumps(state, indent=1).encode())
    write_file(d / "config.json", snap.config.to_json().encode())


# ---- load --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CheckpointData:
    """The verified contents of a checkpoint directory, parsed (no model built yet)."""

    path: Path
    config: Config
    state: dict[str, Any]
    tensors: dict[str, dict[str, torch.Tensor]]  # file name → tensors
    training: TrainingState  # decoded and validated on the model's initial state


def read_checkpoint(path: Path) -> CheckpointData:
    """Verify and parse a checkpoint directory (``CheckpointError`` on any defect).

    The JSON files come first; what they declare bounds the tensor files' sizes, checked before
    those are read, and the weights' shapes must fit the spaces before anything is built
    (:mod:`riskppo.persist.bounds`).
    """
    path = Path(path)
    with open_verified(path) as files:
        version = files.version
        state = load_json(files.read("state.json", MAX_JSON_BYTES), f"{path}: state.json")
        check_state(state, version, f"{path}: state.json")
        try:
            config = load_json(files.read("config.json", MAX_JSON_BYTES), f"{path}: config.json")
            cfg = Config.build(config)
        except (ConfigError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CheckpointError(f"{path}: config/state unreadable: {exc}") from None
        caps = tensor_file_caps(cfg, state, files)
        model = files.read("model.safetensors", caps["model.safetensors"])
        check_model_header(model, state, f"{path}:")
        raw = {n: model if n == "model.safetensors" else files.read(n, c) for n, c in caps.items()}
    tensors = {name: _load_tensors(data, name, path) for name, data in raw.items()}
    check_tensors(tensors, state, f"{path}:")
    if version == 1:
        state["training"], tensors["training.safetensors"] = migrate_v1(cfg, state, tensors, path)
    n_envs = int(state["n_envs"])
    template = initial_training_state(cfg, n_envs)
    try:
        training = decode(template, state["training"], tensors["training.safetensors"], "training")
        check_invariants(training)
    except (StateDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: state.json/training.safetensors: {exc}") from None
    return CheckpointData(path, cfg, state, tensors, training)


def read_snapshot(path: Path) -> Snapshot:
    """A checkpoint directory, verified and parsed (:func:`read_checkpoint`), as the
    :class:`Snapshot` it was written from: what ``DistributionalPPO.from_snapshot`` builds a
    model from (``CheckpointError`` on any defect)."""
    return snapshot_of(read_checkpoint(path))


def snapshot_of(ck: CheckpointData) -> Snapshot:
    """The :class:`Snapshot` a parsed checkpoint holds (tensors as read, no model built)."""
    state, opt = ck.state, ck.tensors["optimizer.safetensors"]
    try:
        return Snapshot(
            policy=dict(ck.tensors["model.safetensors"]),
            optimizer=optimizer_state_from_json(state["optimizer"], opt),
            vgs=join_tensors(state["vgs"], opt) if state.get("vgs") is not None else None,
            obs_rms=_obs_rms(ck.tensors["normalizer.safetensors"]),
            training=ck.training,
            observation_space=space_from_json(state["observation_space"]),
            action_space=space_from_json(state["action_space"]),
            n_envs=int(state["n_envs"]),
            env_is_id=bool(state.get("env_is_id", True)),
            config=ck.config,
            path=ck.path,
        )
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise CheckpointError(f"{ck.path}: state unreadable: {exc}") from None


def _obs_rms(norm: dict[str, torch.Tensor]) -> RunningMeanStd | None:
    """The observation statistics of ``normalizer.safetensors`` (``None``: none saved)."""
    if "obs/mean" not in norm:
        return None
    rms = RunningMeanStd(shape=tuple(norm["obs/mean"].shape))
    rms.mean, rms.var = norm["obs/mean"].numpy().copy(), norm["obs/var"].numpy().copy()
    rms.count = float(norm["obs/count"])
    return rms


def _load_tensors(data: bytes, name: str, path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_bytes(data)
    except (SafetensorError, ValueError) as exc:
        raise CheckpointError(f"{path}: {name} is not a valid safetensors file: {exc}") from None


# ---- schema of state.json and of the tensors ----------------------------------------------------
def _is_int(v: Any, lo: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _check_space(d: Any, what: str) -> None:
    if not isinstance(d, dict) or d.get("type") not in ("Box", "Discrete", "MultiDiscrete"):
        raise CheckpointError(f"{what}: not a Box, Discrete or MultiDiscrete space")
    try:
        space = space_from_json(d)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise CheckpointError(f"{what}: invalid space: {exc}") from None
    if isinstance(space, spaces.Box) and list(space.shape) != d.get("shape"):
        raise CheckpointError(f"{what}: shape {d.get('shape')} does not match low/high")


def check_state(state: Any, version: int, what: str) -> None:
    """``state.json`` against its schema (the training state is checked when decoded)."""

    def bad(field: str, why: str) -> CheckpointError:
        return CheckpointError(f"{what}: {field} {why}")

    if not isinstance(state, dict):
        raise bad("root", "is not an object")
    if state.get("format_version") != version:
        raise bad("format_version", f"{state.get('format_version')!r} differs from the manifest's")
    if not _is_int(state.get("n_envs"), 1):
        raise bad("n_envs", f"must be a positive integer, not {state.get('n_envs')!r}")
    if not isinstance(state.get("env_is_id", True), bool):
        raise bad("env_is_id", "must be true or false")
    if version >= 2 and not isinstance(state.get("training"), dict):
        raise bad("training", "must be an object")
    _check_space(state.get("observation_space"), f"{what}: observation_space")
    _check_space(state.get("action_space"), f"{what}: action_space")
    opt = state.get("optimizer")
    if not (
        isinstance(opt, dict)
        and isinstance(opt.get("state", {}), dict)
        and isinstance(opt.get("param_groups"), list)
        and all(isinstance(g, dict) for g in opt["param_groups"])
        and all(isinstance(k, str) and k.isdigit() for k in opt.get("state", {}))
    ):
        raise bad("optimizer", "must be an object with a 'state' mapping and 'param_groups'")
    if state.get("vgs") is not None and not isinstance(state["vgs"], dict):
        raise bad("vgs", "must be an object or null")


def check_tensors(
    tensors: dict[str, dict[str, torch.Tensor]], state: dict[str, Any], what: str
) -> None:
    """Finite weights, optimizer and observation statistics of the observation space's shape."""
    for name in ("model.safetensors", "optimizer.safetensors", "normalizer.safetensors"):
        for key, t in tensors[name].items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise CheckpointError(f"{what} {name}: {key} has non-finite values")
    norm = tensors["normalizer.safetensors"]
    if not any(k.startswith("obs/") for k in norm):
        return
    obs_shape = tuple(state["observation_space"].get("shape") or ())
    for key, want in (("obs/mean", obs_shape), ("obs/var", obs_shape), ("obs/count", ())):
        found = norm.get(key)
        if found is None or not found.is_floating_point() or tuple(found.shape) != want:
            got = "missing" if found is None else f"{found.dtype} {list(found.shape)}"
            raise CheckpointError(
                f"{what} normalizer.safetensors: {key} is {got}, not a float tensor of shape "
                f"{list(want)}"
            )
        if key != "obs/mean" and bool((found < 0).any()):
            raise CheckpointError(f"{what} normalizer.safetensors: {key} is negative")


def migrate_v1(
    cfg: Config, state: dict[str, Any], tensors: dict[str, dict[str, torch.Tensor]], path: Path
) -> tuple[Any, dict[str, torch.Tensor]]:
    """A format-1 checkpoint's counters, schedules, statistics and generators as the format-2
    ``training`` tree and tensors (then decoded and validated like any other)."""
    norm, rng = tensors["normalizer.safetensors"], tensors["rng.safetensors"]
    old = initial_training_state(cfg, int(state["n_envs"]))
    try:
        scalar: Callable[[str], float] = lambda k: float(norm[k])  # noqa: E731
        n = int(state["num_timesteps"])
        counters = dataclasses.replace(
            old.counters,
            num_timesteps=n,
            n_updates=int(state["n_updates"]),
            schedule_total=max(n, 1),
            nonfinite_skips=int(state.get("nonfinite_skips", 0)),
        )
        es = {**state["ent_state"], "history": tuple(state["ent_state"]["history"])}
        entropy = dataclasses.replace(
            old.entropy,
            coef=float(state["ent_coef"]),
            schedule=EntropyScheduleState(**es),
            floor=EntropyFloorState(**state["ent_floor"])
            if "ent_floor" in state
            else old.entropy.floor,
        )
        sample, shuffle = torch.Generator(), torch.Generator()
        sample.set_state(rng["sample"])
        shuffle.set_state(rng["shuffle"])
        scaling = ReturnScaling(
            RunningMoments(norm["ret/mean"], norm["ret/var"], norm["ret/count"]),
            scalar("ret/scale"),
            scalar("ret/shift"),
        )
        risk = old.risk
        if risk is not None and "risk/lambda" in norm:
            risk = RiskState(
                scalar("risk/lambda"),
                norm["risk/acc"],
                norm["risk/length"],
                ReturnScaling(
                    RunningMoments(norm["risk/mean"], norm["risk/var"], norm["risk/count"]),
                    scalar("risk/scale"),
                    scalar("risk/shift"),
                ),
                deque(norm["risk/recent"].tolist(), maxlen=cfg.risk.cvar_window),
                _pid_v1(norm),
            )
        new = old.replace(
            counters=counters,
            scaling=scaling,
            risk=risk,
            entropy=entropy,
            rng=Rngs(sample, shuffle),
        )
        return encode(new, "training")
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: format-1 state unreadable: {exc!r}") from None


def _pid_v1(norm: dict[str, torch.Tensor]) -> PIDLagrangeState:
    if "risk/pid" not in norm:
        return PIDLagrangeState()
    integral, smoothed, p, i, d, steps = norm["risk/pid"].tolist()
    return PIDLagrangeState(integral, smoothed, p, i, d, int(steps))
