"""What a Stable-Baselines3 user writes works, or is refused before training with one line
(``riskppo.agent.sb3_compat``, ``docs/sb3.md``): SB3 callbacks, an env instance, ``get_env`` /
``set_env`` / ``logger``, ``learn(tb_log_name, log_interval)``, ``policy_kwargs``, a config path,
``save("x.zip")`` and ``tensorboard_log`` run numbering. Real envs, real SB3 callbacks."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
)
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from riskppo import DistributionalPPO
from riskppo.config import Config, ConfigError

TINY: dict[str, Any] = {
    "n_envs": 2,
    "n_steps": 16,
    "batch_size": 32,
    "bptt_len": 8,
    "n_epochs": 1,
    "lstm_hidden_size": 8,
    "n_quantiles": 8,
    "cvar_alpha": 0.25,
}
ONE_ENV = {**TINY, "n_envs": 1, "batch_size": 16}


class Recorder(BaseCallback):
    """Records SB3's hooks as SB3 calls them; ``_on_step`` returns False at ``stop_at`` calls."""

    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []
        self.stop_at = stop_at

    def _on_training_start(self) -> None:
        self.events.append(("training_start", self.num_timesteps))

    def _on_rollout_start(self) -> None:
        self.events.append(("rollout_start", self.num_timesteps))

    def _on_step(self) -> bool:
        assert len(self.locals["dones"]) == len(self.locals["infos"]) == self.training_env.num_envs
        self.events.append(("step", self.num_timesteps))
        self.logger.record("custom/calls", self.n_calls)
        return self.stop_at is None or self.n_calls < self.stop_at

    def _on_rollout_end(self) -> None:
        self.events.append(("rollout_end", self.num_timesteps))

    def _on_training_end(self) -> None:
        self.events.append(("training_end", self.num_timesteps))


def test_an_sb3_callback_gets_sb3s_hooks_after_every_env_step(tmp_path: Path) -> None:
    """Before: ``TypeError: 'Recorder' object is not callable`` after the first update."""
    model = DistributionalPPO("CartPole-v1", run_dir=tmp_path, **TINY)
    cb = Recorder()
    model.learn(64, callback=cb)
    model.close()
    assert cb.n_calls == 32  # 64 steps / 2 envs

    def rollout(start: int) -> list[tuple[str, int]]:
        steps = [("step", start + 2 * k) for k in range(1, 17)]
        return [("rollout_start", start), *steps, ("rollout_end", start + 32)]

    assert cb.events == [("training_start", 0), *rollout(0), *rollout(32), ("training_end", 64)]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["custom/calls"] for r in rows] == [16, 32]  # logger.record reaches the metrics


def test_on_step_returning_false_stops_at_once_in_a_list(tmp_path: Path) -> None:
    """A list mixes SB3 callbacks (in a CallbackList) and riskppo's ``callback(model, log)``;
    the fifth ``_on_step`` stops training inside the first rollout: no update happens."""
    updates: list[int] = []
    stopper, watcher = Recorder(stop_at=5), Recorder()
    model = DistributionalPPO("CartPole-v1", **TINY)
    model.learn(640, callback=[stopper, lambda m, log: updates.append(m.n_updates), watcher])
    assert stopper.n_calls == watcher.n_calls == 5 and model.n_updates == 0 and updates == []
    assert stopper.events[-1][0] == "training_end"
    model.learn(32, callback=CallbackList([watcher]))  # trains on afresh after the stop
    assert model.n_updates == 1 and watcher.n_calls == 5 + 16
    model.close()


