"""The pathwise term's Sharpe utility on a bandit whose answer is known: two states, each with a
positive expected return, four times larger in one. Following the mean return's slope holds the
whole position in both; the Sharpe ratio is highest with positions proportional to the edge over
the variance (Markowitz), so ``ppo.pathwise_utility: sharpe`` must hold about a quarter of its
strong-state position in the weak state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo import DistributionalPPO

EDGE = {1.0: 0.02, -1.0: 0.005}  # expected return per unit position, by state
VOL = 0.05


class TwoEdgeBandit(gym.Env):
    """Observation: the state (+1 strong, −1 weak), drawn afresh each step. Action ``a`` in
    ``[−1, 1]`` → position ``p = (a + 1) / 2``; reward ``p · x``, ``x ~ N(EDGE[state], VOL²)``;
    ``info["reward_slope"] = ∂reward/∂a`` (0 where the action is clipped). Episodes of 16
    steps, truncated."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):  # type: ignore[override]
        super().reset(seed=seed)
        self.t = 0
        self.state = float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self.state], np.float32), {}

    def step(self, action):  # type: ignore[override]
        a = float(np.asarray(action).reshape(-1)[0])
        x = EDGE[self.state] + VOL * float(self.np_random.normal())
        inside = -1.0 < a < 1.0
        reward = (np.clip(a, -1.0, 1.0) + 1.0) / 2.0 * x
        self.t += 1
        self.state = float(self.np_random.choice([-1.0, 1.0]))
        info = {"reward_slope": 0.5 * x if inside else 0.0, "reward_slope_prev": 0.0}
        return np.array([self.state], np.float32), reward, False, self.t >= 16, info


BANDIT_ID = "riskppo_test/TwoEdgeBandit-v0"


@pytest.fixture(scope="module")
def bandit_id() -> str:
    if BANDIT_ID not in gym.registry:
        gym.register(BANDIT_ID, entry_point=TwoEdgeBandit)
    return BANDIT_ID


def _positions(utility: str, env_id: str) -> tuple[float, float]:
    """The trained policy's deterministic positions in the (strong, weak) states."""
    model = DistributionalPPO(
        env_id, seed=0, n_envs=8, n_steps=32, batch_size=128, bptt_len=8, n_epochs=4,
        lstm_hidden_size=16, gamma=0.0, gae_lambda=0.0, ent_coef=0.0, learning_rate=3e-3,
        pathwise_coef=4.0, pathwise_utility=utility, memory=False, net_arch=[],
        normalize_obs=False,
    )  # fmt: skip
    model.learn(40_000)
    policy = model.policy
    obs = torch.tensor([[[1.0], [-1.0]]])
    with torch.no_grad():
        dist, _ = policy.evaluate_sequences(obs, torch.ones(1, 2), policy.initial_state(2))
    a = dist.mode().reshape(-1).clamp(-1, 1)
    model.close()
    return float((a[0] + 1) / 2), float((a[1] + 1) / 2)


def test_the_sharpe_utility_sizes_positions_by_the_edge_and_the_return_utility_does_not(
    bandit_id,
):
    strong, weak = _positions("sharpe", bandit_id)
    assert strong > 0.8 and weak < 0.6 * strong, (strong, weak)
    strong, weak = _positions("return", bandit_id)
    assert strong > 0.8 and weak > 0.8, (strong, weak)
