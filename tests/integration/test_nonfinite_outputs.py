"""A "valid" hostile checkpoint: every weight 3e38 (finite, so it loads and its manifest
verifies), which overflows in the forward pass to NaN action distributions and values. No
evaluation may be reported from it as a normal result: ``model.evaluate``, ``predict``,
``value_distribution``, ``riskppo eval`` and ``riskppo backtest`` refuse it in one line naming
the checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from riskppo.agent import DistributionalPPO
from riskppo.cli import main
from riskppo.config import Config
from riskppo.nn.outputs import NonFiniteOutputError
from riskppo.persist.checkpoint import verify_checkpoint
from riskppo.persist.files import write_manifest
from riskppo.runs.rundir import latest_checkpoint, save_run_checkpoint

CFG = {
    "seed": 0,
    "env": {"id": "riskppo/Trading-v0", "n_envs": 2, "kwargs": {"episode_length": 64}},
    "ppo": {"n_steps": 16, "batch_size": 32, "n_epochs": 1, "bptt_len": 8},
    "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
    "critic": {"n_quantiles": 8},
    "risk": {"cvar_alpha": 0.25},
}


def hostile_run(run: Path, value: float | None) -> Path:
    """A trading run directory whose checkpoint has every floating weight set to ``value``
    (None: left as initialised), with the manifest rewritten to match; returns the checkpoint."""
    cfg = Config.build(CFG)
    model = DistributionalPPO(config=cfg, run_dir=run)
    ckpt = save_run_checkpoint(model, run, 1)
    model.close()
    cfg.to_yaml(run / "config.yaml")
    if value is not None:
        weights = load_file(str(ckpt / "model.safetensors"))
        save_file(
            {k: torch.full_like(v, value) for k, v in weights.items()},
            str(ckpt / "model.safetensors"),
        )
        (ckpt / "manifest.json").unlink()
        write_manifest(ckpt)
    verify_checkpoint(ckpt)  # a checkpoint the loader accepts
    return ckpt


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("hostile") / "run"
    hostile_run(run, 3e38)
    return run


def test_the_python_api_refuses_nan_outputs(hostile: Path) -> None:
    ckpt = latest_checkpoint(hostile)
    model = DistributionalPPO.load(ckpt)
    try:
        with pytest.raises(
            NonFiniteOutputError,
            match=f"checkpoint {ckpt}: NaN/inf in the policy's action distribution",
        ):
            model.evaluate(n_episodes=1, part="test")
        obs = np.zeros(model.observation_space.shape, dtype=np.float32)
        with pytest.raises(NonFiniteOutputError, match="value quantiles"):
            model.value_distribution(obs)
    finally:
        model.close()


@pytest.mark.parametrize("command", ["eval", "backtest"])
def test_the_cli_prints_one_line_and_no_table(
    hostile: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, str(hostile)] + (["--episodes", "1"] if command == "eval" else [])
    assert main(argv) == 2
    out, err = capsys.readouterr()
    ckpt = latest_checkpoint(hostile)
    assert err.strip() == (
        f"riskppo: unusable policy: checkpoint {ckpt}: NaN/inf in the policy's action "
        "distribution: its weights overflow or are corrupted, so nothing is evaluated with them; "
        "use another checkpoint"
    )
    assert out == ""  # no table, nothing written as a result
    assert not list(hostile.glob("evaluation*")) and not (hostile / "backtest_test").exists()


def test_an_ordinary_checkpoint_still_evaluates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the same run with its initial weights prints its table."""
    run = tmp_path / "run"
    hostile_run(run, None)
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    assert "mean return" in capsys.readouterr().out
