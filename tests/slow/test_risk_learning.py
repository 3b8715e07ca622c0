"""R-RISK-3 acceptance and critic fidelity (slow marker)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from riskppo import DistributionalPPO
from riskppo.envs.tasks.risk import ChainEnv

pytestmark = pytest.mark.slow

RISKY = dict(
    n_envs=8, n_steps=32, batch_size=64, bptt_len=8, cvar_alpha=0.1, learning_rate=3e-3,
    lambda_lr=0.2, ent_coef=0.01,
)  # fmt: skip
LIMIT, TOLERANCE = 0.0, 0.25


def risky_fraction(model: DistributionalPPO) -> float:
    obs = np.zeros((1, 1), np.float32)
    action, _ = model.predict(obs, deterministic=True)
    return float(action[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cvar_limit_moves_the_policy_from_risky_to_safe(seed):
    free = DistributionalPPO("riskppo/RiskyChoice-v0", seed=seed, **RISKY)
    free.learn(30_000)
    assert risky_fraction(free) == 1.0  # unconstrained: the higher-mean risky arm
    assert free.evaluate(200)["cvar"] < LIMIT

    lams: list[float] = []
    constrained = DistributionalPPO("riskppo/RiskyChoice-v0", seed=seed, cvar_limit=LIMIT, **RISKY)
    constrained.learn(
        30_000, callback=lambda m, _: lams.append(m.monitor.latest["risk/lambda"]) or True
    )
    assert risky_fraction(constrained) == 0.0  # the safe arm
    stats = constrained.evaluate(200)
    assert stats["cvar"] >= LIMIT - TOLERANCE
    assert max(lams) > 0.5  # λ rose while the constraint was violated ...
    assert np.mean(lams[-20:]) < max(lams)  # ... and came back down once it held


@pytest.mark.parametrize("critic", ["quantile", "categorical"])
@pytest.mark.parametrize("twin", [True, False])
def test_learned_quantiles_match_the_chain_return_distribution(critic, twin):
    """Wasserstein-1 between predicted and true return-to-go quantiles on the chain env."""
    model = DistributionalPPO(
        "riskppo/Chain-v0",
        seed=0,
        critic=critic,
        twin_critics=twin,
        n_envs=8,
        n_steps=40,
        batch_size=80,
        bptt_len=5,
        gamma=1.0,
        gae_lambda=1.0,  # Monte Carlo targets: the critic learns the return distribution
        learning_rate=3e-3,
        kwargs={"length": 5},
    )
    model.learn(40_000)
    env = ChainEnv(5)
    obs = torch.zeros(1, 1, 5)
    obs[0, 0, 0] = 1.0
    taus, q = model.value_distribution(obs.numpy())
    true = env.true_quantiles(0, taus)
    w1 = float(np.mean(np.abs(np.sort(q[0, 0]) - true)))  # W1 between quantile functions
    print(f"{critic} twin={twin}: W1 = {w1:.3f} (returns range 0..5)")
    assert w1 < 0.25
