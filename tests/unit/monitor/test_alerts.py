"""Alert rules (R-MON) as pure functions: each fires on a constructed case, and not on a benign
one. A rule that never fires, or fires on healthy numbers, fails here."""

from __future__ import annotations

import dataclasses
import math

import pytest

from riskppo.algo.log import EntropyFloorLog, EstimateLog, LossStats, UpdateLog
from riskppo.config import MonitorConfig
from riskppo.monitor.alerts import RULES, alerts

T = MonitorConfig()
CAP = 1000.0  # critic.scale_cap


def healthy_losses(**changes: object) -> LossStats:
    base = LossStats(
        loss=0.5,
        policy_loss=-0.01,
        value_loss=0.3,
        entropy=0.6,
        clip_fraction=0.1,
        log_ratio_clamp_frac=0.0,
        large_log_ratio_count=0.0,
        approx_kl_k1=0.01,
        approx_kl_k3=0.01,
        vf_clip_fraction=0.1,
        grad_norm_pre_clip=1.0,
        grad_norm_post_clip=0.5,
        grad_norms={"lstm_actor": 0.3, "critic1": 0.2, "critic2": 0.25, "risk_head": 0.0},
        optional={"bc_loss_ratio": 0.1},
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def healthy(**changes: object) -> UpdateLog:
    base = UpdateLog(
        num_timesteps=1024,
        n_updates=4,
        losses=healthy_losses(),
        n_skipped_nonfinite_ratio=0,
        n_skipped_nonfinite_loss=0,
        learning_rate=3e-4,
        ent_coef=0.0,
        entropy_per_dim=None,
        discrete=True,
        estimate=EstimateLog(0.5, 0.0, 1.0, 4.0, 0.1, 20.0, 10.0, 0.1),
        entropy_floor=EntropyFloorLog(target=-1.0, coef=1e-3, below=3),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def fired(log: UpdateLog) -> set[str]:
    return {a.name for a in alerts(log, T, CAP)}


def test_healthy_numbers_raise_nothing() -> None:
    assert fired(healthy()) == set()
    assert fired(healthy(losses=None)) == set()  # no minibatch applied: nothing to judge


FIRING = {
    "log_ratio_clamp": healthy(losses=healthy_losses(log_ratio_clamp_frac=0.05)),
    "grad_norm_pre_clip": healthy(
        losses=healthy_losses(clip_norms={"actor": 0.2, "critic": 5000.0, "risk_head": 80.0})
    ),
    "critic_grad_imbalance": healthy(
        losses=healthy_losses(grad_norms={"critic1": 5.0, "critic2": 0.01})
    ),
    "critic_grad_vanishing": healthy(
        losses=healthy_losses(grad_norms={"critic1": 1e-9, "critic2": 1e-9})
    ),
    "entropy_collapse": healthy(losses=healthy_losses(entropy=0.001)),
    "loss_out_of_range": healthy(losses=healthy_losses(value_loss=math.nan)),
    "bc_loss_ratio": healthy(losses=healthy_losses(optional={"bc_loss_ratio": 0.9})),
    "advantage_outliers": healthy(estimate=EstimateLog(0.5, 0.0, 1.0, 25.0, 0.1, 20.0, 10.0, 0.1)),
    "entropy_floor_binding": healthy(entropy_floor=EntropyFloorLog(-1.0, 0.2, 50)),
    "excessive_return_scaling": healthy(
        estimate=EstimateLog(0.5, 0.0, 1.0, 4.0, 0.1, 20.0, 10.0, 5000.0)
    ),
}


@pytest.mark.parametrize("name", sorted(FIRING))
def test_each_rule_fires_on_its_case_and_only_there(name: str) -> None:
    assert fired(FIRING[name]) == {name}


def test_every_rule_has_a_firing_case() -> None:
    names = {rule.__name__ for rule in RULES} | {"excessive_return_scaling"}
    assert names == set(FIRING)


def test_boundaries_and_kinds() -> None:
    # continuous actions: the per-dimension entropy decides, not the discrete threshold
    cont = healthy(discrete=False, losses=healthy_losses(entropy=-5.0), entropy_per_dim=-2.5)
    assert fired(cont) == {"entropy_collapse"}
    assert fired(dataclasses.replace(cont, entropy_per_dim=-1.5)) == set()
    # twin critics out of balance either way
    low = healthy(losses=healthy_losses(grad_norms={"critic1": 0.001, "critic2": 0.5}))
    assert fired(low) == {"critic_grad_imbalance"}
    # the risk head's zero gradient is no vanishing critic; one critic alone has no ratio
    solo = healthy(losses=healthy_losses(grad_norms={"critic1": 0.2, "risk_head": 0.0}))
    assert fired(solo) == set() and solo.critics_grad_ratio() is None
    # exactly at a threshold does not fire (strict inequalities, as documented)
    at = healthy(losses=healthy_losses(grad_norm_pre_clip=T.grad_norm_pre_clip))
    assert fired(at) == set()
    assert fired(dataclasses.replace(at, losses=healthy_losses(grad_norm_pre_clip=1e4))) == {
        "grad_norm_pre_clip"  # a log without clip-group norms: the total decides
    }
    # the entropy floor binds after entropy_floor_binding_updates updates in a row, not before
    below = T.entropy_floor_binding_updates - 1
    assert fired(healthy(entropy_floor=EntropyFloorLog(-1.0, 0.2, below))) == set()


def test_scalars_name_every_metric_once() -> None:
    log = healthy(
        losses=healthy_losses(optional={"bc_loss_ratio": 0.1, "sa_kl": 0.01}),
        vgs_factors={"actor": 0.9},
        costs_fraction=0.2,
        costs_nonfinite=3,
        ep_rew_mean=1.0,
    )
    names = [k for k, _ in log.scalars()]
    assert len(names) == len(set(names))
    for key in (
        "train/critic1_grad_norm",
        "train/critics_grad_ratio",
        "train/sa_kl",
        "train/vgs_scale/actor",
        "rollout/reward_costs_fraction",
        "warn/reward_costs_fraction_nonfinite",
        "train/target_entropy",
    ):
        assert key in names, key


def test_loss_stats_from_update_means() -> None:
    means = {f.name: 1.0 for f in dataclasses.fields(LossStats)}
    del means["grad_norms"], means["clip_norms"], means["optional"]
    means |= {"critic1_grad_norm": 2.0, "lstm_actor_grad_norm": 3.0, "bc_loss": 4.0}
    means |= {"actor_pre_clip_norm": 5.0, "critic_pre_clip_norm": 6.0}
    stats = LossStats.from_means(means)
    assert stats.grad_norms == {"critic1": 2.0, "lstm_actor": 3.0}
    assert stats.clip_norms == {"actor": 5.0, "critic": 6.0}
    assert stats.optional == {"bc_loss": 4.0}
    assert dict(stats.scalars()) == means
    del means["entropy"]
    with pytest.raises(KeyError, match="entropy"):
        LossStats.from_means(means)


def test_the_default_runs_gradient_norms_raise_no_alert() -> None:
    """The clip-group norms of the default GOOGL trading run's first update, its largest (the
    critic and the risk head fit a fresh network; later updates stay near 20-45), raise nothing;
    a critic norm twenty times that does, and the message names the group and says what to do."""
    first = {"actor": 0.0045, "critic": 105.5, "risk_head": 77.9}
    assert (
        fired(healthy(losses=healthy_losses(grad_norm_pre_clip=131.2, clip_norms=first))) == set()
    )
    boom = healthy(losses=healthy_losses(clip_norms=first | {"critic": 2500.0}))
    (alert,) = alerts(boom, T, CAP)
    assert alert.name == "grad_norm_pre_clip"
    assert "critic 2.5e+03" in alert.message and "ppo.learning_rate" in alert.message
