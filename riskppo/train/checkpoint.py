"""Checkpoint directories: safetensors for tensors, JSON for the rest, a SHA-256 manifest.

No pickle anywhere (R-REL-1). Layout (SPEC §1.4)::

    manifest.json           files + SHA-256 + versions
    config.json             the resolved Config
    state.json              counters, schedules, spaces, optimizer structure
    model.safetensors       policy parameters
    optimizer.safetensors   optimizer state tensors
    normalizer.safetensors  return statistics (PopArt) and observation statistics
    rng.safetensors         sampling / shuffling generator states

Writes go to a temporary sibling directory that is renamed into place (R-REL-2).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import sys
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import save_file

import riskppo
from riskppo.config import Config, ConfigError
from riskppo.core.lagrange import PIDLagrangeState
from riskppo.core.scaling import RunningMoments
from riskppo.core.schedules import EntropyFloorState, EntropyScheduleState
from riskppo.envs.registration import register_envs
from riskppo.train.risk import RiskState
from riskppo.train.scaling import ReturnScaling
from riskppo.train.vec_env import find_normalizer

if TYPE_CHECKING:
    from riskppo.train.trainer import DistributionalPPO

FORMAT_VERSION = 1
REQUIRED = (
    "config.json",
    "state.json",
    "model.safetensors",
    "optimizer.safetensors",
    "normalizer.safetensors",
    "rng.safetensors",
)


log = logging.getLogger("riskppo")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, corrupted or does not fit the model."""


class _MissingFile(CheckpointError):
    """A file the manifest lists (or the manifest itself) is absent."""


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


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- save --------------------------------------------------------------------------------------
def save_checkpoint(model: DistributionalPPO, path: Path) -> Path:
    """Write ``model`` to the directory ``path`` atomically; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path.parent)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        _write_files(model, tmp)
        _write_manifest(tmp)
        _replace_dir(tmp, path)
    except OSError as exc:  # e.g. ENOSPC: nothing half-written is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"cannot write checkpoint {path}: {exc.strerror or exc}; the previous checkpoint "
            "is untouched"
        ) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. EPERM: it exists
        return True
    return True


def remove_leftovers(directory: Path) -> list[Path]:
    """Remove the temp directories (``.<name>.tmp-<pid>``, ``.<name>.old-<pid>``) of saves whose
    process is gone (killed mid-save); those of live processes are left alone. Returns them."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = _LEFTOVER.fullmatch(entry.name)
        if m is None or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    if removed:
        log.warning("%s: removed %d temp dir(s) left by killed saves", directory, len(removed))
    return removed


