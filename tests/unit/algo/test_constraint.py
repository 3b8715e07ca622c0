"""The constraint as a component: none without a limit, and the CVaR constraint's reset and
advantage points (docs/risk.md)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from riskppo.algo.constraints import ConstraintInput, constraint_for
from riskppo.algo.constraints.cvar import (
    RISK_TARGETS,
    CVaRConstraint,
    RiskEstimate,
    initial_risk_state,
)
from riskppo.algo.constraints.std import StdConstraint
from riskppo.config import Config, ConfigError


def _cfg() -> Config:
    return Config.build(
        {"critic": {"kind": "quantile", "n_quantiles": 8}, "risk": {"cvar_limit": 0.0}}
    )


def test_the_config_turns_one_constraint_on():
    assert constraint_for(Config()) is None
    assert isinstance(constraint_for(_cfg()), CVaRConstraint)
    assert isinstance(constraint_for(Config.build({"risk": {"std_limit": 1.0}})), StdConstraint)
    both = Config.build({"critic": {"kind": "quantile"}, "risk": {"cvar_limit": 0, "std_limit": 1}})
    with pytest.raises(ConfigError, match="one constraint at a time"):
        constraint_for(both)


def test_a_reset_ends_every_open_segment_and_keeps_the_multiplier():
    cfg = _cfg()
    state = dataclasses.replace(
        initial_risk_state(cfg, 3),
        lam=0.7,
        acc=torch.tensor([1.5, -2.0, 0.25], dtype=torch.float64),
        length=torch.tensor([4, 9, 1]),
    )
    state.recent.extend([1.0, -1.0])
    after = CVaRConstraint(cfg).end_segments(state)
    assert after is not None
    assert torch.equal(after.acc, torch.zeros(3, dtype=torch.float64))
    assert torch.equal(after.length, torch.zeros(3, dtype=torch.long))
    assert after.lam == 0.7 and list(after.recent) == [1.0, -1.0] and after.pid == state.pid


def test_the_policy_sees_the_return_and_cvar_advantages_weighted_by_the_multiplier():
    cfg = _cfg()
    g = torch.Generator().manual_seed(0)
    adv, a_cvar = torch.randn(8, 2, generator=g), 5.0 * torch.randn(8, 2, generator=g)
    state = initial_risk_state(cfg, 2)
    est = RiskEstimate(state, 3.0, a_cvar, {}, {RISK_TARGETS: torch.zeros(8, 2)})
    got = CVaRConstraint(cfg).advantage(adv, est, per_env=False)
    expected = (adv + 3.0 * a_cvar / a_cvar.std()) / 4.0  # (A + λ·Â_cvar)/(1+λ), Â_cvar unit std
    torch.testing.assert_close(got, expected)
    assert est.metrics["risk/adv_cvar_part_abs_mean"] > 0.0


def _estimate(limit: float, margin: float) -> RiskEstimate:
    """One rollout of the constraint over 200 finished segments of known returns."""
    cfg = Config.build(
        {
            "critic": {"kind": "quantile", "n_quantiles": 8},
            "risk": {
                "cvar_limit": limit,
                "cvar_margin": margin,
                "cvar_horizon": 4,
                "lambda_update": "pid",
            },
        }
    )
    state = initial_risk_state(cfg, 2)
    g = torch.Generator().manual_seed(1)
    state.recent.extend((0.01 * torch.randn(200, generator=g, dtype=torch.float64)).tolist())
    rewards = torch.zeros(8, 2)
    out = torch.zeros(8, 2, 8)
    dones = torch.zeros(8, 2, dtype=torch.bool)
    return CVaRConstraint(cfg).after_rollout(state, ConstraintInput(rewards, dones, lambda: out))


def test_the_margin_makes_the_constraint_keep_the_limit_divided_by_it():
    """Training with margin m keeps limit / m: the same multiplier step as that limit without
    a margin, bit for bit; with margin 1 the limit itself."""
    with_margin, tighter, plain = (
        _estimate(-0.04, 2.0),
        _estimate(-0.02, 1.0),
        _estimate(-0.04, 1.0),
    )
    assert with_margin.metrics["risk/cvar_violation"] == tighter.metrics["risk/cvar_violation"]
    assert with_margin.lam == tighter.lam
    cvar = with_margin.metrics["risk/cvar_empirical_segment"]
    assert -0.04 < cvar < -0.02  # the segments break limit / 2 but keep the limit
    assert plain.metrics["risk/cvar_violation"] < 0 < with_margin.metrics["risk/cvar_violation"]
    assert plain.lam == 0.0 < with_margin.lam
