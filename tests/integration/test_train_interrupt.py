"""``riskppo train`` stopped by Ctrl-C (SIGINT) or SIGTERM: it trains on to the next periodic
checkpoint, saves it, prints the command that resumes it, and the resumed run ends bit-identical
to a run that never stopped. A second signal stops at once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from riskppo import cli
from riskppo.runs.rundir import latest_checkpoint

CONFIG = {
    "seed": 3,
    "total_timesteps": 1000,  # rounded up to 1,024: 32 updates of 2 envs x 16 steps
    "env": {"id": "riskppo/MaskedVelocityCartPole-v1", "n_envs": 2, "normalize_obs": True},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 2},
    "policy": {"lstm_hidden_size": 16, "net_arch": [16]},
    "checkpoint": {"every_updates": 3, "keep_last": 2},
}
FINAL = 1024
FILES = ("model", "optimizer", "normalizer", "training")
ENV = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}


def train_cmd(cfg_file: Path, run_dir: Path) -> list[str]:
    args = ["train", "--config", str(cfg_file), "--run-dir", str(run_dir), "--no-progress"]
    return [sys.executable, "-m", "riskppo.cli", *args]


def resume(run_dir: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "riskppo.cli", "train", "--resume", str(run_dir), "--no-progress"]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300, check=True)


def write_config(tmp: Path, **changes: object) -> Path:
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, **changes}))
    return path


def logged_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["time/total_timesteps"] for line in lines[:-1]]  # last may be torn


def wait_for_step(proc: subprocess.Popen[str], run_dir: Path, step: int) -> None:
    deadline = time.time() + 300
    while max(logged_steps(run_dir), default=0) < step:
        assert proc.poll() is None, "the run ended before the signal"
        assert time.time() < deadline
        time.sleep(0.02)


def final_checkpoint(run_dir: Path) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    ckpt = latest_checkpoint(run_dir)
    tensors = {f: load_file(str(ckpt / f"{f}.safetensors")) for f in FILES}
    return tensors, json.loads((ckpt / "state.json").read_text())["training"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("full")
    run = tmp / "run"
    subprocess.run(
        train_cmd(write_config(tmp), run), env=ENV, capture_output=True, timeout=300, check=True
    )
    return run


@pytest.mark.parametrize(
    "signum",
    # SIGTERM takes the same path (its notice is checked fast below): slow, to keep the suite short
    [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_at_half_way_saves_and_the_resumed_run_is_bit_identical(
    signum: int, uninterrupted: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        train_cmd(write_config(tmp_path), run), env=ENV, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for_step(proc, run, 480)  # then update 16 logged: mid-way to the checkpoint at 18
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert f"riskppo: {name}: training on to the next checkpoint (every 3 updates)" in err
    found = re.search(rf"riskppo: stopped by {name} at step ([\d,]+) of 1,024; saved (\S+); ", err)
    assert found, err
    step = int(found[1].replace(",", ""))
    assert 512 < step < FINAL and step % (3 * 32) == 0  # trained on to the next checkpoint
    assert found[2] == str(latest_checkpoint(run)) and latest_checkpoint(run).name.endswith(
        f"{step:012d}"
    )
    assert err.rstrip().endswith(f"continue with: riskppo train --resume {run}")
    assert not (run / "eval.json").exists()  # stopped: no evaluation yet

    assert f"resuming {run} at step {step:,} of 1,024" in resume(run).stdout
    (a, state_a), (b, state_b) = final_checkpoint(uninterrupted), final_checkpoint(run)
    for f in FILES:
        assert a[f].keys() == b[f].keys(), f
        for key in a[f]:
            assert torch.equal(a[f][key], b[f][key]), f"{f}:{key} differs"
    assert state_a == state_b  # counters, schedules, episode window
    assert logged_steps(run) == logged_steps(uninterrupted)


def test_a_second_signal_stops_at_once_without_saving(tmp_path: Path) -> None:
    # far from the next checkpoint: only the second signal can stop it soon
    cfg = write_config(tmp_path, total_timesteps=10**6, checkpoint={"every_updates": 10**4})
    run = tmp_path / "run"
    proc = subprocess.Popen(
        train_cmd(cfg, run), env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    wait_for_step(proc, run, 64)
    proc.send_signal(signal.SIGTERM)
    assert proc.stderr is not None
    notice = "riskppo: SIGTERM: training on to the next checkpoint (every 10,000 updates)"
    while not proc.stderr.readline().startswith(notice):
        assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM  # the first signal's status
    assert err.strip().splitlines()[-1] == (
        "riskppo: stopped at once; no checkpoint was saved yet, nothing to resume; start again "
        f"with: riskppo train --config {run / 'config.yaml'} --run-dir {run} --force"
    )
    assert not (run / "checkpoints" / "latest").exists()


def test_resume_refuses_another_run_dir(tmp_path: Path, capsys) -> None:
    assert cli.main(["train", "--resume", str(tmp_path / "a"), "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"riskppo: configuration error: --resume continues {tmp_path / 'a'} in place; drop "
        f"--run-dir {tmp_path} (to branch a run off, copy its directory and resume the copy)\n"
    )


def test_ctrl_c_to_the_process_group_spares_subprocess_env_workers(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the env workers too: they must not die mid-rollout."""
    cfg = write_config(tmp_path, env={**CONFIG["env"], "vec_env": "subproc"})
    run = tmp_path / "run"
    # without PYTHONHASHSEED: with it set, the env workers happened to survive Ctrl-C anyway
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONHASHSEED", None)
    proc = subprocess.Popen(
        train_cmd(cfg, run), env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for_step(proc, run, 64)
    os.killpg(proc.pid, signal.SIGINT)  # like Ctrl-C: the whole process group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "riskppo: stopped by Ctrl-C at step " in err and "Traceback" not in err