def resolve_latest(ckpts: Path) -> Path:
    """The checkpoint that ``ckpts/latest`` names; ``CheckpointError`` unless it is a regular
    file naming a plain sibling directory of ``ckpts`` (never a path outside the run)."""
    ckpts = Path(ckpts)
    try:
        dfd = os.open(ckpts, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        raise CheckpointError(f"{ckpts}: no checkpoint directory") from None
    try:
        name = _read_file(dfd, ckpts, "latest", 4096).decode("utf-8", "replace").strip()
        if not _plain_name(name) or name == "latest":
            raise CheckpointError(f"{ckpts}: latest names {name[:80]!r}, not a sibling checkpoint")
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            raise CheckpointError(f"{ckpts}: latest names {name!r}, which is missing") from None
    finally:
        os.close(dfd)
    if not stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{ckpts}: latest names {name!r}, not a sibling checkpoint")
    return ckpts / name


def _write_files(model: DistributionalPPO, d: Path) -> None:
    save_file(
        {k: v.detach().cpu().contiguous().clone() for k, v in model.policy.state_dict().items()},
        str(d / "model.safetensors"),
    )
    opt_tensors: dict[str, torch.Tensor] = {}
    opt_json = split_tensors(model.optimizer.state_dict(), "optimizer", opt_tensors)
    vgs_json = split_tensors(model.vgs.state_dict(), "vgs", opt_tensors) if model.vgs else None
    save_file(opt_tensors, str(d / "optimizer.safetensors"))
    norm = {
        "ret/mean": model.scaling.moments.mean.clone(),
        "ret/var": model.scaling.moments.var.clone(),
        "ret/count": model.scaling.moments.count.clone(),
        "ret/scale": torch.tensor(model.scaling.scale, dtype=torch.float64),  # PopArt σ⁻¹
        "ret/shift": torch.tensor(model.scaling.mean, dtype=torch.float64),  # PopArt μ
        **_risk_tensors(model),
    }
    vn = find_normalizer(model.env) if model.env is not None else model._obs_rms_loaded
    if vn is not None:
        rms: Any = vn.obs_rms
        norm["obs/mean"] = torch.as_tensor(np.asarray(rms.mean, dtype=np.float64))
        norm["obs/var"] = torch.as_tensor(np.asarray(rms.var, dtype=np.float64))
        norm["obs/count"] = torch.tensor(float(rms.count), dtype=torch.float64)
    save_file(norm, str(d / "normalizer.safetensors"))
    save_file(
        {"sample": model.sample_gen.get_state(), "shuffle": model.shuffle_gen.get_state()},
        str(d / "rng.safetensors"),
    )
    state = {
        "format_version": FORMAT_VERSION,
        "num_timesteps": model.num_timesteps,
        "n_updates": model.n_updates,
        "nonfinite_skips": model.nonfinite_skips,
        "ent_coef": model.ent_coef,
        "ent_state": {**model.ent_state.__dict__, "history": list(model.ent_state.history)},
        "ent_floor": model.ent_floor.__dict__,
        "observation_space": space_to_json(model.observation_space),
        "action_space": space_to_json(model.action_space),
        "n_envs": model.n_envs,
        "env_is_id": model.env_is_id,  # trained on config env.id (not a factory / VecEnv)
        "optimizer": opt_json,
        "vgs": vgs_json,
    }
    (d / "state.json").write_text(json.dumps(state, indent=1))
    (d / "config.json").write_text(model.config.to_json())


def _write_manifest(d: Path) -> None:
    files = {p.name: sha256(p) for p in sorted(d.iterdir()) if p.is_file()}
    manifest = {
        "format_version": FORMAT_VERSION,
        "riskppo_version": riskppo.__version__,
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "files": files,
    }
    (d / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for p in d.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())


def _replace_dir(tmp: Path, path: Path) -> None:
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)


# ---- load --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CheckpointData:
    """The verified contents of a checkpoint directory, parsed (no model built yet)."""

    path: Path
    config: Config
    state: dict[str, Any]
    tensors: dict[str, dict[str, torch.Tensor]]  # file name → tensors


# Limits of what the loader reads (R-REL-3): checked before a byte is read.
MAX_FILES = 64
MAX_FILE_BYTES = 4 << 30  # a tensor file
MAX_JSON_BYTES = 64 << 20  # manifest.json, config.json, state.json
MAX_JSON_DEPTH = 64
_CHUNK = 1 << 20
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_LEFTOVER = re.compile(r"\..+\.(?:tmp|old)-(\d+)")


