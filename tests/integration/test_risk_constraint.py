"""The CVaR constraint inside the trainer (R-RISK-2, R-RISK-4) and the entropy floor (R-ALG-10)."""

from __future__ import annotations

import dataclasses
import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo import DistributionalPPO, core
from riskppo.algo.buffer import to_chunks
from riskppo.algo.constraints.cvar import initial_risk_state, multiplier_step, risk_estimate
from riskppo.algo.loop import risk_log
from riskppo.config import Config
from riskppo.monitor.writer import Monitor

SMALL = dict(n_envs=4, n_steps=32, batch_size=64, bptt_len=16, n_epochs=2, lstm_hidden_size=16)


def test_cvar_term_reaches_the_advantages_the_policy_loss_sees(rollout_and_estimates):
    """The chunks the PPO loss reads hold (A + λ·Â_cvar)/(1+λ), not the return advantage alone."""
    model = DistributionalPPO(
        "CartPole-v1", seed=0, cvar_limit=10.0, cvar_alpha=0.1, cvar_horizon=8, **SMALL
    )
    assert model.state.risk is not None
    model.state = model.state.replace(risk=dataclasses.replace(model.state.risk, lam=2.0))
    model.config.risk.cvar_min_segments = 1_000_000  # λ holds at 2 for this rollout
    cfg = model.config
    _, est = rollout_and_estimates(model)
    assert est.constraint is not None and est.constraint.lam == 2.0
    a_cvar = est.constraint.advantage
    assert float(a_cvar.abs().sum()) > 0.0
    adv_norm, _ = core.normalize_advantages(est.advantages)
    # independent of the code under test: scale A_cvar to unit std by hand and combine
    unit = a_cvar.double() / a_cvar.double().std()
    expected = (adv_norm.double() + 2.0 * unit) / 3.0
    got = est.data.advantages.double()
    torch.testing.assert_close(got, to_chunks(expected, cfg.ppo.chunk_len), atol=1e-5, rtol=0)
    # and the CVaR part is a real share of what the policy sees
    assert float((got - to_chunks(adv_norm.double(), cfg.ppo.chunk_len)).abs().mean()) > 0.1


def _risk_cfg(**risk):
    base = {"cvar_alpha": 0.1, "cvar_horizon": 4, "cvar_limit": 0.0, "cvar_min_segments": 4}
    return Config.build({"critic": {"kind": "quantile", "n_quantiles": 8}, "risk": base | risk})


def test_multiplier_reads_the_empirical_cvar_not_an_untrained_head():
    """A risk head predicting a disaster (−100) must not wind λ up while finished segments meet
    the limit (R-RISK-2: the multiplier acts on a trustworthy estimate)."""
    cfg = _risk_cfg()
    state = initial_risk_state(cfg, 2)
    rewards = torch.ones(16, 2)  # every 4-step segment returns +4 ≥ limit 0
    dones = torch.zeros(16, 2, dtype=torch.bool)
    head_out = torch.full((16, 2, 8), -100.0)
    est = risk_estimate(cfg, state, rewards, dones, head_out)
    assert est.metrics["risk/cvar_empirical_segment"] == pytest.approx(4.0)
    assert est.metrics["risk/cvar_pred_segment"] < -50.0
    assert est.metrics["risk/cvar_pred_error"] < -50.0  # logged calibration error
    assert est.lam == 0.0 and est.metrics["risk/cvar_violation"] < 0.0


def test_multiplier_rises_on_empirical_violation_and_holds_before_enough_segments():
    cfg = _risk_cfg(lambda_init=0.5, cvar_min_segments=9)
    state = initial_risk_state(cfg, 2)
    losing = -torch.ones(16, 2)  # segments return −4 < limit 0
    dones = torch.zeros(16, 2, dtype=torch.bool)
    est = risk_estimate(cfg, state, losing, dones, torch.zeros(16, 2, 8))
    assert est.lam == 0.5  # 8 segments finished < 9: λ holds
    assert "risk/cvar_violation" not in est.metrics
    est = risk_estimate(cfg, est.state, losing, dones, torch.zeros(16, 2, 8))
    assert est.lam > 0.5 and est.metrics["risk/cvar_violation"] > 0.0


