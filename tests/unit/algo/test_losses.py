"""The loss terms written once in :mod:`riskppo.algo.losses`: the eager (row-selecting) and the
sync-free (masked) risk-head loss are one mean, and the AWR term is the weighted log-likelihood."""

from __future__ import annotations

import math

import pytest
import torch

from riskppo import core
from riskppo.algo.constraints.cvar import RISK_TARGETS, RiskHeadTerm
from riskppo.algo.losses import (
    LossTerm,
    LossTerms,
    LossWeights,
    TermInput,
    TracedContext,
    assemble,
    awr_loss,
    bc_loss_ratio,
    ppo_terms,
    risk_head_loss,
    total,
)
from riskppo.config import Config
from riskppo.nn.critics import build_critic


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


class _Fixed(LossTerm):
    """A term of a fixed value, in the critic's or the loss's part."""

    def __init__(self, name: str, part: str, value: torch.Tensor) -> None:
        self.name, self.part, self.value = name, part, value  # type: ignore[assignment]

    def compute(self, x: TermInput) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return x.coef * self.value, {self.name: self.value}


def test_the_loss_is_every_named_term_with_its_coefficient(tiny_policy, random_chunk_batch):
    """``assemble`` over the PPO forward's terms, the risk head's loss (on the ended segments
    only, in the critic's part) and two loss-part terms with their coefficients equals the sum
    written out by hand, term by term, in that order."""
    cfg = Config.build({"critic": {"kind": "quantile", "n_quantiles": 8}, "ppo": {"vf_coef": 0.5}})
    policy = tiny_policy(critic_out=8, risk_head=True).double()
    mb = random_chunk_batch(policy, 4)
    targets = torch.randn(8, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    targets[::3] = math.nan  # unfinished segments: no target
    mb.aux[RISK_TARGETS] = targets
    critic = build_critic(cfg.critic)
    t = ppo_terms(cfg, policy, critic, mb)
    done = torch.isfinite(targets.reshape(-1))
    q = policy.risk_output(t.out).reshape(-1, 8)[done]
    y = targets.reshape(-1)[done].unsqueeze(-1)
    risk = core.quantile_huber_loss(q, y, kappa=cfg.critic.kappa).mean()
    sa_kl, bc = torch.tensor(0.3, dtype=torch.float64), torch.tensor(-0.2, dtype=torch.float64)
    terms = [
        (_Fixed("sa", "loss", sa_kl), 2.0),
        (RiskHeadTerm(), 1.0),
        (_Fixed("bc", "loss", bc), 1.0),
    ]
    w = LossWeights(vf_coef=0.5, ent_coef=0.01)
    got, stats, _ = assemble(
        cfg, policy, critic, mb, w, terms, traced=False, ctx=TracedContext(cfg, policy)
    )
    expected = t.pg_loss + 0.5 * (t.vf_loss + risk) - 0.01 * t.entropy + 2.0 * sa_kl + bc
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(stats["value_loss"], t.vf_loss + risk)
    assert list(stats)[-2:] == ["sa", "bc"]
    without = total(LossTerms(t.pg_loss, t.vf_loss, t.entropy), LossWeights(0.5, 0.01))
    assert torch.equal(without, t.pg_loss + 0.5 * t.vf_loss - 0.01 * t.entropy)
    mb.aux.clear()  # no targets: the risk head's term is left out
    none, _, _ = assemble(
        cfg, policy, critic, mb, w, terms[1:2], traced=False, ctx=TracedContext(cfg, policy)
    )
    torch.testing.assert_close(none, without, rtol=1e-12, atol=1e-12)


def test_pathwise_loss_moves_each_mean_by_its_slope():
    """∂L/∂μ_i = −g_i / N: the mean of a decision whose return rises with the action goes up."""
    from riskppo.algo.losses import pathwise_loss

    mean = torch.tensor([[0.2], [-0.5], [0.9], [0.0]], requires_grad=True)
    g = torch.tensor([1.0, -2.0, 0.0, 0.5])
    pathwise_loss(mean, g).backward()
    assert torch.equal(mean.grad[:, 0], -g / 4)
    with pytest.raises(ValueError, match=r"means \[N, A\] and slopes \[N, A\]"):
        pathwise_loss(torch.zeros(4, 2), g)
    # an action of A numbers (a portfolio's): each mean by its own slope, ∂L/∂μ_ik = −g_ik / N
    means = torch.tensor([[0.2, -0.1, 0.0], [0.4, 0.3, -0.6]], requires_grad=True)
    gs = torch.tensor([[1.0, -2.0, 0.0], [0.5, 3.0, -1.0]])
    loss = pathwise_loss(means, gs)
    loss.backward()
    assert torch.equal(means.grad, -gs / 2)
    assert loss.item() == pytest.approx(-(gs * means.detach()).sum().item() / 2)


def test_total_adds_the_loss_part_terms_in_order():
    terms = LossTerms(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(0.5))
    base = total(terms, LossWeights(0.5, 0.1))
    with_term = total(terms._replace(aux=(torch.tensor(-0.75),)), LossWeights(0.5, 0.1))
    assert float(with_term - base) == pytest.approx(-0.75)