def _plain_name(name: object) -> bool:
    """A file name without separators, ``..`` or anything else that could leave the directory."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None and ".." not in name


def _read_file(dfd: int, path: Path, name: str, cap: int) -> bytes:
    """The bytes of the regular file ``name`` in the directory open as ``dfd``, at most ``cap``.

    Symlinks, devices, FIFOs and sockets are refused before they are opened (``lstat``) and
    again after (``O_NOFOLLOW | O_NONBLOCK``, ``fstat``), so a swap in between cannot slip
    through; the size is checked before reading, the file read in bounded chunks. A missing
    file and an unreadable one give the same message.
    """
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        raise _MissingFile(f"{path}: {name} listed in the manifest is missing") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{path}: {name} is not a regular file")
    if st.st_size > cap:
        raise CheckpointError(f"{path}: {name} is too large ({st.st_size} bytes > {cap})")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(name, flags | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
    except OSError:
        raise _MissingFile(f"{path}: {name} listed in the manifest is missing") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path}: {name} is not a regular file")
        if st.st_size > cap:
            raise CheckpointError(f"{path}: {name} is too large ({st.st_size} bytes > {cap})")
        buf = bytearray()
        while len(buf) <= st.st_size:  # one chunk past the size: a file still growing fails
            block = os.read(fd, min(_CHUNK, st.st_size + 1 - len(buf)))
            if not block:
                break
            buf += block
    except OSError as exc:
        raise CheckpointError(f"{path}: {name} unreadable: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(buf) != st.st_size:
        raise CheckpointError(f"{path}: {name} is corrupted (changed while being read)")
    return bytes(buf)


def _json_depth(data: bytes) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON text (string contents ignored)."""
    text = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', data)
    arr = np.frombuffer(text, dtype=np.uint8)
    step = np.isin(arr, (0x5B, 0x7B)).astype(np.int64) - np.isin(arr, (0x5D, 0x7D))
    return int(np.cumsum(step).max(initial=0))


