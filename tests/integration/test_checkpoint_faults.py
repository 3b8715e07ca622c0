"""Checkpoints you can trust (R-REL-1..3): corrupted, foreign and half-written checkpoints are
refused with CheckpointError, nothing in them is executed, and resume falls back to a good one."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import riskppo
from riskppo import CheckpointError, DistributionalPPO
from riskppo.config import Config
from riskppo.envs.vec.build import find_normalizer
from riskppo.persist import checkpoint as ckpt_mod
from riskppo.runs.rundir import latest_checkpoint, latest_good_checkpoint, save_run_checkpoint

SMALL = dict(n_envs=2, n_steps=16, batch_size=32, bptt_len=8, lstm_hidden_size=8, net_arch=[8])


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[DistributionalPPO, Path]:
    model = DistributionalPPO(
        "CartPole-v1", seed=0, normalize_obs=True, cvar_limit=5.0, cvar_horizon=8, **SMALL
    )
    model.learn(64)
    path = model.save(tmp_path_factory.mktemp("ck") / "good")
    return model, path


def copy(path: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(path, dst)
    return dst


def rehash(path: Path, name: str) -> None:
    """Make the manifest agree with a tampered file (an attacker could do the same)."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((path / name).read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_round_trip_keeps_normaliser_statistics(trained, tmp_path):
    model, path = trained
    loaded = DistributionalPPO.load(path, env="CartPole-v1")
    src = find_normalizer(model.env).obs_rms
    dst = find_normalizer(loaded.env).obs_rms
    assert (src.mean == dst.mean).all() and (src.var == dst.var).all() and src.count == dst.count
    assert torch.equal(model.state.scaling.moments.var, loaded.state.scaling.moments.var)


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors", "state.json"])
def test_truncated_file_is_refused(trained, tmp_path, name):
    path = copy(trained[1], tmp_path)
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=rf"{re.escape(name)}.*corrupted"):
        DistributionalPPO.load(path)


def test_bit_flip_is_refused(trained, tmp_path):
    path = copy(trained[1], tmp_path)
    data = bytearray((path / "model.safetensors").read_bytes())
    data[len(data) - 7] ^= 0x01
    (path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="SHA-256"):
        DistributionalPPO.load(path)


def test_missing_manifest_is_refused(trained, tmp_path):
    path = copy(trained[1], tmp_path)
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"manifest\.json missing"):
        DistributionalPPO.load(path)


def test_wrong_shapes_are_refused(trained, tmp_path):
    other = DistributionalPPO("CartPole-v1", seed=0, **{**SMALL, "lstm_hidden_size": 12})
    path = other.save(tmp_path / "other")
    cfg = json.loads((path / "config.json").read_text())
    cfg["policy"]["lstm_hidden_size"] = 8  # config says 8, tensors are 12 wide
    (path / "config.json").write_text(json.dumps(cfg))
    rehash(path, "config.json")
    with pytest.raises(CheckpointError, match="does not fit"):
        DistributionalPPO.load(path)


