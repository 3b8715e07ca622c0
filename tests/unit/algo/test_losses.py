"""The loss terms written once in :mod:`riskppo.algo.losses`: the eager (row-selecting) and the
sync-free (masked) risk-head loss are one mean, and the AWR term is the weighted log-likelihood."""

from __future__ import annotations

import math

import pytest
import torch

from riskppo import core
from riskppo.algo.losses import awr_loss, bc_loss_ratio, risk_head_loss


@pytest.mark.parametrize("ended", [[True, False, True, True, False], [False] * 5, [True] * 5])
def test_risk_head_loss_masked_equals_the_mean_over_ended_rows(ended):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, generator=g, dtype=torch.float64)
    y[~torch.tensor(ended)] = math.nan
    eager = risk_head_loss(q, y, 1.0)
    masked = risk_head_loss(q, y, 1.0, masked=True)
    rows = [core.quantile_huber_loss(q[i : i + 1], y[i].view(1, 1), kappa=1.0) for i in range(5)]
    zero = q.new_zeros(())
    by_hand = sum((r.sum() for r, e in zip(rows, ended) if e), zero) / max(sum(ended), 1)
    torch.testing.assert_close(eager, by_hand)
    torch.testing.assert_close(masked, by_hand)
    (g_eager,) = torch.autograd.grad(eager, q)
    (g_masked,) = torch.autograd.grad(masked, q)
    torch.testing.assert_close(g_masked, g_eager)
    assert not g_eager[~torch.tensor(ended)].any()  # no gradient from samples with no target


def test_awr_loss_is_minus_the_weighted_mean_log_likelihood():
    adv = torch.tensor([[0.5, -1.0], [2.0, 0.0]], dtype=torch.float64)
    logp = torch.tensor([-0.1, -0.2, -0.3, -0.4], dtype=torch.float64)
    w = torch.exp(adv.reshape(-1) / 0.5).clamp(max=3.0)
    torch.testing.assert_close(awr_loss(adv, logp, 0.5, 3.0), -(w * logp).mean())


def test_bc_loss_ratio_is_the_share_of_the_bc_term():
    ratio = bc_loss_ratio(torch.tensor(-1.0, requires_grad=True), torch.tensor(3.0))
    assert not ratio.requires_grad
    assert ratio.item() == pytest.approx(0.25)