def load_json(data: bytes, what: str) -> Any:
    """Parse bounded JSON (size and nesting depth capped); ``CheckpointError`` on any defect."""
    if len(data) > MAX_JSON_BYTES:
        raise CheckpointError(f"{what} is too large ({len(data)} bytes > {MAX_JSON_BYTES})")
    if _json_depth(data) > MAX_JSON_DEPTH:
        raise CheckpointError(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{what} unreadable: {exc}") from None


def _read_verified(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Read the manifest and every file it lists, each checked against its SHA-256.

    The bytes that are hashed are the bytes that get parsed, so a checkpoint that is being
    written or replaced meanwhile is never read half-way: any file from another version fails
    its hash, a missing manifest or file raises (R-PBT-1, R-REL-3). Nothing in the directory is
    trusted: the manifest may only name plain files inside it (:func:`_read_file`).
    """
    try:
        dfd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        raise CheckpointError(f"{path}: not a checkpoint directory") from None
    try:
        return _read_verified_in(dfd, path)
    finally:
        os.close(dfd)


def _read_verified_in(dfd: int, path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    try:
        raw = _read_file(dfd, path, "manifest.json", MAX_JSON_BYTES)
    except _MissingFile:
        raise CheckpointError(
            f"{path}: manifest.json missing (incomplete or foreign checkpoint)"
        ) from None
    manifest = load_json(raw, f"{path}: manifest.json")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise CheckpointError(f"{path}: manifest.json unreadable: no 'files' mapping")
    if len(files) > MAX_FILES:
        raise CheckpointError(f"{path}: manifest.json lists {len(files)} files (> {MAX_FILES})")
    for name, digest in files.items():
        if not _plain_name(name) or name == "manifest.json":
            raise CheckpointError(f"{path}: manifest entry {name[:80]!r} is not a plain file name")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise CheckpointError(f"{path}: manifest entry {name!r} has no valid SHA-256")
    for name in REQUIRED:
        if name not in files:
            raise CheckpointError(f"{path}: manifest does not list required file {name}")
    contents: dict[str, bytes] = {}
    for name, digest in files.items():
        cap = MAX_JSON_BYTES if name.endswith(".json") else MAX_FILE_BYTES
        data = _read_file(dfd, path, name, cap)
        if hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointError(f"{path}: {name} is corrupted (SHA-256 mismatch)")
        contents[name] = data
    return dict(manifest), contents


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Check presence and SHA-256 of every file; returns the manifest. Raises CheckpointError."""
    return _read_verified(path)[0]


def read_checkpoint(path: Path) -> CheckpointData:
    """Verify and parse a checkpoint directory (``CheckpointError`` on any defect)."""
    path = Path(path)
    _, contents = _read_verified(path)
    state = load_json(contents["state.json"], f"{path}: state.json")
    check_state(state, f"{path}: state.json")
    try:
        cfg = Config.build(load_json(contents["config.json"], f"{path}: config.json"))
    except (ConfigError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CheckpointError(f"{path}: config/state unreadable: {exc}") from None
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    for name in REQUIRED:
        if name.endswith(".safetensors"):
            try:
                tensors[name] = load_bytes(contents[name])
            except (SafetensorError, ValueError) as exc:
                raise CheckpointError(
                    f"{path}: {name} is not a valid safetensors file: {exc}"
                ) from None
    check_tensors(tensors, state, f"{path}:")
    return CheckpointData(path, cfg, state, tensors)


# ---- schema of state.json and of the tensors ----------------------------------------------------
def _is_int(v: Any, lo: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _is_num(v: Any, *, finite: bool = True) -> bool:
    ok = isinstance(v, int | float) and not isinstance(v, bool)
    return ok and (not finite or bool(np.isfinite(v)))


def _check_space(d: Any, what: str) -> None:
    if not isinstance(d, dict) or d.get("type") not in ("Box", "Discrete", "MultiDiscrete"):
        raise CheckpointError(f"{what}: not a Box, Discrete or MultiDiscrete space")
    try:
        space = space_from_json(d)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise CheckpointError(f"{what}: invalid space: {exc}") from None
    if isinstance(space, spaces.Box) and list(space.shape) != d.get("shape"):
        raise CheckpointError(f"{what}: shape {d.get('shape')} does not match low/high")


def check_state(state: Any, what: str) -> None:
    """``state.json`` against its schema: types, ranges and the format version."""

    def bad(field: str, why: str) -> CheckpointError:
        return CheckpointError(f"{what}: {field} {why}")

    if not isinstance(state, dict):
        raise bad("root", "is not an object")
    version = state.get("format_version")
    if not _is_int(version) or version != FORMAT_VERSION:
        raise bad("format_version", f"{version!r} is not {FORMAT_VERSION} (unknown format)")
    for field in ("num_timesteps", "n_updates"):
        if not _is_int(state.get(field)):
            raise bad(field, f"must be a non-negative integer, not {state.get(field)!r}")
    if "nonfinite_skips" in state and not _is_int(state["nonfinite_skips"]):
        raise bad("nonfinite_skips", "must be a non-negative integer")
    if not _is_int(state.get("n_envs"), 1):
        raise bad("n_envs", f"must be a positive integer, not {state.get('n_envs')!r}")
    if not _is_num(state.get("ent_coef")) or state["ent_coef"] < 0:
        raise bad("ent_coef", f"must be a finite number >= 0, not {state.get('ent_coef')!r}")
    if not isinstance(state.get("env_is_id", True), bool):
        raise bad("env_is_id", "must be true or false")
    es = state.get("ent_state")
    fields = {f.name for f in dataclasses.fields(EntropyScheduleState)}
    if not isinstance(es, dict) or set(es) != fields:
        raise bad("ent_state", f"must be an object with exactly {sorted(fields)}")
    if not (
        _is_int(es["update"])
        and (es["decay_start"] is None or _is_int(es["decay_start"]))
        and isinstance(es["history"], list)
        and all(_is_num(h, finite=False) for h in es["history"])
        and isinstance(es["boosted"], bool)
        and _is_num(es["coef"], finite=False)
    ):
        raise bad("ent_state", "has a field of the wrong type or range")
    if "ent_floor" in state:
        ef = state["ent_floor"]
        fields = {f.name for f in dataclasses.fields(EntropyFloorState)}
        if not isinstance(ef, dict) or set(ef) != fields:
            raise bad("ent_floor", f"must be an object with exactly {sorted(fields)}")
        if not (_is_num(ef["log_coef"]) and _is_int(ef["below"])):
            raise bad("ent_floor", "has a field of the wrong type or range")
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


_SCALARS = ("ret/mean", "ret/var", "ret/count", "ret/scale", "ret/shift")
_RISK_SCALARS = ("risk/lambda", "risk/mean", "risk/var", "risk/count", "risk/scale", "risk/shift")


def check_tensors(
    tensors: dict[str, dict[str, torch.Tensor]], state: dict[str, Any], what: str
) -> None:
    """Finite weights, optimizer and normaliser tensors of the right shapes; valid RNG states."""
    for name in ("model.safetensors", "optimizer.safetensors", "normalizer.safetensors"):
        for key, t in tensors[name].items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise CheckpointError(f"{what} {name}: {key} has non-finite values")
    norm = tensors["normalizer.safetensors"]

    def shape(
        key: str, want: tuple[int, ...] | None, *, nonneg: bool = False, integer: bool = False
    ) -> None:
        t = norm.get(key)
        kind_ok = t is not None and (t.dtype == torch.int64 if integer else t.is_floating_point())
        if t is None or not kind_ok:
            kind = "int64" if integer else "float"
            raise CheckpointError(f"{what} normalizer.safetensors: {key} missing or not {kind}")
        if want is not None and tuple(t.shape) != want:
            raise CheckpointError(
                f"{what} normalizer.safetensors: {key} has shape {tuple(t.shape)}, not {want}"
            )
        if nonneg and bool((t < 0).any()):
            raise CheckpointError(f"{what} normalizer.safetensors: {key} is negative")

    for key in _SCALARS:
        shape(key, (), nonneg=key in ("ret/var", "ret/count"))
    if "obs/mean" in norm or "obs/var" in norm or "obs/count" in norm:
        obs_shape = tuple(state["observation_space"].get("shape") or ())
        shape("obs/mean", obs_shape)
        shape("obs/var", obs_shape, nonneg=True)
        shape("obs/count", (), nonneg=True)
    if "risk/lambda" in norm:
        for key in _RISK_SCALARS:
            shape(key, (), nonneg=key in ("risk/lambda", "risk/var", "risk/count"))
        # open CVaR segments: accumulated return (float) and length (int64, >= 0) per env
        shape("risk/acc", (int(state["n_envs"]),))
        shape("risk/length", (int(state["n_envs"]),), nonneg=True, integer=True)
        shape("risk/recent", None)
        if norm["risk/recent"].dim() != 1:
            raise CheckpointError(f"{what} normalizer.safetensors: risk/recent is not 1-D")
        if "risk/pid" in norm:
            shape("risk/pid", (6,))
    rng = tensors["rng.safetensors"]
    ref = torch.Generator().get_state()
    for key in ("sample", "shuffle"):
        g = rng.get(key)
        if g is None or g.dtype != ref.dtype or g.shape != ref.shape:
            raise CheckpointError(f"{what} rng.safetensors: {key} is not a generator state")


def load_checkpoint(
    cls: type[DistributionalPPO],
    path: Path,
    env: Any = None,
    *,
    rebuild_env: bool = True,
    **overrides: Any,
) -> DistributionalPPO:
    """Validate everything, build a model, then load the state into it.

    Without ``env``, and with ``rebuild_env``, the env is rebuilt from the checkpoint's config
    when the model was trained on a registered env id (:func:`_with_rebuilt_env`); otherwise
    the model is for ``predict`` only.
    """
    remove_leftovers(Path(path).parent)
    ck = read_checkpoint(path)
    state = ck.state
    spaces_ = (space_from_json(state["observation_space"]), space_from_json(state["action_space"]))
    if env is None and rebuild_env:
        model = _with_rebuilt_env(cls, ck, spaces_, overrides)
    else:
        model = cls(env, config=ck.config, _spaces=spaces_, **overrides)
        if env is not None and not _spaces_match(model, spaces_):
            raise CheckpointError(
                f"{path}: env spaces {model.observation_space}/{model.action_space} do not match "
                f"the checkpoint's {spaces_[0]}/{spaces_[1]}"
            )
    if env is None:
        model.env_is_id = bool(state.get("env_is_id", True))
    try:
        restore_weights(model, ck)
        restore_optimizer(model, ck)
        restore_normalizers(model, ck)
        _restore_counters(model, state, ck.tensors)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
        model.close()
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{path}: state does not fit the model: {exc}") from None
    return model


def _spaces_match(model: DistributionalPPO, spaces_: tuple[spaces.Space, spaces.Space]) -> bool:
    """Whether the model's env has the checkpoint's observation shape and action space type."""
    obs_space, act_space = spaces_
    same_obs = model.observation_space.shape == obs_space.shape
    return same_obs and type(model.action_space) is type(act_space)


def _with_rebuilt_env(
    cls: type[DistributionalPPO],
    ck: CheckpointData,
    spaces_: tuple[spaces.Space, spaces.Space],
    overrides: dict[str, Any],
) -> DistributionalPPO:
    """A model whose env is rebuilt from the checkpoint's config (``env.id``, ``env.n_envs``,
    ``seed``, ``data``, ...), announced with one log line, so that ``load(path).learn(n,
    reset_num_timesteps=False)`` continues training.

    Only for a model that was trained on an env id (not on a factory or a VecEnv) that is
    registered in this process; otherwise, or if the env cannot be made (e.g. a data file that
    is gone) or its spaces differ from the checkpoint's, the model is for ``predict`` only and
    the log line says why.
    """
    cfg = ck.config
    env_id = cfg.env.id
    register_envs()
    if not ck.state.get("env_is_id", True):
        return cls(None, config=cfg, _spaces=spaces_, **overrides)
    why = None
    if env_id not in gym.registry:
        why = "it is not registered in this process (import the module that registers it)"
    else:
        try:
            model = cls(env_id, config=cfg, _spaces=spaces_, **overrides)
        except (OSError, ValueError, ImportError, gym.error.Error) as exc:
            why = f"making it failed: {exc}"
        else:
            if _spaces_match(model, spaces_):
                log.warning(
                    "%s: no env= given; rebuilt %r (n_envs=%d, seed=%d) from the checkpoint's "
                    "config, so the model can continue training",
                    ck.path,
                    env_id,
                    model.n_envs,
                    cfg.seed,
                )
                return model
            why = f"its spaces {model.observation_space}/{model.action_space} differ from the "
            why += f"checkpoint's {spaces_[0]}/{spaces_[1]}"
            model.close()
    log.warning(
        "%s: no env= given and env %r was not rebuilt: %s; loaded for predict only, pass env= "
        "to train",
        ck.path,
        env_id,
        why,
    )
    return cls(None, config=cfg, _spaces=spaces_, **overrides)


def restore_weights(model: DistributionalPPO, ck: CheckpointData) -> None:
    """Load the policy parameters (``CheckpointError`` if they do not fit the model)."""
    try:
        model.policy.load_state_dict(ck.tensors["model.safetensors"], strict=True)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(f"{ck.path}: state does not fit the model: {exc}") from None


def restore_optimizer(model: DistributionalPPO, ck: CheckpointData) -> None:
    """Load the optimizer (and VGS) state, learning rates included, as saved."""
    opt = ck.tensors["optimizer.safetensors"]
    try:
        model.optimizer.load_state_dict(optimizer_state_from_json(ck.state["optimizer"], opt))
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(f"{ck.path}: state does not fit the model: {exc}") from None
    if model.vgs is not None and ck.state.get("vgs") is not None:
        model.vgs.load_state_dict(join_tensors(ck.state["vgs"], opt))


def restore_normalizers(model: DistributionalPPO, ck: CheckpointData) -> None:
    """Return scaling (PopArt), observation statistics and the CVaR constraint's state.

    The observation statistics go into the model's ``VecNormalize`` (if it has an env) and are
    kept for evaluation envs of a predict-only model.
    """
    norm = ck.tensors["normalizer.safetensors"]
    model.scaling = ReturnScaling(
        RunningMoments(norm["ret/mean"], norm["ret/var"], norm["ret/count"]),
        float(norm["ret/scale"]),
        float(norm["ret/shift"]),
    )
    if "obs/mean" in norm:
        from stable_baselines3.common.running_mean_std import RunningMeanStd

        rms = RunningMeanStd(shape=tuple(norm["obs/mean"].shape))
        rms.mean, rms.var = norm["obs/mean"].numpy().copy(), norm["obs/var"].numpy().copy()
        rms.count = float(norm["obs/count"])
        vn = find_normalizer(model.env) if model.env is not None else None
        if vn is not None:
            vn.obs_rms = cast(Any, rms)
        model._obs_rms_loaded = _RmsHolder(rms)
    if model.risk_state is not None and "risk/lambda" in norm:
        _restore_risk(model, norm)


def _risk_tensors(model: DistributionalPPO) -> dict[str, torch.Tensor]:
    """The CVaR constraint's state — λ, open segments, the risk head's scaling — as tensors."""
    rs = model.risk_state
    if rs is None:
        return {}
    f64 = torch.float64
    return {
        "risk/lambda": torch.tensor(rs.lam, dtype=f64),
        "risk/acc": rs.acc.clone(),
        "risk/length": rs.length.clone(),
        "risk/mean": rs.scaling.moments.mean.clone(),
        "risk/var": rs.scaling.moments.var.clone(),
        "risk/count": rs.scaling.moments.count.clone(),
        "risk/scale": torch.tensor(rs.scaling.scale, dtype=f64),
        "risk/shift": torch.tensor(rs.scaling.mean, dtype=f64),
        "risk/recent": torch.tensor(list(rs.recent), dtype=f64),
        # PID Lagrangian controller (R-RISK-4): integral, smoothed violation, last P/I/D terms,
        # step count (exact in float64)
        "risk/pid": torch.tensor(
            [rs.pid.integral, rs.pid.smoothed, rs.pid.p, rs.pid.i, rs.pid.d, rs.pid.steps],
            dtype=f64,
        ),
    }


def _restore_risk(model: DistributionalPPO, t: dict[str, torch.Tensor]) -> None:
    pid = PIDLagrangeState()
    if "risk/pid" in t:
        integral, smoothed, p, i, d, steps = t["risk/pid"].tolist()
        pid = PIDLagrangeState(integral, smoothed, p, i, d, int(steps))
    state = RiskState(
        float(t["risk/lambda"]),
        t["risk/acc"],
        t["risk/length"],
        ReturnScaling(
            RunningMoments(t["risk/mean"], t["risk/var"], t["risk/count"]),
            float(t["risk/scale"]),
            float(t["risk/shift"]),
        ),
        deque(t["risk/recent"].tolist(), maxlen=model.config.risk.cvar_window),
        pid,
    )
    model.risk_state = state


def _restore_counters(
    model: DistributionalPPO, state: dict[str, Any], tensors: dict[str, dict[str, torch.Tensor]]
) -> None:
    rng = tensors["rng.safetensors"]
    model.sample_gen.set_state(rng["sample"])
    model.shuffle_gen.set_state(rng["shuffle"])
    es = dict(state["ent_state"])
    es["history"] = tuple(es["history"])
    model.ent_state = EntropyScheduleState(**es)
    model.ent_coef = float(state["ent_coef"])
    if "ent_floor" in state:  # absent in checkpoints written before the entropy floor existed
        model.ent_floor = EntropyFloorState(**state["ent_floor"])
    model.num_timesteps = int(state["num_timesteps"])
    model.n_updates = int(state["n_updates"])
    model.nonfinite_skips = int(state.get("nonfinite_skips", 0))  # absent in older checkpoints


class _RmsHolder:
    """Observation statistics of a loaded model that has no VecNormalize (predict-only)."""

    def __init__(self, rms: Any) -> None:
        self.obs_rms = rms