class _Payload:
    """A pickle that would create a file when unpickled."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (self.target, "pwned"))


@pytest.mark.parametrize(
    "name",
    ["model.safetensors", "optimizer.safetensors", "normalizer.safetensors", "training.safetensors",
     "state.json", "config.json", "manifest.json"],
)  # fmt: skip
def test_planted_pickle_is_never_executed(trained, tmp_path, name):
    path = copy(trained[1], tmp_path)
    marker = tmp_path / "executed.txt"
    (path / name).write_bytes(pickle.dumps(_Payload(marker)))
    if name != "manifest.json":
        rehash(path, name)
    with pytest.raises(CheckpointError):
        DistributionalPPO.load(path)
    assert not marker.exists()


def test_no_pickle_in_the_package_source():
    """R-REL-1: no pickle, cloudpickle, unsafe torch.load or numpy allow_pickle in riskppo/."""
    root = Path(riskppo.__file__).parent
    bad = re.compile(r"import pickle|cloudpickle|pickle\.load|allow_pickle=True|weights_only=False")
    offenders = []
    for file in root.rglob("*.py"):
        text = file.read_text()
        offenders += [f"{file}: {m.group()}" for m in bad.finditer(text)]
        offenders += [
            f"{file}: torch.load without weights_only=True"
            for line in text.splitlines()
            if "torch.load(" in line and "weights_only=True" not in line
        ]
    assert offenders == []


def test_crash_during_save_keeps_latest_complete(trained, tmp_path, monkeypatch):
    model, _ = trained
    run = tmp_path / "run"
    first = save_run_checkpoint(model, run, keep_last=3)
    model.state = model.state.with_counters(num_timesteps=model.num_timesteps + 1)  # new name

    calls = {"n": 0}
    real = ckpt_mod.save_file

    def dying(tensors, filename, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed while writing")
        return real(tensors, filename, *a, **k)

    monkeypatch.setattr(ckpt_mod, "save_file", dying)
    with pytest.raises(KeyboardInterrupt):
        save_run_checkpoint(model, run, keep_last=3)
    assert latest_checkpoint(run) == first
    ckpt_mod.verify_checkpoint(first)
    assert not list((run / "checkpoints").glob(".*tmp*"))  # no half-written directory left


def test_disk_full_is_a_clear_error_and_the_previous_checkpoint_survives(
    trained, tmp_path, monkeypatch
):
    model, _ = trained
    run = tmp_path / "run"
    first = save_run_checkpoint(model, run, keep_last=3)
    model.state = model.state.with_counters(num_timesteps=model.num_timesteps + 1)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt_mod, "save_file", full)
    with pytest.raises(CheckpointError, match="No space left on device"):
        save_run_checkpoint(model, run, keep_last=3)
    assert latest_checkpoint(run) == first
    DistributionalPPO.load(first)


def test_resume_falls_back_to_the_previous_good_checkpoint(trained, tmp_path):
    model, _ = trained
    run = tmp_path / "run"
    Config.build(model.config.to_dict()).to_yaml(run.mkdir() or run / "config.yaml")
    older = save_run_checkpoint(model, run, keep_last=3)
    model.state = model.state.with_counters(num_timesteps=model.num_timesteps + 32)
    newer = save_run_checkpoint(model, run, keep_last=3)
    (newer / "model.safetensors").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="skipping bad checkpoint"):
        assert latest_good_checkpoint(run) == older


def test_observation_shape_mismatch_is_refused(trained):
    _, path = trained
    with pytest.raises(CheckpointError, match="do not match"):
        DistributionalPPO.load(path, env="Pendulum-v1")


# ---- a hostile checkpoint directory (R-REL-3) ---------------------------------
def load_within(path: Path, timeout: float = 60.0) -> DistributionalPPO:
    """``DistributionalPPO.load(path)`` in a thread; fails if it has not returned in ``timeout``
    seconds (a FIFO must not hang the loader)."""
    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["model"] = DistributionalPPO.load(path)
        except BaseException as exc:
            out["exc"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"loading {path} hung"
    if "exc" in out:
        raise out["exc"]  # type: ignore[misc]
    return out["model"]  # type: ignore[return-value]


def set_manifest(path: Path, **entries: str) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"].update(entries)
    (path / "manifest.json").write_text(json.dumps(manifest))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("how", ["dotdot", "absolute", "separator"])
def test_manifest_name_outside_the_directory_is_refused(trained, tmp_path, how):
    path = copy(trained[1], tmp_path)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"a file outside the checkpoint")
    name = {"dotdot": "../outside.bin", "absolute": str(outside), "separator": "sub/x"}[how]
    if how == "separator":
        (path / "sub").mkdir()
        (path / "sub" / "x").write_bytes(outside.read_bytes())
    set_manifest(path, **{name: digest(outside)})  # the hash matches: only the name is wrong
    with pytest.raises(CheckpointError, match="not a plain file name"):
        load_within(path)


def test_messages_do_not_tell_whether_an_outside_file_exists(trained, tmp_path):
    messages = []
    for target in (tmp_path / "exists.bin", tmp_path / "absent.bin"):
        path = copy(trained[1], tmp_path / target.stem)
        (tmp_path / "exists.bin").write_bytes(b"secret")
        (path / "normalizer.safetensors").unlink()
        (path / "normalizer.safetensors").symlink_to(target)
        with pytest.raises(CheckpointError) as info:
            load_within(path)
        messages.append(str(info.value).replace(str(path), "<ckpt>"))
    assert messages[0] == messages[1]
    assert "not a regular file" in messages[0]


def test_symlinked_file_is_refused_even_with_a_matching_hash(trained, tmp_path):
    path = copy(trained[1], tmp_path)
    real = tmp_path / "model.real"
    shutil.move(path / "model.safetensors", real)
    (path / "model.safetensors").symlink_to(real)
    with pytest.raises(CheckpointError, match=r"model\.safetensors is not a regular file"):
        load_within(path)


def test_fifo_in_the_manifest_does_not_hang(trained, tmp_path):
    path = copy(trained[1], tmp_path)
    (path / "config.json").unlink()
    os.mkfifo(path / "config.json")
    with pytest.raises(CheckpointError, match=r"config\.json is not a regular file"):
        load_within(path, timeout=30)


@pytest.mark.parametrize("how", ["name", "symlink"])
def test_dev_zero_is_never_read(trained, tmp_path, how):
    path = copy(trained[1], tmp_path)
    if how == "name":
        set_manifest(path, **{"/dev/zero": "0" * 64})
        match = "not a plain file name"
    else:
        (path / "optimizer.safetensors").unlink()
        (path / "optimizer.safetensors").symlink_to("/dev/zero")
        match = "not a regular file"
    with pytest.raises(CheckpointError, match=match):
        load_within(path, timeout=30)


def test_huge_sparse_file_is_refused_before_reading(trained, tmp_path):
    path = copy(trained[1], tmp_path)
    with open(path / "model.safetensors", "r+b") as f:
        f.truncate(64 << 30)  # 64 GiB, sparse: no disk used, would exhaust memory if read
    with pytest.raises(CheckpointError, match=r"model\.safetensors is too large"):
        load_within(path, timeout=30)


@pytest.mark.parametrize("name", ["state.json", "manifest.json", "config.json"])
def test_deeply_nested_json_is_refused(trained, tmp_path, name):
    path = copy(trained[1], tmp_path)
    (path / name).write_text("[" * 200_000 + "]" * 200_000)
    if name != "manifest.json":
        rehash(path, name)
    with pytest.raises(CheckpointError, match="nested too deeply"):
        load_within(path)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("training.counters.num_timesteps", "64"),
        ("training.counters.num_timesteps", -1),
        ("training.counters.n_updates", -5),
        ("training.counters.n_updates", 1.5),
        ("training.counters.nonfinite_skips", -1),
        ("training.counters.extra", 1),
        ("format_version", 99),
        ("format_version", True),
        ("training.entropy.coef", "x"),
        ("training.entropy.coef", float("nan")),
        ("training.entropy.schedule", 5),
        ("training.entropy.schedule", {"update": 1}),
        ("training.entropy.floor", {"log_coef": "a", "below": 0}),
        ("training.scaling.scale", -1.0),
        ("training.rng.sample", {"tensor": "training/rng/sample"}),
        ("training.episodes.returns", ["a"]),
        ("training.risk", None),
        ("training", []),
        ("observation_space", []),
        ("observation_space", {"type": "Box", "low": 1, "high": 2, "shape": [1], "dtype": "x"}),
        ("action_space", {"type": "Discrete", "n": "two"}),
        ("action_space", {"type": "Tuple"}),
        ("n_envs", 0),
        ("n_envs", 3),  # the open CVaR segments are per env: [2] tensors do not fit 3 envs
        ("env_is_id", "yes"),
        ("optimizer", "adam"),
        ("optimizer", {"state": [], "param_groups": []}),
        ("vgs", 3),
        (None, None),  # the whole state.json a list
    ],
)
def test_state_json_is_schema_checked(trained, tmp_path, field, value):
    path = copy(trained[1], tmp_path)
    state = json.loads((path / "state.json").read_text())
    if field is None:
        state = []
    else:
        *parents, leaf = field.split(".")
        node = state
        for key in parents:
            node = node[key]
        node[leaf] = value
    (path / "state.json").write_text(json.dumps(state))
    rehash(path, "state.json")
    with pytest.raises(CheckpointError, match=r"state\.json"):
        load_within(path)


def retensor(path: Path, name: str, key: str, value: torch.Tensor | None) -> None:
    tensors = load_file(path / name)
    if value is None:
        tensors[key] = torch.full_like(tensors[key], float("nan"))
    else:
        tensors[key] = value
    save_file(tensors, str(path / name))
    rehash(path, name)


@pytest.mark.parametrize(
    ("name", "key", "value", "match"),
    [
        ("model.safetensors", None, None, "non-finite"),
        ("normalizer.safetensors", "obs/mean", None, "non-finite"),
        ("training.safetensors", "training/scaling/moments/var", None, "non-finite"),
        ("normalizer.safetensors", "obs/mean", torch.zeros(7, dtype=torch.float64), "shape"),
        ("normalizer.safetensors", "obs/var", -torch.ones(4, dtype=torch.float64), "negative"),
        ("training.safetensors", "training/scaling/moments/mean", torch.zeros(3), "expected"),
        ("training.safetensors", "training/scaling/moments/count", -torch.ones(()), "expected"),
        (
            "training.safetensors",
            "training/scaling/moments/count",
            -torch.ones((), dtype=torch.float64),
            "negative",
        ),
        (
            "training.safetensors",
            "training/risk/length",
            -torch.ones(2, dtype=torch.long),
            "negative",
        ),
        (
            "training.safetensors",
            "training/rng/sample",
            torch.zeros(3, dtype=torch.uint8),
            "generator",
        ),
    ],
)
def test_bad_tensors_are_refused(trained, tmp_path, name, key, value, match):
    path = copy(trained[1], tmp_path)
    if key is None:  # the first weight
        key = next(iter(load_file(path / name)))
    retensor(path, name, key, value)
    with pytest.raises(CheckpointError, match=match):
        load_within(path)


@pytest.mark.parametrize("pointer", ["../../other/checkpoints/ckpt-1", "ABS", "ckpt-1/..", ""])
def test_latest_may_only_name_a_sibling_checkpoint(trained, tmp_path, pointer):
    model, _ = trained
    run, other = tmp_path / "run", tmp_path / "other"
    save_run_checkpoint(model, run, keep_last=3)
    foreign = save_run_checkpoint(model, other, keep_last=3)
    ckpts = run / "checkpoints"
    (ckpts / "latest").write_text(str(foreign) if pointer == "ABS" else pointer)
    with pytest.raises(CheckpointError, match="latest"):
        ckpt_mod.resolve_latest(ckpts)
    (ckpts / "latest").unlink()
    (ckpts / "latest").symlink_to(other / "checkpoints" / "latest")  # a symlinked pointer
    with pytest.raises(CheckpointError, match="latest"):
        ckpt_mod.resolve_latest(ckpts)


def test_latest_naming_a_sibling_resolves(trained, tmp_path):
    run = tmp_path / "run"
    saved = save_run_checkpoint(trained[0], run, keep_last=3)
    assert ckpt_mod.resolve_latest(run / "checkpoints") == saved


_KILLED_MID_SAVE = """
import sys, time
from riskppo import DistributionalPPO
from riskppo.persist import checkpoint as ck
real, n = ck.save_file, [0]
def slow(*a, **k):
    real(*a, **k)
    n[0] += 1
    if n[0] == 2:
        print("mid-save", flush=True)
        time.sleep(600)
