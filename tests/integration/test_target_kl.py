"""``ppo.target_kl``: the update stops before the step of the first minibatch whose KL is above
it, and a target above every minibatch's KL changes nothing."""

from __future__ import annotations

import torch

from riskppo.algo.update import (
    UpdateContext,
    UpdateMetrics,
    apply_minibatch,
    ppo_update,
)


def _params(model):
    return [p.detach().clone() for p in model.policy.parameters()]


def test_target_kl_stops_before_the_step_of_the_minibatch_above_it(
    small_cartpole, rollout_and_estimates
):
    """(R-ALG-11, like SB3) the minibatch whose k3 KL (measured before its step)
    exceeds ``target_kl`` is not applied. Two minibatches per epoch: the first replays the
    rollout's policy (KL exactly 0), the second follows one step (KL ~2.5e-7 > 1e-8), so the
    update must leave exactly the parameters one step on the first minibatch gives. Mutation:
    check the KL after the optimizer step (the second minibatch applied, then the loop stops)."""
    target = 1e-8
    model = small_cartpole(target_kl=target)
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
    ref = small_cartpole()
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


def test_target_kl_above_every_minibatch_changes_nothing(small_cartpole, rollout_and_estimates):
    """with a target no minibatch exceeds, the update equals one without target_kl."""
    results = []
    for target_kl in (None, 1.0):
        model = small_cartpole(target_kl=target_kl)
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
