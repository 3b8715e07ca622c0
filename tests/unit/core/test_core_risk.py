"""CVaR / VaR against brute force on expanded samples, numeric integrals and invariants (R-RISK)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from riskppo.core import (
    cvar_from_categorical,
    cvar_from_quantiles,
    empirical_cvar,
    sort_last,
    var_from_categorical,
    var_from_quantiles,
)

F64 = torch.float64


def _brute_cvar(samples: np.ndarray, alpha: float) -> float:
    """Mean of the lowest α·M samples (α·M must be an integer)."""
    k = round(alpha * len(samples))
    assert abs(k - alpha * len(samples)) < 1e-9
    return float(np.sort(samples)[:k].mean())


def _grid_cvar(quantiles: np.ndarray, alpha: float, n_grid: int = 200_000) -> float:
    """(1/α)∫₀^α F⁻¹(u)du by the midpoint rule, F⁻¹(u) = q_(⌊uN⌋) for mass 1/N per atom."""
    q = np.sort(quantiles)
    u = (np.arange(n_grid) + 0.5) / n_grid * alpha
    return float(q[np.minimum((u * len(q)).astype(int), len(q) - 1)].mean())


@pytest.mark.parametrize("alpha", [0.05, 0.13, 0.3, 0.5, 0.77, 1.0])
def test_cvar_matches_brute_force_on_expanded_samples(alpha: float) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(8, generator=g, dtype=F64)
    expanded = np.repeat(q.numpy(), 1000)  # each atom becomes 1000 equal samples
    assert cvar_from_quantiles(q, alpha).item() == pytest.approx(
        _brute_cvar(expanded, alpha), abs=1e-12
    )


@pytest.mark.parametrize("alpha", [0.01, 0.07, 0.2, 0.333, 0.9])
def test_cvar_matches_numeric_integral(alpha: float) -> None:
    g = torch.Generator().manual_seed(1)
    q = 3.0 * torch.randn(4, 11, generator=g, dtype=F64)
    out = cvar_from_quantiles(q, alpha)
    assert out.shape == (4,)
    for row in range(4):
        assert out[row].item() == pytest.approx(_grid_cvar(q[row].numpy(), alpha), abs=1e-4)


def test_cvar_monotone_in_alpha_mean_at_one_min_in_first_atom() -> None:
    g = torch.Generator().manual_seed(2)
    q = torch.randn(3, 16, generator=g, dtype=F64)
    alphas = np.linspace(0.001, 1.0, 300)
    values = torch.stack([cvar_from_quantiles(q, float(a)) for a in alphas])  # [300, 3]
    assert (values[1:] - values[:-1] >= -1e-12).all()
    torch.testing.assert_close(cvar_from_quantiles(q, 1.0), q.mean(dim=1))
    for alpha in (1 / 16, 0.5 / 16, 1e-6):
        torch.testing.assert_close(cvar_from_quantiles(q, alpha), q.min(dim=1).values)


def test_cvar_float32_and_unsorted_input() -> None:
    q = torch.tensor([3.0, -1.0, 2.0, 0.0])
    # α = 0.375 → 1.5 atoms: (−1 + 0.5·0) / 1.5.
    assert cvar_from_quantiles(q, 0.375).item() == pytest.approx(-1.0 / 1.5)
    assert cvar_from_quantiles(q, 0.375).dtype == torch.float32


def test_cvar_gradient_reaches_exactly_the_lower_tail_quantiles() -> None:
    q = torch.tensor([0.5, -2.0, 1.0, -1.0, 3.0, 0.0, 2.0, -0.5], dtype=F64, requires_grad=True)
    cvar_from_quantiles(q, 0.3).backward()  # α·N = 2.4: ranks 0, 1 fully, rank 2 with 0.4
    expected = torch.zeros(8, dtype=F64)
    expected[1] = 1.0 / 2.4  # −2.0, rank 0
    expected[3] = 1.0 / 2.4  # −1.0, rank 1
    expected[7] = 0.4 / 2.4  # −0.5, rank 2
    assert q.grad is not None
    torch.testing.assert_close(q.grad, expected)


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5, float("nan")])
def test_alpha_outside_unit_interval_raises(alpha: float) -> None:
    q = torch.zeros(4)
    atoms = torch.linspace(-1.0, 1.0, 4)
    for call in (
        lambda: cvar_from_quantiles(q, alpha),
        lambda: var_from_quantiles(q, alpha),
        lambda: cvar_from_categorical(torch.full((4,), 0.25), atoms, alpha),
        lambda: empirical_cvar(q, alpha),
    ):
        with pytest.raises(ValueError, match="alpha"):
            call()


def test_categorical_equals_quantile_version_on_equivalent_distribution() -> None:
    g = torch.Generator().manual_seed(3)
    q = torch.randn(5, 10, generator=g, dtype=F64).sort(dim=1).values
    for row in range(5):
        probs = torch.full((10,), 0.1, dtype=F64)
        for alpha in (0.04, 0.1, 0.25, 0.61, 1.0):
            assert cvar_from_categorical(probs, q[row], alpha).item() == pytest.approx(
                cvar_from_quantiles(q[row], alpha).item(), abs=1e-12
            )


def test_categorical_cvar_matches_brute_force_and_is_differentiable() -> None:
    g = torch.Generator().manual_seed(4)
    atoms = torch.linspace(-5.0, 5.0, 11, dtype=F64)
    counts = torch.randint(0, 20, (11,), generator=g)
    counts[0] = 0  # an empty atom in the tail
    total = int(counts.sum())
    probs = (counts.double() / total).requires_grad_(True)
    samples = np.repeat(atoms.numpy(), counts.numpy())
    for k in (1, 7, total // 3, total):
        alpha = k / total
        assert cvar_from_categorical(probs, atoms, alpha).item() == pytest.approx(
            _brute_cvar(samples, alpha), abs=1e-12
        )
    cvar_from_categorical(probs, atoms, 0.2).backward()
    assert probs.grad is not None and probs.grad.abs().sum() > 0


def test_categorical_cvar_batched_and_unsorted_atoms() -> None:
    atoms = torch.tensor([2.0, -1.0, 0.0], dtype=F64)  # unsorted support
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0]], dtype=F64)
    out = cvar_from_categorical(probs, atoms, 0.5)
    # Row 0 sorted: −1 (0.25), 0 (0.25), 2 (0.5) → (−0.25 + 0) / 0.5 = −0.5. Row 1: −1.
    torch.testing.assert_close(out, torch.tensor([-0.5, -1.0], dtype=F64))
    torch.testing.assert_close(
        var_from_categorical(probs, atoms, 0.5), torch.tensor([0.0, -1.0], dtype=F64)
    )


def test_var_is_the_lower_quantile() -> None:
    q = torch.tensor([5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0, 6.0, 8.0, 0.0], dtype=F64)
    ranked = sorted(q.tolist())
    for alpha in (0.01, 0.1, 0.3, 0.31, 0.5, 0.99, 1.0):
        # Brute force: smallest sample x whose empirical CDF P(X ≤ x) reaches α.
        expected = min(x for x in ranked if sum(y <= x for y in ranked) / 10 >= alpha)
        assert var_from_quantiles(q, alpha).item() == expected


def test_var_from_categorical_brute_force() -> None:
    atoms = torch.linspace(0.0, 4.0, 5, dtype=F64)
    probs = torch.tensor([0.0, 0.25, 0.25, 0.0, 0.5], dtype=F64)
    for alpha, expected in ((0.1, 1.0), (0.25, 1.0), (0.26, 2.0), (0.5, 2.0), (0.51, 4.0)):
        assert var_from_categorical(probs, atoms, alpha).item() == expected


def test_empirical_cvar_by_sorting_by_hand() -> None:
    g = torch.Generator().manual_seed(5)
    samples = torch.randn(20, generator=g, dtype=F64)
    s = sorted(samples.tolist())
    cvar, var = empirical_cvar(samples, 0.1)  # exactly 2 samples
    assert cvar.item() == pytest.approx((s[0] + s[1]) / 2)
    assert var.item() == s[1]
    cvar, var = empirical_cvar(samples, 0.12)  # 2.4 samples
    assert cvar.item() == pytest.approx((s[0] + s[1] + 0.4 * s[2]) / 2.4)
    assert var.item() == s[2]
    with pytest.raises(ValueError, match="samples"):
        empirical_cvar(samples.reshape(4, 5), 0.1)


@pytest.mark.parametrize("seed", range(25))
def test_cvar_between_min_and_mean_and_matches_integral(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.uniform(-100.0, 100.0, size=int(rng.integers(1, 13)))
    alpha = float(rng.uniform(1e-4, 1.0))
    out = cvar_from_quantiles(torch.tensor(values, dtype=F64), alpha).item()
    assert values.min() - 1e-9 <= out <= values.mean() + 1e-9
    assert out == pytest.approx(_grid_cvar(values, alpha, n_grid=20_000), abs=0.05)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sort_last_gives_torch_sorts_values_with_nan_and_infinities(dtype):
    """NumPy's sort (the CPU path without gradients) and torch.sort agree value for value,
    NaN last, infinities and signed zeros included; with a gradient asked for, torch.sort runs
    and the gradient flows to the sorted entries."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 7, 33, generator=g, dtype=dtype)
    x[0, 0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0], dtype=dtype)
    x[1, 2, 5] = 0.0
    want = torch.sort(x, dim=-1).values
    got = sort_last(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert got.dtype == dtype and got.shape == x.shape
    leaf = x[2:4].clone().requires_grad_()
    sort_last(leaf)[..., 0].sum().backward()
    assert leaf.grad is not None and int(leaf.grad.sum()) == 2 * 7
