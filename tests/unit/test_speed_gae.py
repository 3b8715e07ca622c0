"""The NumPy fast path of GAE's backward recursion (issue 18) against the torch loop (bit for
bit) and against the plain reference loop (SPEC §11)."""

from __future__ import annotations

import pytest
import torch

from riskppo.core.advantages import _backward_recursion, gae, gae_reference


def _rollout(dtype: torch.dtype, t: int = 37, n: int = 5) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    rewards = torch.randn(t, n, generator=g, dtype=dtype)
    values = torch.randn(t, n, generator=g, dtype=dtype)
    next_values = torch.randn(t, n, generator=g, dtype=dtype)
    u = torch.rand(t, n, generator=g)
    return rewards, values, next_values, u < 0.1, (u >= 0.1) & (u < 0.2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_numpy_recursion_is_bit_identical_to_the_torch_loop(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    deltas = torch.randn(64, 8, generator=g, dtype=dtype)
    carry = 0.99 * 0.95 * (torch.rand(64, 8, generator=g) > 0.1).to(dtype)
    fast = _backward_recursion(deltas, carry)  # CPU, no autograd: the NumPy path
    # the torch loop: the same call with autograd on (that path never goes through NumPy)
    slow = _backward_recursion(deltas.clone().requires_grad_(), carry).detach()
    assert fast.dtype == dtype and fast.shape == deltas.shape
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gae_fast_path_matches_reference_loop(dtype: torch.dtype) -> None:
    roll = _rollout(dtype)
    adv, ret = gae(*roll, 0.99, 0.95)
    ref_adv, ref_ret = gae_reference(*roll, 0.99, 0.95)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(adv, ref_adv, rtol=0, atol=tol)
    torch.testing.assert_close(ret, ref_ret, rtol=0, atol=tol)


def test_gae_keeps_autograd_through_the_torch_loop() -> None:
    r, v, nv, term, trunc = _rollout(torch.float64)
    v = v.clone().requires_grad_()
    adv, _ = gae(r, v, nv, term, trunc, 0.99, 0.95)
    adv.sum().backward()
    assert v.grad is not None and torch.isfinite(v.grad).all()