ck.save_file = slow
m = DistributionalPPO("CartPole-v1", seed=0, n_envs=2, n_steps=16, batch_size=32, bptt_len=8,
                      lstm_hidden_size=8, net_arch=[8])
m.save(sys.argv[1])
"""


@pytest.fixture(scope="module")
def killed_mid_save(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the temp directory of a save whose process was SIGKILLed."""
    d = tmp_path_factory.mktemp("killed")
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MID_SAVE, str(d / "ckpt-000000000064")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "mid-save"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert [p.name for p in d.iterdir()] == [f".ckpt-000000000064.tmp-{proc.pid}"]
    return d


def test_temp_dir_of_a_killed_save_is_removed_at_the_next_save(trained, killed_mid_save, tmp_path):
    d = tmp_path / "ckpts"
    shutil.copytree(killed_mid_save, d)
    dead = next(d.iterdir()).name.rsplit("-", 1)[1]
    (d / f".latest.tmp-{dead}-0a1b2c3d").write_text("ckpt-0")  # an atomic write it never renamed
    trained[0].save(d / "ckpt-000000000128")
    assert sorted(p.name for p in d.iterdir()) == ["ckpt-000000000128"]


def test_temp_dir_of_a_killed_save_is_removed_at_resume(trained, killed_mid_save, tmp_path):
    d = tmp_path / "ckpts"
    shutil.copytree(killed_mid_save, d)
    shutil.copytree(trained[1], d / "ckpt-000000000064")
    DistributionalPPO.load(d / "ckpt-000000000064")
    assert sorted(p.name for p in d.iterdir()) == ["ckpt-000000000064"]


