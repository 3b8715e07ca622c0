"""A rollout's reward slopes: each decision's own slope plus the next step's slope with respect
to it, at unit RMS for the loss, and none where the env reports none or the term is off."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from riskppo.algo.collect import _Buffers
from riskppo.algo.returns import RewardMoments, update_reward_moments
from riskppo.algo.terms import SLOPES, PathwiseTerm
from riskppo.config import Config


def _buffers(now: np.ndarray, prev: np.ndarray) -> _Buffers:
    T, N = now.shape
    buf = _Buffers.allocate(T, N, 3, torch.device("cpu"))
    for t in range(T):
        infos = [{"reward_slope": now[t, i], "reward_slope_prev": prev[t, i]} for i in range(N)]
        buf.record_infos(t, np.zeros(N, dtype=bool), infos, None)  # type: ignore[arg-type]
    return buf


def test_each_decision_gets_its_own_and_the_next_steps_slope():
    rng = np.random.default_rng(0)
    now, prev = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    both = _buffers(now, prev).reward_slopes(torch.device("cpu"))
    assert both is not None
    got = both[0]
    for t in range(5):
        for i in range(2):
            want = now[t, i] + (prev[t + 1, i] if t + 1 < 5 else 0.0)
            assert float(got[t, i]) == pytest.approx(want, rel=1e-6)


def test_no_slopes_without_reports_and_bad_reports_count_as_zero():
    buf = _Buffers.allocate(2, 1, 3, torch.device("cpu"))
    buf.record_infos(0, np.zeros(1, dtype=bool), [{}], None)  # type: ignore[arg-type]
    buf.record_infos(1, np.zeros(1, dtype=bool), [{}], None)  # type: ignore[arg-type]
    assert buf.reward_slopes(torch.device("cpu")) is None
    bad = _buffers(np.array([[float("nan")], [2.0]]), np.array([[0.0], [float("inf")]]))
    both = bad.reward_slopes(torch.device("cpu"))
    assert both is not None and both[0].tolist() == [[0.0], [2.0]]


def _slopes(cfg: Config, g: torch.Tensor, actions: torch.Tensor, scale=lambda x: x):
    rollout = SimpleNamespace(actions=actions, reward_slopes=g)
    return PathwiseTerm().rollout_inputs(cfg, rollout, scale, RewardMoments()).get(SLOPES)  # type: ignore[arg-type]


def test_unit_slopes_have_unit_rms_and_are_off_at_zero_weight():
    """The pathwise term's batch input: the slopes at unit RMS, scaled as the constraint scales
    the return's part of the advantage; none at weight 0 or for discrete actions."""
    cfg = Config(ppo={"pathwise_coef": 1.0})
    g = torch.tensor([[3.0, -1.0], [0.0, 2.0]])
    box = torch.zeros(2, 2, 1)
    unit = _slopes(cfg, g, box)
    assert unit is not None and float(unit.pow(2).mean()) == pytest.approx(1.0)
    assert torch.allclose(unit * g.pow(2).mean().sqrt(), g)
    assert torch.equal(_slopes(cfg, g, box, lambda x: x / 3.0), unit / 3.0)
    assert _slopes(Config(ppo={"pathwise_coef": 0.0}), g, box) is None
    assert _slopes(cfg, g, torch.zeros(2, 2, dtype=torch.long)) is None


def test_the_next_steps_part_is_reported_apart():
    """The second part of ``reward_slopes`` is the share of each decision's slope that the next
    step's reward contributes (``reward_slope_prev`` of step t+1), 0 at the rollout's last step."""
    rng = np.random.default_rng(1)
    now, prev = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    buf = _buffers(now, prev)
    both = buf.reward_slopes(torch.device("cpu"))
    assert both is not None
    g, nxt = both
    assert np.allclose(nxt[:-1].numpy(), prev[1:], rtol=1e-6) and not nxt[-1].any()
    assert np.allclose((g - nxt).numpy(), now, rtol=1e-5, atol=1e-6)