def test_sb3s_own_checkpoint_and_eval_callbacks_run(tmp_path: Path) -> None:
    """SB3's CheckpointCallback saves ``rl_model_<N>_steps.zip`` → riskppo checkpoint
    directories (of the model as of the last update: ``_on_step`` runs inside a rollout);
    EvalCallback evaluates through ``predict`` with recurrent states."""
    evaluator = EvalCallback(gym.make("CartPole-v1"), eval_freq=16, n_eval_episodes=2)
    model = DistributionalPPO("CartPole-v1", **TINY)
    model.learn(64, callback=[CheckpointCallback(8, str(tmp_path)), evaluator])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"rl_model_{n}_steps" for n in (16, 32, 48, 64)
    ]
    # saved during the last step of the second rollout: the model as of the first update
    assert DistributionalPPO.load(tmp_path / "rl_model_64_steps.zip").num_timesteps == 32
    assert evaluator.n_calls == 32 and np.isfinite(evaluator.last_mean_reward)
    model.close()


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_sb3s_eval_callback_sees_the_training_env_wrapped_like_its_eval_env(
    normalize_obs: bool,
) -> None:
    """Before: "Training and eval env are not of the same type" (riskppo's VecFiniteGuard
    outermost); with ``normalize_obs``, SB3's ``sync_envs_normalization`` failed with an
    AssertionError (the guard between ``VecNormalize`` and the env)."""
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=1)
    if normalize_obs:
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    evaluator = EvalCallback(eval_env, eval_freq=16, n_eval_episodes=2)
    model = DistributionalPPO("CartPole-v1", normalize_obs=normalize_obs, **TINY)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        model.learn(64, callback=evaluator)
    assert np.isfinite(evaluator.last_mean_reward)
    if normalize_obs:  # the training statistics reached the eval env
        rms = model.get_vec_normalize_env().obs_rms
        assert rms.count > 1 and eval_env.obs_rms.count > 1
        assert eval_env.obs_rms is not rms
    model.close()


def test_a_callback_of_another_kind_is_refused_before_training() -> None:
    model = DistributionalPPO("CartPole-v1", **TINY)
    with pytest.raises(TypeError, match=r"neither a function callback.*nor a stable_baselines3"):
        model.learn(32, callback=42)
    assert model.n_updates == 0
    model.close()


def test_an_env_instance_trains_as_one_env_and_evaluates() -> None:
    """Before: ``'TimeLimit' object is not callable``."""
    env = gym.make("CartPole-v1")
    model = DistributionalPPO(env, **ONE_ENV)
    model.learn(32)
    assert model.n_envs == 1 and model.num_timesteps == 32
    assert model.evaluate(n_episodes=2)["n_episodes"] == 2
    assert model.get_env() is model.env.venv  # as SB3 sees it: below riskppo's finite guard
    model.close()


def test_an_env_instance_for_several_envs_is_refused_naming_the_factory() -> None:
    with pytest.raises(ConfigError) as info:
        DistributionalPPO(gym.make("CartPole-v1"), **TINY)
    message = str(info.value)
    assert "\n" not in message and "cannot be copied into n_envs=2" in message
    assert "pass n_envs=1" in message and "env=lambda: gym.make('CartPole-v1')" in message


def test_set_env_swaps_an_env_of_the_same_spaces_and_refuses_others() -> None:
    model = DistributionalPPO("CartPole-v1", normalize_obs=True, **TINY)
    model.learn(32)
    old = model.get_env()
    stats = model.get_vec_normalize_env().obs_rms.mean.copy()
    model.set_env(lambda: gym.make("CartPole-v1"))
    assert model.get_env() is not old and not model.env_is_id
    np.testing.assert_array_equal(model.get_vec_normalize_env().obs_rms.mean, stats)
    model.learn(32, reset_num_timesteps=False)
    assert model.num_timesteps == 64
    with pytest.raises(ValueError, match=r"set_env: the new env's observation space has shape"):
        model.set_env("Pendulum-v1")
    old.close()
    model.close()


def test_set_env_with_another_number_of_envs_says_so_first_in_one_line() -> None:
    """Before: both whole ``Box(...)`` reprs, the number of envs at the end of each."""
    model = DistributionalPPO("CartPole-v1", **TINY)
    with pytest.raises(ValueError) as info:
        model.set_env(make_vec_env("CartPole-v1", n_envs=4))
    message = str(info.value)
    assert message.startswith(
        "set_env: the new env has 4 envs, the model was built for 2 (make it with n_envs=2)"
    )
    assert "\n" not in message and "Box(" not in message
    model.close()