def test_runner_follows_latest_only_to_a_sibling_checkpoint(tmp_path):
    """eval/--resume read `latest` through resolve_latest: a pointer outside the run is refused."""
    from riskppo.runs.rundir import latest_checkpoint

    other = tmp_path / "other_run" / "checkpoints" / "ckpt-1"
    other.mkdir(parents=True)
    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    (ckpts / "latest").write_text("../../other_run/checkpoints/ckpt-1")
    with pytest.raises(CheckpointError):
        latest_checkpoint(tmp_path / "run")
    (ckpts / "ckpt-2").mkdir()
    (ckpts / "latest").write_text("ckpt-2")
    assert latest_checkpoint(tmp_path / "run") == ckpts / "ckpt-2"


def restate(path: Path, **fields: object) -> None:
    """Set fields of state.json and make the manifest agree."""
    state = json.loads((path / "state.json").read_text())
    state.update(fields)
    (path / "state.json").write_text(json.dumps(state))
    rehash(path, "state.json")


def timed_load(path: Path) -> tuple[str, float]:
    """The CheckpointError of loading ``path`` and the seconds it took."""
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        DistributionalPPO.load(path, env=None, rebuild_env=False)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    return message, time.perf_counter() - start


@pytest.mark.parametrize("n", [50_000, 50_000_000, 10**12])
def test_an_action_space_the_weights_do_not_have_is_refused_before_building(trained, tmp_path, n):
    path = copy(trained[1], tmp_path)
    restate(path, action_space={"type": "Discrete", "n": n})
    message, seconds = timed_load(path)
    assert seconds < 1.0
    if n == 50_000:  # buildable, but not these weights: the header tells
        assert message.endswith(
            "model.safetensors: action_head.net.weight is shape [2, 8]; state.json's action "
            "space needs 50000 outputs"
        )
    else:  # no model this large may be built
        assert f"action_space of {n} need a policy of" in message


