"""The second constraint, std(R) ≤ ``risk.std_limit`` (:mod:`riskppo.algo.constraints.std`):
its advantage and multiplier on known segments, and that training enforces it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from riskppo import DistributionalPPO
from riskppo.algo.constraints import ConstraintInput, constraint_for
from riskppo.algo.constraints.std import StdConstraint, StdState, std_advantage
from riskppo.config import Config


def _cfg(**risk: object) -> Config:
    base = {"std_limit": 1.0, "cvar_horizon": 4, "cvar_min_segments": 4, "lambda_lr": 0.1}
    return Config.build({"risk": base | risk})


def test_the_advantage_is_minus_the_squared_deviation_above_the_variance():
    seg = torch.tensor([[2.0, float("nan")], [-1.0, 0.5]], dtype=torch.float64)
    got = std_advantage(seg, mean=0.5, var=1.0)
    want = torch.tensor([[1.0 - 2.25, 0.0], [1.0 - 2.25, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(got, want)


def test_lambda_rises_on_a_spread_above_the_limit_and_holds_before_enough_segments():
    cfg = _cfg(cvar_min_segments=9)
    c = constraint_for(cfg)
    assert isinstance(c, StdConstraint) and not c.risk_head
    state = c.initial_state(2)
    per_step = torch.tensor([[-3.0, 1.0], [2.0, -1.0], [0.5, 3.0], [-2.0, 1.5]])
    rewards = per_step.repeat_interleave(4, dim=0)  # four 4-step segments per env: 4r
    dones = torch.zeros(16, 2, dtype=torch.bool)
    x = ConstraintInput(rewards, dones, lambda: pytest.fail("no risk head is read"))
    step = c.after_rollout(state, x)
    assert step.lam == 0.0 and "risk/std_violation" not in step.metrics  # 8 < 9 segments
    assert not step.advantage.any()
    step = c.after_rollout(step.state, x)  # 16 segments now
    returns = torch.tensor(list(step.state.recent), dtype=torch.float64)
    std = float(returns.std(correction=0))
    assert step.metrics["risk/std_empirical_segment"] == pytest.approx(std)
    violation = (std - 1.0) / 1.0
    assert step.metrics["risk/std_violation"] == pytest.approx(violation)
    assert step.lam == pytest.approx(0.1 * violation)
    want = std_advantage((4 * rewards).double(), float(returns.mean()), std**2)
    torch.testing.assert_close(step.advantage.double(), want)


def test_a_reset_ends_the_open_segments_and_the_state_checks_itself():
    c = StdConstraint(_cfg())
    state = StdState(0.5, torch.ones(3, dtype=torch.float64), torch.tensor([1, 2, 3]),
                     c.initial_state(3).recent, c.initial_state(3).pid)  # fmt: skip
    after = c.end_segments(state)
    assert not after.acc.any() and not after.length.any() and after.lam == 0.5
    after.check()
    with pytest.raises(ValueError, match="risk/lam"):
        StdState(-1.0, state.acc, state.length, state.recent, state.pid).check()


RISKY = dict(n_envs=8, n_steps=32, batch_size=64, bptt_len=8, learning_rate=3e-3, ent_coef=0.01,
             lstm_hidden_size=16, num_threads=1)  # fmt: skip
LIMIT = 1.0


def _train(**kw: object) -> tuple[DistributionalPPO, list[float]]:
    model = DistributionalPPO("riskppo/RiskyChoice-v0", seed=0, **{**RISKY, **kw})
    lams: list[float] = []

    def record(m: DistributionalPPO, log: object) -> bool:
        lams.append(m.state.risk.lam if m.state.risk is not None else 0.0)
        return True

    model.learn(8 * 32 * 30, callback=record)
    return model, lams


def test_the_std_limit_moves_the_policy_to_the_safe_arm():
    """RiskyChoice: the risky arm (mean 1.7, std 3.9) wins unconstrained; std(R) ≤ 1 allows it
    at most ~6% of the time. Mutation check: a constraint whose advantage hook returns the
    return advantage alone (or whose multiplier never moves) stays on the risky arm and fails
    the second half of this test."""
    free, _ = _train()
    returns = np.array(list(free.state.episodes.returns))
    assert returns.std() > 2.0 and np.mean(returns != 1.0) > 0.8
    constrained, lams = _train(
        std_limit=LIMIT, lambda_lr=0.5, cvar_min_segments=64, cvar_window=256
    )
    assert max(lams) > 0.5  # λ rose while the spread was above the limit
    returns = np.array(list(constrained.state.episodes.returns))
    assert returns.std() <= LIMIT + 0.25 and np.mean(returns != 1.0) < 0.1
    assert "risk/std_empirical_segment" in constrained.monitor.latest
