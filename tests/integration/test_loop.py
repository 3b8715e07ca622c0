"""The training loop's stages: the estimate step is pure, the PopArt rescale is an
explicit step of :func:`train_iteration`, and no module besides the policy reads the LSTM
sharing mode."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import torch

import riskppo
from riskppo import DistributionalPPO
from riskppo.algo.collect import collect_rollout
from riskppo.algo.estimate import estimate
from riskppo.algo.loop import reset_carry, train_iteration

SMALL = dict(n_envs=2, n_steps=32, batch_size=32, bptt_len=8, lstm_hidden_size=8, net_arch=[8])


class NoStep(torch.optim.SGD):
    """An optimizer that never moves the weights: what changes them is the loop's own steps."""

    def step(self, closure=None):  # type: ignore[no-untyped-def, override]
        return None


def model_with_risk() -> DistributionalPPO:
    return DistributionalPPO("CartPole-v1", seed=0, cvar_limit=10.0, cvar_horizon=8, **SMALL)


def raw_predictions(model: DistributionalPPO, obs: torch.Tensor) -> torch.Tensor:
    """Critic and risk-head outputs in raw return units for a fixed ``[T, B, D]`` batch."""
    starts = torch.zeros(obs.shape[:2])
    with torch.no_grad():
        out, _, _ = model.policy.critic_sequence(obs, starts, model.policy.initial_state(2))
    risk = model.state.risk
    assert risk is not None
    c = model.policy.n_critics
    return torch.cat([model.state.scaling.to_raw(out[:c]), risk.scaling.to_raw(out[c:])])


def test_estimate_changes_no_weight() -> None:
    """Mutation check: PopArt-rescaling the output layers inside ``update_scaling`` (as before
    the restructuring) fails the first assertion."""
    model = model_with_risk()
    model.state = reset_carry(model.learner(), model.state)
    cfg = model.config
    rollout, _, _ = collect_rollout(
        model.policy, model.env, model.state.carry, 32, cfg.ppo.chunk_len, model.state.rng.sample
    )
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    constraint = model.learner().constraint
    est = estimate(
        cfg, model.policy, model.critic, model.state.scaling, rollout, constraint, model.state.risk
    )
    after = model.policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [r.target for r in est.rescales] == ["critics", "risk_head"]
    assert est.rescales[0].new == est.scaling and est.rescales[0].old == model.state.scaling


def test_the_loop_applies_the_popart_rescale() -> None:
    """With an optimizer that never steps, the only weights ``train_iteration`` changes are the
    output layers PopArt rescales, and the de-normalised predictions stay what they were.
    Mutation check: dropping ``apply_rescales`` from ``train_iteration`` fails it."""
    model = model_with_risk()
    obs = torch.randn(6, 2, 4, generator=torch.Generator().manual_seed(0))
    learner = dataclasses.replace(
        model.learner(), optimizer=NoStep(model.policy.parameters(), lr=1.0)
    )
    state = reset_carry(learner, model.state)
    raw_before = raw_predictions(model, obs)
    weights = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.state, _ = train_iteration(learner, state)
    changed = {k for k, v in model.policy.state_dict().items() if not torch.equal(v, weights[k])}
    assert changed and all(k.startswith("critic_outs.") for k in changed)
    torch.testing.assert_close(raw_predictions(model, obs), raw_before, rtol=1e-4, atol=1e-4)


def test_only_the_policy_reads_the_lstm_sharing_mode() -> None:
    """``lstm_sharing`` is hidden behind the policy's step/sequence methods: no other module of
    the package reads it (the config declares it)."""
    root = Path(riskppo.__file__).parent
    readers = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel in ("nn/policy.py", "config/__init__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("lstm_sharing", "sharing"):
                readers.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.Constant) and node.value == "lstm_sharing":
                readers.append(f"{rel}:{node.lineno}")
    assert readers == []


def test_a_reset_ends_the_constraints_open_segments() -> None:
    """The loop's reset reaches the constraint: every open CVaR segment ends (R-REL-4), λ stays.
    Mutation check: keeping ``state.risk`` in ``reset_carry`` fails it."""
    model = model_with_risk()
    model.state = reset_carry(model.learner(), model.state)
    model.state, _ = train_iteration(model.learner(), model.state)
    risk = model.state.risk
    assert risk is not None and bool((risk.length > 0).any())  # segments left open
    after = reset_carry(model.learner(), model.state).risk
    assert after is not None and after.lam == risk.lam
    assert not bool(after.length.any()) and not bool(after.acc.any())
