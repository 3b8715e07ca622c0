"""Checkpoints you can trust (R-REL-1..3): corrupted, foreign and half-written checkpoints are
refused with CheckpointError, nothing in them is executed, and resume falls back to a good one."""

from __future__ import annotations

import errno
import hashlib
import json
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch

import riskppo
from riskppo import CheckpointError, DistributionalPPO
from riskppo.config import Config
from riskppo.train import checkpoint as ckpt_mod
from riskppo.train.runner import latest_checkpoint, latest_good_checkpoint, save_run_checkpoint

SMALL = dict(n_envs=2, n_steps=16, batch_size=32, bptt_len=8, lstm_hidden_size=8, net_arch=[8])


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[DistributionalPPO, Path]:
    model = DistributionalPPO("CartPole-v1", seed=0, normalize_obs=True, **SMALL)
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
    src = ckpt_mod.find_normalizer(model.env).obs_rms
    dst = ckpt_mod.find_normalizer(loaded.env).obs_rms
    assert (src.mean == dst.mean).all() and (src.var == dst.var).all() and src.count == dst.count
    assert torch.equal(model.scaling.moments.var, loaded.scaling.moments.var)


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
    ["model.safetensors", "optimizer.safetensors", "normalizer.safetensors", "rng.safetensors",
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
    model.num_timesteps += 1  # a new checkpoint name

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
    model.num_timesteps += 1

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
    model.num_timesteps += 32
    newer = save_run_checkpoint(model, run, keep_last=3)
    (newer / "model.safetensors").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="skipping bad checkpoint"):
        assert latest_good_checkpoint(run) == older


def test_observation_shape_mismatch_is_refused(trained):
    _, path = trained
    with pytest.raises(CheckpointError, match="do not match"):
        DistributionalPPO.load(path, env="Pendulum-v1")