@pytest.mark.parametrize("min_segments", [8, 9])
def test_nu_is_the_empirical_var_once_enough_segments_finished(min_segments):
    """ν — logged as ``risk/var`` and the threshold of the CVaR advantage — is the VaR of the
    finished segments once ``cvar_min_segments`` have finished (here 8 of 8), not the risk head's
    prediction of a disaster (−100); before that (9 needed) it is the head's."""
    cfg = _risk_cfg(cvar_alpha=0.25, cvar_min_segments=min_segments)
    state = initial_risk_state(cfg, 2)
    per_step = torch.tensor([[-3.0, 1.0], [2.0, -1.0], [0.5, 3.0], [-2.0, 1.5]])  # [segment, env]
    rewards = per_step.repeat_interleave(4, dim=0)  # [16, 2]: four 4-step segments per env
    head = torch.full((16, 2, 8), -100.0)
    est = risk_estimate(cfg, state, rewards, torch.zeros(16, 2, dtype=torch.bool), head)
    q = float(state.scaling.to_raw(torch.tensor(-100.0)))  # the head's quantiles, raw units
    # segment returns 4r: −12 −8 −4 2 4 6 8 12; VaR₀.₂₅ of 8 = the 2nd smallest
    nu = -8.0 if min_segments == 8 else q
    assert est.metrics["risk/var"] == pytest.approx(nu)
    # A_cvar_t = min(R − ν, 0)/α − min(acc_t + q − ν, 0)/α, acc_t = p·r at position p of a segment
    r = rewards.double()
    acc = r * torch.arange(16, dtype=torch.float64).remainder(4).unsqueeze(1)
    want = (torch.clamp(4 * r - nu, max=0) - torch.clamp(acc + q - nu, max=0)) / 0.25
    torch.testing.assert_close(est.advantage.double(), want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("update", ["dual", "pid"])
def test_lambda_update_kind_and_pid_terms_logged(update):
    cfg = _risk_cfg(lambda_update=update, pid_kp=0.5, pid_ki=0.1, pid_kd=0.0, pid_ema=0.0)
    state = initial_risk_state(cfg, 2)
    est = risk_estimate(
        cfg,
        state,
        -torch.ones(16, 2),
        torch.zeros(16, 2, dtype=torch.bool),
        torch.zeros(16, 2, 8),
    )
    v = est.metrics["risk/cvar_violation"]  # (0 − (−4)) / max(|0|, σ, 1e-8)
    if update == "pid":
        assert est.lam == pytest.approx(0.5 * v + 0.1 * v)
        assert est.metrics["risk/pid_p"] == pytest.approx(0.5 * v)
    else:
        assert est.lam == pytest.approx(cfg.risk.lambda_lr * v)
        assert "risk/pid_p" not in est.metrics


def test_pid_defaults_recover_from_a_long_violation_in_a_bounded_number_of_updates():
    """With the default PID gains and caps, 10,000 violated updates (v = +1) then slack
    (v = −0.669): λ falls below 1 within (pid_i_max − 1)/(ki·|v|) + 10 updates (≈ 540; the old
    clamp of the integral at lambda_max/ki took 2,950 from λ = 100)."""
    r = Config(risk={"lambda_update": "pid"}).risk
    assert r.pid_i_max is not None
    lam, pid = 0.0, core.PIDLagrangeState()
    for _ in range(10_000):
        lam, pid = multiplier_step(r, lam, pid, 1.0)
    assert pid.i == pytest.approx(r.pid_i_max)
    assert r.pid_i_max <= lam <= r.pid_i_max + 1.0  # the P term (kp·v = 0.5) on top
    bound = int((r.pid_i_max - 1.0) / (r.pid_ki * 0.669)) + 10
    lam = _slack_until_below_one(r, lam, pid, bound)
    assert lam < 1.0, f"λ = {lam:.2f} after {bound} updates of slack"
    assert r.pid_i_max / (1.0 + r.pid_i_max) >= 0.95  # the CVaR weight had saturated


def _slack_until_below_one(r, lam: float, pid, bound: int) -> float:
    """λ after up to ``bound`` updates of a satisfied constraint (v = −0.669), stopping once it
    is below 1."""
    for _ in range(bound):
        lam, pid = multiplier_step(r, lam, pid, -0.669)
        if lam < 1.0:
            break
    return lam


def test_dual_ascent_is_capped_and_recovers_from_a_long_violation_in_a_bounded_time():
    """Dual ascent with the defaults: 10,000 violated updates (v = +1) leave λ at
    ``dual_lambda_max`` (19, not lambda_max = 100), and once the constraint holds (v = −0.669)
    λ falls at once and is below 1 within (dual_lambda_max − 1)/(lambda_lr·|v|) + 1 updates
    (≈ 540; from λ = 100 it took 2,960)."""
    r = Config(risk={"lambda_update": "dual"}).risk
    assert r.dual_lambda_max is not None and r.lambda_max is not None
    assert r.dual_lambda_max < r.lambda_max
    lam, pid = 0.0, core.PIDLagrangeState()
    for _ in range(10_000):
        lam, pid = multiplier_step(r, lam, pid, 1.0)
    assert lam == r.dual_lambda_max
    lam, pid = multiplier_step(r, lam, pid, -0.669)
    assert lam == pytest.approx(r.dual_lambda_max - r.lambda_lr * 0.669)  # falls at once
    bound = int((r.dual_lambda_max - 1.0) / (r.lambda_lr * 0.669)) + 1
    lam = _slack_until_below_one(r, lam, pid, bound)
    assert lam < 1.0, f"λ = {lam:.2f} after {bound} updates of slack"
    # None: only lambda_max caps λ (the old behaviour, still available)
    uncapped = r.model_copy(update={"dual_lambda_max": None})
    assert multiplier_step(uncapped, 99.0, pid, 100.0)[0] == r.lambda_max


def test_no_segment_start_uses_the_accumulated_return():
    """A rollout inside one long segment: the pooled prediction adds acc_t (docs/risk.md)."""
    cfg = _risk_cfg(cvar_horizon=None, cvar_min_segments=10_000)
    state = initial_risk_state(cfg, 1)
    state.acc += 50.0
    state.length += 3
    est = risk_estimate(
        cfg,
        state,
        torch.ones(8, 1),
        torch.zeros(8, 1, dtype=torch.bool),
        torch.zeros(8, 1, 8),
    )
    assert est.metrics["risk/cvar_pred_segment"] >= 50.0  # not the head's 0 alone


def test_entropy_floor_learns_a_coefficient_and_alerts_when_binding():
    """A floor above the maximum entropy (1 nat > log 2) always binds: the coefficient grows
    geometrically (lr · gap ≥ 0.3 per update) and the alert fires."""
    model = DistributionalPPO(
        "riskppo/RiskyChoice-v0", seed=0, target_entropy=1.0, ent_floor_lr=1.0, **SMALL
    )
    model.config.monitor.entropy_floor_binding_updates = 3
    model.learn(4 * 32 * 12)
    latest = model.monitor.latest
    assert latest["train/target_entropy"] == 1.0
    assert latest["train/ent_floor_coef"] > 1e-4 * math.exp(0.3 * 11)
    assert model.monitor.alerts["entropy_floor_binding"] > 0
    assert model.state.entropy.floor.below >= 3


def test_entropy_floor_holds_entropy_where_the_policy_would_collapse():
    """RiskyChoice: the risky arm has the higher mean, so the unconstrained policy collapses onto
    it; with a floor at 60% of log 2 the entropy stays near the floor."""

    def final_entropy(**kw):
        model = DistributionalPPO(
            "riskppo/RiskyChoice-v0", seed=0, learning_rate=3e-3, **{**SMALL, **kw}
        )
        model.learn(4 * 32 * 40)
        return model.monitor.latest["train/entropy"]

    free = final_entropy()
    floored = final_entropy(target_entropy_frac=0.6)
    assert free < 0.2
    assert floored > 0.6 * math.log(2) - 0.1


def test_max_entropy_per_action_space():
    from riskppo.nn.distributions import max_entropy

    assert max_entropy(spaces.Discrete(3)) == pytest.approx(math.log(3))
    assert max_entropy(spaces.MultiDiscrete([3, 4])) == pytest.approx(math.log(12))
    assert max_entropy(spaces.Box(-1.0, 1.0, (2,))) == pytest.approx(2 * math.log(2))
    with pytest.raises(ValueError, match="finite bounds"):
        max_entropy(spaces.Box(-math.inf, math.inf, (1,)))


class UnboundedActions(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


def test_entropy_floor_fraction_on_an_unbounded_box_is_a_config_error():
    from riskppo import ConfigError

    with pytest.raises(ConfigError, match="target_entropy"):
        DistributionalPPO(UnboundedActions, target_entropy_frac=0.5, **SMALL)
    with pytest.raises(ConfigError, match="not both"):
        DistributionalPPO("CartPole-v1", target_entropy=0.1, target_entropy_frac=0.5, **SMALL)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("sharing", ["critics", "all"])
def test_cvar_constraint_trains_on_cuda(sharing):
    """Segments, the risk head, the bounded combination and PID on the GPU (devices never mix)."""
    model = DistributionalPPO(
        "CartPole-v1",
        seed=0,
        device="cuda",
        cvar_limit=10.0,
        cvar_alpha=0.1,
        cvar_horizon=8,
        lambda_update="pid",
        cvar_min_segments=1,
        lstm_sharing=sharing,
        **SMALL,
    )
    model.learn(4 * 32 * 3)
    assert model.monitor.latest["risk/lambda"] > 0.0
    assert model.state.risk.acc.device.type == "cpu"


def test_pid_and_risk_state_survive_a_checkpoint(tmp_path):
    """λ, the PID controller (integral, EMA, step count) and the recent segments round-trip."""
    model = DistributionalPPO(
        "CartPole-v1",
        seed=0,
        cvar_limit=10.0,
        cvar_alpha=0.1,
        cvar_horizon=8,
        lambda_update="pid",
        cvar_min_segments=1,
        **SMALL,
    )
    model.learn(4 * 32 * 3)
    assert model.state.risk.pid.steps == 3 and model.state.risk.lam > 0.0
    model.save(tmp_path / "ck")
    loaded = DistributionalPPO.load(tmp_path / "ck")
    assert loaded.state.risk.pid == model.state.risk.pid
    assert loaded.state.risk.lam == model.state.risk.lam
    assert list(loaded.state.risk.recent) == list(model.state.risk.recent)


@pytest.mark.parametrize("critic", ["quantile", "categorical"])
def test_predicted_cvar_uses_the_scaling_of_the_rollout(
    critic, small_cartpole, rollout_and_estimates
):
    """(R-RISK-1) ``risk/cvar_pred`` de-normalises the rollout-time critic outputs with
    the scaling they were produced under. Mutation: de-normalise with the updated scaling."""
    model = small_cartpole(critic=critic)
    model.monitor = Monitor(None, tensorboard=False)
    rollout_scaling = model.state.scaling
    _, est = rollout_and_estimates(model)
    alpha = model.config.risk.cvar_alpha
    taus = core.quantile_midpoints(max(model.critic.n_out, 32))

    def cvar_pred(scaling):
        per_critic = [
            core.cvar_from_quantiles(scaling.to_raw(model.critic.quantiles(o, taus)), alpha)
            for o in est.critic_out[: model.policy.n_critics]
        ]
        return float(torch.stack(per_critic).min(dim=0).values.mean())

    expected = cvar_pred(rollout_scaling)
    assert abs(expected - cvar_pred(est.scaling)) > 0.1  # the statistics update moved the units
    logged = risk_log(model.learner(), est, model.state).cvar_pred
    assert logged == pytest.approx(expected, rel=1e-6)
    if critic == "quantile":  # PopArt: the rescaled critic, in the new units, predicts the same
        with torch.no_grad():
            d = est.data
            out, _, _ = model.policy.critic_sequence(d.obs, d.episode_starts, d.state)
        per_critic = [
            core.cvar_from_quantiles(est.scaling.to_raw(model.critic.quantiles(o, taus)), alpha)
            for o in out[: model.policy.n_critics]
        ]
        after = float(torch.stack(per_critic).min(dim=0).values.mean())
        assert after == pytest.approx(expected, rel=1e-4)
    model.close()


TINY = dict(n_envs=2, n_steps=16, batch_size=32, n_epochs=1, lstm_hidden_size=8)


class CostEnv(gym.Env):
    """Never ends within a rollout; ``info["reward_costs_fraction"]`` cycles through ``values``
    (``None``: the key is left out at that step; a string is not a number)."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)
    values: tuple[float | str | None, ...] = (
        0.1,
        math.nan,
        0.3,
        math.inf,
        0.5,
        -math.inf,
        "n/a",
        0.4,
    )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.n += 1
        c = self.values[self.n % len(self.values)]
        info = {} if c is None else {"reward_costs_fraction": c}
        return np.full(2, 0.1, np.float32), 1.0, False, self.n >= 1000, info


def _metrics_after_one_update(tmp_path, values):
    env = type("Env", (CostEnv,), {"values": values})
    model = DistributionalPPO(env, seed=0, run_dir=tmp_path, **TINY)
    model.learn(32)  # one update: 16 steps × 2 envs
    model.close()
    lines = [json.loads(s) for s in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 1
    return lines[0]


def test_reward_costs_fraction_ignores_non_finite_entries_and_counts_them(tmp_path):
    """``rollout/reward_costs_fraction`` is the mean of the finite entries only (0.325 here);
    the 16 others (NaN, +inf, −inf, a string: 4 per 8 steps × 2 cycles × 2 envs) are counted in
    ``warn/reward_costs_fraction_nonfinite``, and none of them stops training. Mutations: the
    mean over all entries (NaN); the counter not recorded (or always 0); ``float(value)`` in
    ``collect._finite_or_nan`` without its ``try`` (the string raises)."""
    m = _metrics_after_one_update(tmp_path, CostEnv.values)
    assert m["rollout/reward_costs_fraction"] == pytest.approx(0.325, abs=1e-6)
    assert m["warn/reward_costs_fraction_nonfinite"] == 16


def test_all_non_finite_costs_are_still_counted(tmp_path):
    """SPEC R-MON: non-finite costs → NaN + ``warn/`` counter, also when no entry is finite."""
    m = _metrics_after_one_update(tmp_path, (math.nan, math.inf))
    assert m.get("warn/reward_costs_fraction_nonfinite") == 32


def test_absent_costs_are_not_counted_as_non_finite(tmp_path):
    """An env that reports costs only at some steps (here every other step, all finite) gets the
    mean of what it reported and no non-finite warning."""
    m = _metrics_after_one_update(tmp_path, (0.2, None, 0.4, None))
    assert m["rollout/reward_costs_fraction"] == pytest.approx(0.3, abs=1e-6)
    assert "warn/reward_costs_fraction_nonfinite" not in m
