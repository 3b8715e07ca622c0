"""Segment returns and the CVaR advantage against plain loops (R-RISK-2)."""

from __future__ import annotations

import math

import pytest
import torch

from riskppo.core import cvar_advantage, segment_returns


def reference_segments(rewards, dones, horizon, acc0, len0):
    """Per env, walk the steps and close a segment at an episode end or after `horizon` steps."""
    T, N = rewards.shape
    seg_ret = [[math.nan] * N for _ in range(T)]
    acc_before = [[0.0] * N for _ in range(T)]
    for i in range(N):
        acc, length, members = float(acc0[i]), int(len0[i]), []
        for t in range(T):
            acc_before[t][i] = acc
            acc += float(rewards[t, i])
            length += 1
            members.append(t)
            if bool(dones[t, i]) or (horizon is not None and length >= horizon):
                for s in members:
                    seg_ret[s][i] = acc
                acc, length, members = 0.0, 0, []
    return torch.tensor(seg_ret, dtype=torch.float64), torch.tensor(acc_before, dtype=torch.float64)


@pytest.mark.parametrize("horizon", [None, 1, 3, 7])
def test_segment_returns_match_plain_loop(horizon):
    g = torch.Generator().manual_seed(0)
    T, N = 20, 5
    rewards = torch.randn(T, N, generator=g)
    dones = torch.rand(T, N, generator=g) < 0.15
    acc0 = torch.randn(N, generator=g, dtype=torch.float64)
    len0 = torch.tensor([0, 2, 1, 0, 5])
    info = segment_returns(rewards, dones, horizon, acc0, len0)
    ref_ret, ref_acc = reference_segments(rewards, dones, horizon, acc0, len0)
    torch.testing.assert_close(info.acc_before, ref_acc)
    assert torch.equal(torch.isnan(info.seg_return), torch.isnan(ref_ret))
    torch.testing.assert_close(torch.nan_to_num(info.seg_return), torch.nan_to_num(ref_ret))


def test_open_segment_carries_over_between_rollouts():
    rewards = torch.ones(6, 1)
    dones = torch.zeros(6, 1, dtype=torch.bool)
    first = segment_returns(
        rewards[:3], dones[:3], 4, torch.zeros(1), torch.zeros(1, dtype=torch.long)
    )
    second = segment_returns(rewards[3:], dones[3:], 4, first.acc_after, first.len_after)
    assert torch.isnan(first.seg_return).all()  # the 4-step segment has not ended yet
    assert float(second.seg_return[0, 0]) == 4.0  # ends at the 4th step overall
    assert float(second.acc_before[0, 0]) == 3.0


def test_cvar_advantage_sign_baseline_and_unfinished_segments():
    rewards = torch.tensor([[-5.0], [1.0], [2.0]])
    dones = torch.tensor([[True], [True], [False]])
    info = segment_returns(rewards, dones, None, torch.zeros(1), torch.zeros(1, dtype=torch.long))
    nu, alpha = 0.0, 0.5
    zero_baseline = torch.full((3, 1, 4), 100.0)  # predicted return-to-go far above ν → b = 0
    adv = cvar_advantage(info, zero_baseline, nu, alpha)
    assert float(adv[0, 0]) == pytest.approx((-5.0 - nu) / alpha)  # below ν: (R − ν)/α
    assert float(adv[1, 0]) == 0.0  # above ν: no extra advantage
    assert float(adv[2, 0]) == 0.0  # unfinished segment: nothing
    low = torch.full((3, 1, 4), -5.0)  # baseline predicts the shortfall exactly at step 0
    adv_b = cvar_advantage(info, low, nu, alpha)
    assert float(adv_b[0, 0]) == pytest.approx(0.0)
