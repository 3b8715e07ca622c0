"""A user's env named ``module:Name-v1`` (the module registers it on import, as in Gymnasium's
``gym.make``), in the Python API, ``riskppo train`` and ``riskppo pbt`` (real modules on disk,
real processes); and a PBT run whose members all fail exits non-zero with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gymnasium.error import UnregisteredEnv

from riskppo import DistributionalPPO
from riskppo.config import Config

# Registers a short CartPole under the module's own name; ``Broken`` fails on every reset.
MODULE = """\
import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class Broken(CartPoleEnv):
    def reset(self, **kwargs):
        raise RuntimeError("this env is broken on purpose")


gym.register("{name}Cart-v1", entry_point=CartPoleEnv, max_episode_steps=40)
gym.register("{name}Broken-v1", entry_point=Broken)
"""

TINY = {
    "seed": 0,
    "total_timesteps": 64,
    "env": {"n_envs": 2},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 1},
    "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
    "critic": {"n_quantiles": 8},
    "risk": {"cvar_alpha": 0.25},
}


def user_module(root: Path, name: str) -> str:
    """Write ``root/<name>.py`` registering ``<name>Cart-v1`` / ``<name>Broken-v1``."""
    (root / f"{name}.py").write_text(MODULE.format(name=name))
    return name


def run_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m riskppo.cli ARGS`` with ``root`` (the user's modules) on PYTHONPATH."""
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "riskppo.cli", *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": path},
        cwd=root,
    )


def config_file(root: Path, env_id: str, **extra: dict) -> Path:
    data = {**TINY, "env": {**TINY["env"], "id": env_id}, **extra}
    path = root / "cfg.yaml"
    Config.build(data).to_yaml(path)
    return path


def run_pbt(root: Path, env_id: str) -> subprocess.CompletedProcess[str]:
    """``riskppo pbt`` of two members, one update per round, no failure allowed, into
    ``root/run``."""
    pbt = {"population": 2, "workers": 2, "ready_updates": 1, "eval_episodes": 1}
    cfg = config_file(root, env_id, pbt={**pbt, "max_failures": 0})
    return run_cli(root, "pbt", "--config", str(cfg), "--run-dir", str(root / "run"))


def test_api_trains_saves_and_reloads_a_module_name_id(tmp_path, monkeypatch) -> None:
    """Before: ``NameNotFound: Environment `userapi:userapiCart` doesn't exist``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    env_id = f"{user_module(tmp_path, 'userapi')}:userapiCart-v1"
    model = DistributionalPPO(env_id, config=TINY)
    model.learn(32)
    assert model.config.env.id == env_id and model.num_timesteps == 32
    path = model.save(tmp_path / "ckpt")
    model.close()
    again = DistributionalPPO.load(path)  # rebuilds the env from the id: can train on
    assert again.env is not None
    again.learn(32, reset_num_timesteps=False)
    assert again.num_timesteps == 64
    again.close()


def test_a_missing_module_is_named() -> None:
    with pytest.raises(UnregisteredEnv, match=r"cannot import 'no_such_module_xyz'.*PYTHONPATH"):
        DistributionalPPO("no_such_module_xyz:Thing-v1", config=TINY)


def test_riskppo_train_runs_a_module_name_id(tmp_path) -> None:
    env_id = f"{user_module(tmp_path, 'usertrain')}:usertrainCart-v1"
    proc = run_cli(tmp_path, "train", "--config", str(config_file(tmp_path, env_id)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert "usertrain_usertrainCart-v1" in run.name  # no ':' in the directory name
    assert (run / "eval.json").is_file()


def test_riskppo_pbt_members_make_a_module_name_id(tmp_path) -> None:
    """Every PBT worker (a spawned process) imports the module: no member fails."""
    proc = run_pbt(tmp_path, f"{user_module(tmp_path, 'userpbt')}:userpbtCart-v1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "pbt_summary.json").read_text())
    assert summary["n_failures"] == 0 and summary["best_checkpoint"] is not None


def test_a_population_whose_members_all_fail_exits_1_with_one_line(tmp_path) -> None:
    """Before: exit 0 (a line on stdout saying nothing was backtested)."""
    proc = run_pbt(tmp_path, f"{user_module(tmp_path, 'userbroken')}:userbrokenBroken-v1")
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("riskppo pbt:")]
    assert "no member finished a round (2 failed interval(s)" in line
    assert "broken on purpose" in line and "pbt_summary.json" in line