def test_sharpe_utility_weighs_the_slopes_by_the_rollouts_rewards():
    """With ``ppo.pathwise_utility: sharpe`` a rollout whose rewards differ gives a step with a
    higher reward a smaller unit slope; ``return`` keeps the slopes as they are."""
    g = torch.ones(2, 2)
    rewards = torch.tensor([[0.03, 0.0], [0.01, 0.02]])
    rollout = SimpleNamespace(
        actions=torch.zeros(2, 2, 1), reward_slopes=g, reward_slopes_next=torch.zeros(2, 2),
        rewards=rewards,
    )  # fmt: skip
    term = PathwiseTerm()
    cfg = Config(ppo={"pathwise_coef": 1.0, "pathwise_utility": "sharpe"})
    own = update_reward_moments(RewardMoments(), rewards, 0.1)  # the first rollout: its own
    unit = term.rollout_inputs(cfg, rollout, lambda x: x, own)[SLOPES]  # type: ignore[arg-type]
    assert unit[0, 0] < unit[1, 1] < unit[1, 0] < unit[0, 1]
    plain = Config(ppo={"pathwise_coef": 1.0})
    flat = term.rollout_inputs(plain, rollout, lambda x: x, own)[SLOPES]  # type: ignore[arg-type]
    assert torch.equal(flat, torch.ones(2, 2))


def test_a_losing_rollout_is_weighed_by_the_remembered_aversion():
    """A rollout that lost money has no risk aversion of its own (its slopes come back as they
    are); with the moments of earlier, profitable rollouts remembered, its higher rewards still
    weigh less."""
    g = torch.ones(2, 2)
    losing = torch.tensor([[-0.03, 0.0], [0.01, -0.02]])
    rollout = SimpleNamespace(
        actions=torch.zeros(2, 2, 1), reward_slopes=g, reward_slopes_next=torch.zeros(2, 2),
        rewards=losing,
    )  # fmt: skip
    cfg = Config(ppo={"pathwise_coef": 1.0, "pathwise_utility": "sharpe"})
    term = PathwiseTerm()
    own = update_reward_moments(RewardMoments(), losing, 0.1)
    alone = term.rollout_inputs(cfg, rollout, lambda x: x, own)[SLOPES]  # type: ignore[arg-type]
    assert torch.equal(alone, torch.ones(2, 2))
    earlier = update_reward_moments(RewardMoments(), torch.full((2, 2), 0.01), 0.1)
    moments = update_reward_moments(earlier, losing, 0.1)
    assert moments.aversion > 0
    unit = term.rollout_inputs(cfg, rollout, lambda x: x, moments)[SLOPES]  # type: ignore[arg-type]
    assert unit[1, 0] < unit[0, 1] < unit[1, 1] < unit[0, 0]


def test_an_action_of_several_numbers_gets_a_slope_for_each():
    """A portfolio's action of A numbers: each report is A slopes, kept per number; a report of
    another length or with a non-finite number counts as zero."""
    T, N, A = 3, 2, 4
    rng = np.random.default_rng(2)
    now, prev = rng.normal(size=(T, N, A)), rng.normal(size=(T, N, A))
    buf = _Buffers.allocate(T, N, 3, torch.device("cpu"), n_actions=A)
    for t in range(T):
        infos = [{"reward_slope": now[t, i], "reward_slope_prev": prev[t, i]} for i in range(N)]
        if t == 1:
            infos[0]["reward_slope"] = now[t, 0, :2]  # wrong length
            infos[1]["reward_slope_prev"] = np.full(A, np.nan)
        buf.record_infos(t, np.zeros(N, dtype=bool), infos, None)  # type: ignore[arg-type]
    both = buf.reward_slopes(torch.device("cpu"))
    assert both is not None
    g, nxt = both
    assert g.shape == nxt.shape == (T, N, A)
    want_now, want_prev = now.copy(), prev.copy()
    want_now[1, 0] = 0.0
    want_prev[1, 1] = 0.0
    want = want_now + np.concatenate([want_prev[1:], np.zeros((1, N, A))])
    assert np.allclose(g.numpy(), want, rtol=1e-6, atol=1e-7)
    cfg = Config(ppo={"pathwise_coef": 1.0})
    unit = _slopes(cfg, g, torch.zeros(T, N, A))
    assert unit is not None and unit.shape == (T, N, A)
    assert float(unit.pow(2).mean()) == pytest.approx(1.0)
    assert _slopes(cfg, g, torch.zeros(T, N, A + 1)) is None  # slopes of another action
