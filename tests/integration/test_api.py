"""The Python API as a new user meets it (design §1.1): one observation or a batch, envs without
``render_mode``, and ``load(path).learn(...)`` continuing training. Real envs, no mocks."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from safetensors.torch import load_file

from riskppo import DistributionalPPO
from riskppo.config import EnvConfig
from riskppo.envs.vec.build import build_vec_env

SMALL = dict(n_envs=2, n_steps=16, batch_size=32, bptt_len=8, n_epochs=1, lstm_hidden_size=16)


@pytest.mark.parametrize("critic", ["quantile", "categorical"])
def test_value_distribution_takes_one_observation_a_batch_or_a_sequence(critic: str) -> None:
    model = DistributionalPPO("CartPole-v1", seed=0, critic=critic, **SMALL)
    batch = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    taus, one = model.value_distribution(batch[1])  # shape (4,): one CartPole observation
    _, many = model.value_distribution(batch)
    _, seq = model.value_distribution(batch[None])  # [T=1, B=3, D]
    assert one.shape == taus.shape and many.shape == (3, len(taus)) and seq.shape == (1, 3, 32)
    np.testing.assert_allclose(one, many[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seq[0], many, rtol=1e-5, atol=1e-6)
    action, _ = model.predict(batch[1], deterministic=True)
    actions, _ = model.predict(batch, deterministic=True)
    assert np.shape(action) == () and action == actions[1]
    model.close()


def test_a_wrong_observation_shape_is_a_clear_error() -> None:
    model = DistributionalPPO("CartPole-v1", seed=0, **SMALL)
    with pytest.raises(ValueError, match=r"shape \[5\] does not fit the observation space \[4\]"):
        model.value_distribution(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \[1, 2, 4\] does not fit"):
        model.predict(np.zeros((1, 2, 4), dtype=np.float32))  # predict takes no sequences
    model.close()


class NoRenderModeEnv(gym.Env):
    """A real env whose constructor takes no arguments at all (no ``render_mode``): reward 1 for
    action 1, episodes of 10 steps."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # type: ignore[override]
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):  # type: ignore[override]
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, float(action == 1), False, self.t >= 10, {}


NO_RENDER_ID = "riskppo_test/NoRenderMode-v0"


@pytest.fixture(scope="module")
def no_render_id() -> str:
    if NO_RENDER_ID not in gym.registry:
        gym.register(NO_RENDER_ID, entry_point=NoRenderModeEnv)
    with pytest.raises(TypeError, match="render_mode"):  # what riskppo used to pass
        gym.make(NO_RENDER_ID, render_mode=None)
    return NO_RENDER_ID


def test_an_env_whose_constructor_takes_no_render_mode_trains_and_evaluates(no_render_id):
    model = DistributionalPPO(no_render_id, seed=0, **SMALL)
    model.learn(64)
    assert model.num_timesteps == 64
    stats = model.evaluate(n_episodes=2)
    assert stats["n_episodes"] == 2 and 0 <= stats["mean"] <= 10
    model.close()


@pytest.mark.parametrize("vec_env", ["dummy", "subproc"])
def test_envs_made_from_an_id_do_not_render(vec_env: str) -> None:
    """SB3's make_vec_env would make an id with render_mode='rgb_array'; riskppo renders nothing.
    Subprocess workers make riskppo's own ids too (they are registered in the parent only)."""
    cfg = EnvConfig(n_envs=2, vec_env=vec_env)
    venv = build_vec_env("riskppo/MaskedVelocityCartPole-v1", cfg, seed=0)
    assert venv.reset().shape == (2, 2)
    assert venv.get_attr("render_mode") == [None, None]
    venv.close()


RESUME = {
    "seed": 3,
    "env": {"id": "riskppo/MaskedVelocityCartPole-v1", "n_envs": 2, "normalize_obs": True},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 2},
    "policy": {"lstm_hidden_size": 16, "net_arch": [16]},
    "checkpoint": {"every_updates": 2},
}
CKPT_FILES = (
    "model.safetensors",
    "optimizer.safetensors",
    "normalizer.safetensors",
    "training.safetensors",
)


def test_load_rebuilds_the_env_and_continues_bit_identically(tmp_path, caplog) -> None:
    """``load(path).learn(n, reset_num_timesteps=False)`` with no env=: the env is rebuilt from
    the checkpoint's config (and a log line says so), and with checkpoint boundaries every 2
    updates, 4 + 4 updates end bit-identical to 8 updates that never stopped."""
    full = DistributionalPPO(config=RESUME)
    full.learn(8 * 32)
    first = DistributionalPPO(config=RESUME)
    first.learn(4 * 32)
    first.save(tmp_path / "half")
    first.close()
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        loaded = DistributionalPPO.load(tmp_path / "half")
    assert "rebuilt 'riskppo/MaskedVelocityCartPole-v1' (n_envs=2, seed=3)" in caplog.text
    assert loaded.env is not None and loaded.num_timesteps == 4 * 32
    loaded.learn(4 * 32, reset_num_timesteps=False)
    assert loaded.num_timesteps == full.num_timesteps == 8 * 32
    a, b = full.save(tmp_path / "full"), loaded.save(tmp_path / "resumed")
    for name in CKPT_FILES:
        ta, tb = load_file(str(a / name)), load_file(str(b / name))
        assert ta.keys() == tb.keys(), name
        for key in ta:
            assert torch.equal(ta[key], tb[key]), f"{name}:{key} differs"
    full.close()
    loaded.close()


def test_a_model_trained_on_a_factory_loads_for_predict_only(tmp_path, caplog) -> None:
    """The config's env.id (default CartPole-v1) is not what a factory-trained model ran on:
    load() must not rebuild it; learn() then says to pass env=."""
    model = DistributionalPPO(lambda: gym.make("Pendulum-v1"), seed=0, **SMALL)
    path = model.save(tmp_path / "ckpt")
    model.close()
    with caplog.at_level(logging.WARNING, logger="riskppo"):
        loaded = DistributionalPPO.load(path)
    assert loaded.env is None and caplog.text == ""
    with pytest.raises(RuntimeError, match=r"pass env= to DistributionalPPO\.load\(\)"):
        loaded.learn(32)
    loaded.predict(np.zeros(3, dtype=np.float32))  # predict works without an env


def test_an_unregistered_env_id_loads_for_predict_only_and_says_why(
    no_render_id, tmp_path, caplog
) -> None:
    model = DistributionalPPO(no_render_id, seed=0, **SMALL)
    path = model.save(tmp_path / "ckpt")
    model.close()
    spec = gym.registry.pop(no_render_id)
    try:
        with caplog.at_level(logging.WARNING, logger="riskppo"):
            loaded = DistributionalPPO.load(path)
    finally:
        gym.registry[no_render_id] = spec
    assert loaded.env is None
    assert "was not rebuilt: it is not registered in this process" in caplog.text