def test_an_observation_space_the_weights_do_not_have_is_refused(trained, tmp_path):
    path = copy(trained[1], tmp_path)
    box = {"type": "Box", "low": [-1.0] * 6, "high": [1.0] * 6, "shape": [6], "dtype": "float32"}
    restate(path, observation_space=box)
    message, _ = timed_load(path)
    assert "actor_lstm.weight_ih_l0 is shape [32, 4]; state.json's observation space needs 6" in (
        message
    )


def test_a_file_the_format_does_not_have_is_refused_unread(trained, tmp_path):
    path = copy(trained[1], tmp_path)
    with open(path / "zeros.bin", "wb") as f:
        f.truncate(3 << 30)  # sparse: no disk; its hash is never computed
    set_manifest(path, **{"zeros.bin": hashlib.sha256(b"").hexdigest()})
    message, seconds = timed_load(path)
    assert "manifest lists 'zeros.bin', which is not a checkpoint file" in message
    assert seconds < 1.0


@pytest.mark.parametrize("name", ["optimizer.safetensors", "normalizer.safetensors"])
def test_a_tensor_file_larger_than_the_config_needs_is_refused_unread(trained, tmp_path, name):
    path = copy(trained[1], tmp_path)
    with open(path / name, "r+b") as f:
        f.truncate(3 << 30)  # sparse zeros under the absolute cap, far over this model's need
    message, seconds = timed_load(path)
    assert re.search(
        rf"{re.escape(name)} is too large \(3221225472 bytes; this config's policy "
        r"of \d+ parameters allows \d+\)",
        message,
    ), message
    assert seconds < 1.0
