"""Behaviour cloning end to end (R-ALG-12): a cloned policy reproduces a deterministic
teacher on held-out observations (a toy env and the trading env), ``riskppo record`` writes a
file that trains with ``bc.source: file``, a malformed file is one line on the command line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from riskppo import DistributionalPPO
from riskppo.cli import main as cli_main
from riskppo.cli.errors import user_error
from riskppo.config import Config
from riskppo.demos.files import DemonstrationError, load_demonstrations
from riskppo.envs.teacher import TeacherRecorder
from riskppo.envs.vec.build import find_normalizer
from tests.unit.algo.test_bc import Cue

AGREEMENT = 0.95


def test_cloned_policy_reproduces_a_toy_teacher_on_held_out_observations():
    """Mutation check: cloning the policy's own samples instead of the teacher's actions
    (``actions = dist.sample()`` in ``bc._demo_loss``) drops agreement to chance (~50%)."""
    model = DistributionalPPO(
        Cue,
        config={
            "seed": 0,
            "env": {"n_envs": 4},
            "ppo": {"n_steps": 32, "batch_size": 64, "bptt_len": 16, "learning_rate": 3e-3},
            "bc": {"source": "teacher", "bc_coef": 1.0},
        },
    )
    model.attach_bc(teacher=lambda obs: int(obs[0] > 0), teacher_input="obs")
    model.learn(4096)
    obs = np.random.default_rng(123).normal(size=(100, 16, 3)).astype(np.float32)  # held out
    state, agree = None, []
    for t in range(len(obs)):
        start = np.full(16, t == 0)
        action, state = model.predict(obs[t], state, episode_start=start, deterministic=True)
        agree.append(action == (obs[t, :, 0] > 0))
    assert np.mean(agree) >= AGREEMENT, np.mean(agree)


def trading_config(**bc) -> Config:
    return Config.build(
        {
            "seed": 0,
            "env": {
                "id": "riskppo/Trading-v0",
                "n_envs": 4,
                "normalize_obs": True,
                "kwargs": {"episode_length": 64, "features": ["vret_1", "vret_20", "rsi_14"]},
            },
            "data": {"dataset": "googl", "split": [0.7, 0.15, 0.15]},
            "ppo": {"n_steps": 64, "batch_size": 128, "bptt_len": 16, "learning_rate": 3e-3},
            "policy": {"lstm_hidden_size": 32, "net_arch": [32]},
            "bc": bc,
        }
    )


def test_cloned_trading_agent_reproduces_a_teacher_on_the_validation_split():
    """A deterministic teacher of the observation (long when the 20-day return is positive,
    else flat; discrete positions -1/0/1) is cloned from the agent's own training bars, then
    compared on the validation split, which training never saw."""
    model = DistributionalPPO(config=trading_config(source="teacher", bc_coef=2.0))
    names = model.env.get_attr("observation_names", [0])[0]
    k = names.index("vret_20[t]")

    def teacher(obs: np.ndarray) -> float:
        return 1.0 if obs[k] > 0 else 0.0

    model.attach_bc(teacher=teacher, teacher_input="obs")
    assert isinstance(model.env, TeacherRecorder)
    model.learn(8192)
    venv = model.make_eval_env(part="val", n_envs=1)
    normalizer = find_normalizer(venv)
    obs, state, start, agree = venv.reset(), None, np.ones(1, bool), []
    done = False
    while not done:
        raw = normalizer.get_original_obs() if normalizer is not None else obs
        action, state = model.predict(obs, state, episode_start=start, deterministic=True)
        agree.append(int(action[0]) == (2 if teacher(raw[0]) == 1.0 else 1))
        obs, _, dones, _ = venv.step(action)
        start, done = dones, bool(dones[0])
    venv.close()
    assert len(agree) > 200
    assert np.mean(agree) >= AGREEMENT, np.mean(agree)


@pytest.mark.parametrize("suffix", [".safetensors", ".parquet"])
def test_record_writes_a_file_that_trains_with_the_file_source(tmp_path, capsys, suffix):
    cfg_path = tmp_path / "cfg.yaml"
    trading_config().to_yaml(cfg_path)
    out = tmp_path / f"vt{suffix}"
    args = ["record", str(out), "--config", str(cfg_path), "--steps", "48"]
    assert cli_main([*args, "--strategy", "vol_target_buy_and_hold"]) == 0
    assert "4 sequence(s) x 48 steps" in capsys.readouterr().out
    demos = load_demonstrations(out)
    assert demos.shape == (48, 4) and demos.returns is not None
    model = DistributionalPPO(
        config=trading_config(source="file", path=str(out), bc_coef=1.0, weighting="return")
    )
    model.learn(256)
    assert np.isfinite(model.monitor.latest["train/bc_loss"])
    assert model.monitor.latest["train/bc_coef"] == 1.0


def test_malformed_file_is_one_line_on_the_command_line(tmp_path):
    bad = tmp_path / "bad.safetensors"
    save_file({"observations": torch.zeros(4, 3)}, str(bad))
    with pytest.raises(DemonstrationError) as info:  # when the model is built
        DistributionalPPO(config=trading_config(source="file", path=str(bad), bc_coef=1.0))
    line = user_error(info.value)
    assert line is not None and line.startswith("riskppo: demonstration error: ")
    assert "bad.safetensors" in line and "'actions' is missing" in line and "\n" not in line


def test_teacher_bc_resumes_bit_identically(tmp_path):
    """The teacher's kept window starts afresh at every env reset, so a run saved at a
    checkpoint boundary and loaded continues exactly like the run that never stopped. Mutation
    check: not clearing the window in ``TeacherRecorder.reset`` makes the weights differ."""
    data = trading_config(source="teacher", teacher="vol_target_buy_and_hold", bc_coef=1.0)
    cfg = data.to_dict()
    cfg["checkpoint"] = {"every_updates": 2}
    cfg["env"]["kwargs"]["continuous"] = True
    full = DistributionalPPO(config=cfg)
    full.learn(4 * 256)
    half = DistributionalPPO(config=cfg)
    half.learn(2 * 256)
    half.save(tmp_path / "half")
    half.close()
    loaded = DistributionalPPO.load(tmp_path / "half")
    loaded.learn(2 * 256, reset_num_timesteps=False)
    for (name, a), b in zip(full.policy.state_dict().items(), loaded.policy.state_dict().values()):
        assert torch.equal(a, b), name
