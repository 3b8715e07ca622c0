"""``policy.memory: false``: every LSTM starts from the zero state at every step, so the actor and
the critics are functions of the current observation alone — in the rollout step (C or PyTorch),
in the training replay, in the critics' pass and in ``predict``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo import DistributionalPPO
from riskppo.config import PolicyConfig
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState

OBS = spaces.Box(-5.0, 5.0, (3,), np.float32)
ACT = spaces.Box(-1.0, 1.0, (1,), np.float32)


def _policy(memory: bool) -> RecurrentActorCritic:
    torch.manual_seed(0)
    return RecurrentActorCritic(
        OBS, ACT, PolicyConfig(lstm_hidden_size=8, memory=memory), n_critics=2, critic_out=4
    )


def _sequences(policy: RecurrentActorCritic) -> tuple[torch.Tensor, torch.Tensor]:
    """Two ``[T, 1, D]`` sequences that end in the same observation after other histories;
    the actor's mean and the critics' outputs at their last step."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 1, 3, generator=g), torch.randn(6, 1, 3, generator=g)
    b[-1] = a[-1]
    obs = torch.cat([a, b], dim=1)  # [T, 2, D]
    starts = torch.zeros(6, 2, dtype=torch.bool)
    starts[0] = True
    state = policy.initial_state(2)
    with torch.no_grad():
        dist, _ = policy.evaluate_sequences(obs, starts, state)
        critic, _, _ = policy.critic_sequence(obs, starts, state)
    mean = dist.mode().reshape(6, 2)
    return mean[-1], critic[:, -1]


@pytest.mark.parametrize("memory", [True, False])
def test_the_last_step_depends_on_the_history_only_with_memory(memory):
    mean, critic = _sequences(_policy(memory))
    same = torch.allclose(mean[0], mean[1]) and torch.allclose(critic[:, 0], critic[:, 1])
    assert same is (not memory)


def test_a_memoryless_step_equals_a_fresh_start_in_rollout_and_predict():
    policy = _policy(False)
    g = torch.Generator().manual_seed(2)
    obs = torch.randn(4, 3, generator=g)
    state = policy.initial_state(4)
    state = RecurrentState(state.pi._replace(h=torch.randn_like(state.pi.h)), state.vf)
    with torch.no_grad():
        carried = policy.act(obs, state.pi, np.zeros(4, dtype=bool), deterministic=True)
        fresh = policy.act(obs, state.pi, np.ones(4, dtype=bool), deterministic=True)
    torch.testing.assert_close(carried.actions, fresh.actions)
    assert policy.starts(torch.zeros(3, dtype=torch.bool)).all()
    assert policy.starts(np.zeros(3, dtype=bool)).all()


def test_predict_without_memory_ignores_the_state_it_is_given():
    model = DistributionalPPO("Pendulum-v1", n_envs=1, n_steps=8, batch_size=8,
                              policy={"lstm_hidden_size": 8, "memory": False})  # fmt: skip
    obs = np.array([[0.3, -0.2, 0.5]], dtype=np.float32)
    first, state = model.predict(obs, deterministic=True)
    for _ in range(3):  # a state carried over other observations changes nothing
        _, state = model.predict(np.random.default_rng(0).normal(size=(1, 3)).astype(np.float32),
                                 state, np.zeros(1, dtype=bool), deterministic=True)  # fmt: skip
    again, _ = model.predict(obs, state, np.zeros(1, dtype=bool), deterministic=True)
    np.testing.assert_array_equal(first, again)
