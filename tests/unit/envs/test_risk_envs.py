"""The risk test environments: API conformance and the documented distributions."""

from __future__ import annotations

import numpy as np
from gymnasium.utils.env_checker import check_env

from riskppo.envs.tasks.risk import ChainEnv, RiskyChoiceEnv


def test_envs_pass_the_gymnasium_checker():
    check_env(RiskyChoiceEnv(), skip_render_check=True)
    check_env(ChainEnv(4), skip_render_check=True)


def test_risky_arm_has_higher_mean_and_heavy_tail():
    env = RiskyChoiceEnv()
    env.reset(seed=0)
    risky = np.array([env.step(1)[1] for _ in range(20_000)])
    assert set(np.unique(risky)) == {-10.0, 3.0}
    assert risky.mean() > 1.0 + 0.5  # 1.7 in expectation vs the safe 1.0
    assert abs((risky == -10.0).mean() - 0.1) < 0.01
    assert env.step(0)[1] == 1.0


def test_chain_return_distribution_is_binomial():
    env = ChainEnv(5)
    env.reset(seed=1)
    returns = []
    for _ in range(4000):
        env.reset()
        total, done = 0.0, False
        while not done:
            _, r, done, _, _ = env.step(0)
            total += r
        returns.append(total)
    taus = np.array([0.1, 0.3, 0.45, 0.7, 0.9])  # away from the CDF jumps (0.5 is one)
    empirical = np.quantile(returns, taus, method="inverted_cdf")
    np.testing.assert_array_equal(empirical, env.true_quantiles(0, taus))
