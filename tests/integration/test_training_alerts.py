"""Alerts raised from a real update's metrics (not from hand-made rows)."""

from __future__ import annotations

import re

import pytest


@pytest.mark.parametrize("twin", [True, False])
@pytest.mark.parametrize(("vf_coef", "fires"), [(0.0, True), (0.5, False)])
def test_vanishing_critic_gradient_alert_reads_the_update_metrics(
    twin, vf_coef, fires, small_cartpole
):
    """(R-MON) the alert reads the per-critic gradient norms the update produces. With
    ``vf_coef=0`` no loss term reaches the critic heads (their gradient is exactly 0) and the
    alert fires through the trainer's real logging path; with the default ``vf_coef`` it does
    not. Mutation: read a key the update never produces (``critic_grad_norm``)."""
    model = small_cartpole(vf_coef=vf_coef, twin_critics=twin)
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
