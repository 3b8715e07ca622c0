"""Regression tests of defects a code review found (each fails when its bug returns).

Each test fails when its defect returns (the mutation is named in the test's docstring).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from riskppo import DistributionalPPO, core
from riskppo.train.collect import collect_rollout
from riskppo.train.estimate import estimate
from riskppo.train.loop import apply_rescales, reset_carry, risk_log
from riskppo.train.monitor import Monitor
from riskppo.train.update import (
    NonFiniteTrainingError,
    UpdateContext,
    UpdateMetrics,
    apply_minibatch,
    minibatch_loss,
    ppo_update,
)


def rollout_and_estimates(model):
    """One rollout from freshly reset envs and its estimates (no optimizer step)."""
    model.state = reset_carry(model.learner(), model.state)
    cfg = model.config
    rollout, _, _ = collect_rollout(
        model.policy,
        model.env,
        model.state.carry,
        cfg.ppo.n_steps,
        cfg.ppo.chunk_len,
        model.state.rng.sample,
    )
    scaling = model.state.scaling
    est = estimate(cfg, model.policy, model.critic, scaling, rollout, model.state.risk)
    apply_rescales(model.policy, est.rescales)  # the loop's PopArt step
    return rollout, est


PENDULUM = dict(n_envs=2, n_steps=32, batch_size=64, n_epochs=1, lstm_hidden_size=16)


def test_nonfinite_skips_are_counted_across_updates():
    """Defect 1 (R-ALG-9, R-REL-6): with one minibatch per update, a model whose parameters are
    non-finite stops after ``max_nonfinite_updates`` updates instead of training forever.
    Mutation: rebuild the count every update (not passing ``consecutive_skips`` in)."""
    model = DistributionalPPO("Pendulum-v1", seed=0, **PENDULUM)
    # the repro set log_std_init=inf, which the config now refuses (non-finite floats);
    # a parameter that became non-finite (e.g. by a bad load or a diverged run) is the same case
    with torch.no_grad():
        model.policy.action_head.log_std.fill_(float("inf"))
    per_update = 2 * 32
    limit = model.config.ppo.max_nonfinite_updates
    with pytest.raises(NonFiniteTrainingError, match="consecutive minibatches"):
        model.learn(per_update * (limit + 3))
    assert model.n_updates == limit - 1  # the update that reached the limit raised
    assert model.state.counters.nonfinite_skips == limit - 1
    assert torch.isinf(model.policy.action_head.log_std).all()
    model.close()


def test_nonfinite_skip_count_resets_on_an_applied_minibatch():
    """Defect 1: the carried count goes back to 0 as soon as a minibatch is applied."""
    model = DistributionalPPO("Pendulum-v1", seed=0, **PENDULUM)
    model.state = model.state.with_counters(
        nonfinite_skips=model.config.ppo.max_nonfinite_updates - 1
    )
    model.learn(2 * 32)
    assert model.state.counters.nonfinite_skips == 0
    model.close()


def test_nonfinite_skip_count_survives_a_checkpoint(tmp_path):
    """Defect 1: the carried count is part of the checkpoint (exact resume)."""
    model = DistributionalPPO("Pendulum-v1", seed=0, **PENDULUM)
    model.state = model.state.with_counters(nonfinite_skips=3)
    model.save(tmp_path / "ckpt")
    loaded = DistributionalPPO.load(tmp_path / "ckpt", rebuild_env=False)
    assert loaded.state.counters.nonfinite_skips == 3
    model.close()
    loaded.close()


CARTPOLE = dict(n_envs=4, n_steps=32, batch_size=64, bptt_len=16, n_epochs=2, lstm_hidden_size=16)


def _first_minibatch_stats(model, est):
    ctx = UpdateContext(
        model.config, model.policy, model.critic, model.optimizer, model.state.rng.shuffle, 0.0
    )
    L = est.data.obs.shape[0]
    mb = next(est.data.minibatches(model.config.ppo.batch_size // L, model.state.rng.shuffle))
    with torch.no_grad():
        _, stats, n_bad = minibatch_loss(ctx, mb)
    assert n_bad == 0
    return stats


@pytest.mark.parametrize(
    ("critic", "mode", "popart"),
    [
        ("quantile", "per_quantile", False),
        ("quantile", "mean_only", False),
        ("quantile", "mean_and_variance", False),
        ("categorical", "mean_only", False),
        ("scalar", "mean_only", False),
        ("quantile", "per_quantile", True),
    ],
)
def test_value_clipping_does_not_fire_before_any_step(critic, mode, popart):
    """Defect 2 (R-ALG-5/8): before any optimizer step the critic's outputs equal its old
    predictions, so no sample is value-clipped — with PopArt off as well as on. Mutation: convert
    the old predictions to the new units whenever ``critic.supports_popart`` (not when PopArt
    actually rescaled the outputs)."""
    model = DistributionalPPO(
        "CartPole-v1",
        seed=0,
        critic=critic,
        popart=popart,
        clip_range_vf=0.05,
        vf_clip_mode=mode,
        **CARTPOLE,
    )
    scale_before = model.state.scaling.scale
    _, est = rollout_and_estimates(model)
    assert est.scaling.scale != pytest.approx(scale_before, rel=0.1)  # the units did change
    stats = _first_minibatch_stats(model, est)
    assert float(stats["vf_clip_fraction"]) == 0.0
    assert float(stats["clip_fraction"]) == 0.0
    model.close()


@pytest.mark.parametrize("critic", ["quantile", "categorical"])
def test_predicted_cvar_uses_the_scaling_of_the_rollout(critic):
    """Defect 4 (R-RISK-1): ``risk/cvar_pred`` de-normalises the rollout-time critic outputs with
    the scaling they were produced under. Mutation: de-normalise with the updated scaling."""
    model = DistributionalPPO("CartPole-v1", seed=0, critic=critic, **CARTPOLE)
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


def _params(model):
    return [p.detach().clone() for p in model.policy.parameters()]


def test_target_kl_stops_before_the_step_of_the_minibatch_above_it():
    """Defect 6 (R-ALG-11, like SB3): the minibatch whose k3 KL (measured before its step)
    exceeds ``target_kl`` is not applied. Two minibatches per epoch: the first replays the
    rollout's policy (KL exactly 0), the second follows one step (KL ~2.5e-7 > 1e-8), so the
    update must leave exactly the parameters one step on the first minibatch gives. Mutation:
    check the KL after the optimizer step (the second minibatch applied, then the loop stops)."""
    target = 1e-8
    model = DistributionalPPO("CartPole-v1", seed=0, target_kl=target, **CARTPOLE)
    _, est = rollout_and_estimates(model)
    ctx = UpdateContext(
        model.config, model.policy, model.critic, model.optimizer, model.state.rng.shuffle, 0.0
    )
    before = _params(model)
    m = ppo_update(ctx, est.data)
    assert (m.n_applied, m.early_stop_epoch) == (1, 0)
    assert m.early_stop_kl is not None and m.early_stop_kl > target
    assert m.means["approx_kl_k3"] <= target  # the applied minibatch's KL was below the target

    # the reference: an identical model, exactly one step on the same first minibatch
    ref = DistributionalPPO("CartPole-v1", seed=0, **CARTPOLE)
    _, ref_est = rollout_and_estimates(ref)
    ref_ctx = UpdateContext(
        ref.config, ref.policy, ref.critic, ref.optimizer, ref.state.rng.shuffle, 0.0
    )
    L = ref_est.data.obs.shape[0]
    first = next(ref_est.data.minibatches(ref.config.ppo.batch_size // L, ref.state.rng.shuffle))
    assert apply_minibatch(ref_ctx, first, UpdateMetrics()) is not None
    after, expected = _params(model), _params(ref)
    assert any(not torch.equal(a, b) for a, b in zip(after, before))  # one step was taken
    for a, e in zip(after, expected):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    model.close()
    ref.close()


def test_target_kl_above_every_minibatch_changes_nothing():
    """Defect 6: with a target no minibatch exceeds, the update equals one without target_kl."""
    results = []
    for target_kl in (None, 1.0):
        model = DistributionalPPO("CartPole-v1", seed=0, target_kl=target_kl, **CARTPOLE)
        _, est = rollout_and_estimates(model)
        ctx = UpdateContext(
            model.config, model.policy, model.critic, model.optimizer, model.state.rng.shuffle, 0.0
        )
        m = ppo_update(ctx, est.data)
        assert m.early_stop_epoch is None and m.early_stop_kl is None
        assert m.n_applied == 4  # 2 epochs × 2 minibatches
        results.append(_params(model))
        model.close()
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("twin", [True, False])
@pytest.mark.parametrize(("vf_coef", "fires"), [(0.0, True), (0.5, False)])
def test_vanishing_critic_gradient_alert_reads_the_update_metrics(twin, vf_coef, fires):
    """Defect 8 (R-MON): the alert reads the per-critic gradient norms the update produces. With
    ``vf_coef=0`` no loss term reaches the critic heads (their gradient is exactly 0) and the
    alert fires through the trainer's real logging path; with the default ``vf_coef`` it does
    not. Mutation: read a key the update never produces (``critic_grad_norm``)."""
    model = DistributionalPPO("CartPole-v1", seed=0, vf_coef=vf_coef, twin_critics=twin, **CARTPOLE)
    model.learn(4 * 32)
    assert model.n_updates == 1
    assert model.monitor is not None
    latest = model.monitor.latest
    keys = sorted(k for k in latest if re.fullmatch(r"train/critic\d+_grad_norm", k))
    assert keys == (
        ["train/critic1_grad_norm", "train/critic2_grad_norm"]
        if twin
        else ["train/critic1_grad_norm"]
    )
    assert all((latest[k] == 0.0) == fires for k in keys)
    assert ("critic_grad_vanishing" in model.monitor.alerts) == fires
    if fires:
        assert "critic1_grad_norm" in model.monitor.alert_messages["critic_grad_vanishing"]
    model.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_lstm_sharing_all_runs_on_cuda():
    """Defect 5: with ``lstm_sharing="all"`` on CUDA, collect's actor latents, the critic's value
    distribution and the attacked agent's episode starts are allocated on the model's device.
    Mutation: drop ``device=`` from any of them (a device-mismatch error). Skipped without CUDA."""
    from riskppo.evaluation.robustness import AttackedAgent

    model = DistributionalPPO("CartPole-v1", seed=0, lstm_sharing="all", device="cuda", **CARTPOLE)
    model.learn(2 * 4 * 32)
    obs = model.env.reset()
    taus, values = model.value_distribution(obs)
    assert values.shape == (4, model.critic.n_out) and taus.shape == (model.critic.n_out,)
    agent = AttackedAgent(model, "random", 0.05)
    actions, state = agent.predict(obs, None, np.ones(4, dtype=bool))
    assert actions.shape == (4,) and state.pi.h.device.type == "cuda"
    model.close()