def test_policy_kwargs_set_policy_fields_and_a_wrong_key_says_which_exist() -> None:
    """Before: ``unknown keyword argument 'policy_kwargs'``."""
    kwargs = {"net_arch": [16], "activation_fn": torch.nn.ReLU, "n_lstm_layers": 2}
    model = DistributionalPPO("CartPole-v1", policy_kwargs=kwargs, **TINY)
    assert (model.config.policy.net_arch, model.config.policy.activation) == ([16], "relu")
    assert model.config.policy.n_lstm_layers == 2
    model.close()
    with pytest.raises(ConfigError, match=r"'lstm_hiden_size' \(did you mean 'lstm_hidden_size'"):
        DistributionalPPO("CartPole-v1", policy_kwargs={"lstm_hiden_size": 8})
    with pytest.raises(ConfigError, match="net_arch: the actor and the critics share"):
        DistributionalPPO("CartPole-v1", policy_kwargs={"net_arch": {"pi": [8], "vf": [8]}})
    with pytest.raises(ConfigError, match="'use_sde' \\(SB3\\) is not supported"):
        DistributionalPPO("CartPole-v1", use_sde=True)
    with pytest.raises(ConfigError, match="did you mean 'learning_rate'"):
        DistributionalPPO("CartPole-v1", learnin_rate=1e-3)


def test_config_may_be_the_path_of_a_yaml_file(tmp_path: Path) -> None:
    """Before: ``dictionary update sequence element #0 has length 1``."""
    path = tmp_path / "cfg.yaml"
    Config.build({"env": {"n_envs": 2}, "ppo": {"n_steps": 16, "batch_size": 32}}).to_yaml(path)
    for given in (str(path), path):
        model = DistributionalPPO("CartPole-v1", config=given, lstm_hidden_size=8)
        assert (model.config.ppo.n_steps, model.config.policy.lstm_hidden_size) == (16, 8)
        model.close()


def test_save_of_a_zip_name_writes_the_directory_without_zip(tmp_path: Path) -> None:
    """Before: a directory named ``x.zip``."""
    model = DistributionalPPO("CartPole-v1", **TINY)
    assert model.save(tmp_path / "x.zip") == tmp_path / "x"
    model.close()
    assert (tmp_path / "x").is_dir() and not (tmp_path / "x.zip").exists()
    assert DistributionalPPO.load(tmp_path / "x.zip", rebuild_env=False).loaded_from == (
        tmp_path / "x"
    )


def test_tensorboard_log_numbers_runs_like_sb3(tmp_path: Path) -> None:
    """Before: every model wrote into ``tensorboard_log`` itself. Now each run gets
    ``<tb_log_name>_<N>``; ``reset_num_timesteps=False`` goes on in the same folder;
    ``log_interval`` sets the dump interval."""
    for _ in range(2):
        model = DistributionalPPO("CartPole-v1", tensorboard_log=str(tmp_path), **TINY)
        model.learn(64, tb_log_name="PPO", log_interval=2)
        assert model.config.monitor.log_interval == 2
        model.close()
    model = DistributionalPPO("CartPole-v1", tensorboard_log=str(tmp_path), **TINY)
    model.learn(32)
    model.learn(32, reset_num_timesteps=False)
    model.learn(32)
    model.close()
    names = ["DistributionalPPO_1", "DistributionalPPO_2", "PPO_1", "PPO_2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names

    def steps(run: str) -> list[int]:
        rows = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [json.loads(x)["time/total_timesteps"] for x in rows]

    assert steps("PPO_1") == steps("PPO_2") == [64]  # one dump per 2 updates
    assert steps("DistributionalPPO_1") == [32, 64] and steps("DistributionalPPO_2") == [32]
