"""Variance Gradient Scaler (R-OPT-2)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from riskppo.optim import VarianceGradientScaler, vgs_factor
from riskppo.optim.vgs import normalized_variance


def assert_close(actual, expected, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    """|a − e| ≤ atol + rtol·|e| element-wise, same shape and dtype (torch.testing is slow to
    import)."""
    actual = actual.detach()
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    err = (actual - expected).abs()
    bound = atol + rtol * expected.abs()
    assert bool((err <= bound).all()), f"max error {err.max().item():.3e}\n{actual}\n{expected}"


def _params(*shapes):
    return [torch.nn.Parameter(torch.zeros(s)) for s in shapes]


def test_spatial_factor_matches_float_reference() -> None:
    """Bias-corrected EMAs of the spatial mean, r = Var/(mean² + eps), f = max(floor, 1/(1+αr))."""
    beta, eps, alpha, floor = 0.9, 1e-8, 2.0, 0.05
    (p,) = _params((2, 3))
    vgs = VarianceGradientScaler(
        [p], beta=beta, eps=eps, alpha=alpha, warmup_steps=0, min_scale=floor
    )
    gen = torch.Generator().manual_seed(0)
    m1 = m2 = 0.0
    for t in range(1, 30):
        g = torch.randn(2, 3, generator=gen, dtype=torch.float64).float() + 0.3
        p.grad = g.clone()
        gbar = g.double().mean().item()
        m1 = beta * m1 + (1 - beta) * gbar
        m2 = beta * m2 + (1 - beta) * gbar**2
        e1, e2 = m1 / (1 - beta**t), m2 / (1 - beta**t)
        r = max(e2 - e1 * e1, 0.0) / (e1 * e1 + eps)
        expected = max(floor, 1.0 / (1.0 + alpha * r))
        factors = vgs.scale_()
        assert math.isclose(factors["0"], expected, rel_tol=1e-9, abs_tol=1e-12)
        assert_close(p.grad, g * expected, rtol=1e-6, atol=1e-7)


def test_per_element_factor_matches_float_reference() -> None:
    """Per element EMAs of g and g²; r = mean_i Var_i / (mean_i E[g_i]² + eps)."""
    beta, eps, alpha, floor = 0.8, 1e-8, 0.5, 0.05
    p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    vgs = VarianceGradientScaler(
        [p], beta=beta, eps=eps, alpha=alpha, warmup_steps=3, min_scale=floor, mode="per_element"
    )
    gen = torch.Generator().manual_seed(6)
    m1, m2 = [0.0] * 4, [0.0] * 4
    for t in range(1, 25):
        g = torch.randn(4, generator=gen, dtype=torch.float64) + torch.tensor([1.0, -1.0, 0.0, 3.0])
        p.grad = g.clone()
        gl = g.tolist()
        m1 = [beta * a + (1 - beta) * x for a, x in zip(m1, gl)]
        m2 = [beta * a + (1 - beta) * x * x for a, x in zip(m2, gl)]
        bc = 1 - beta**t
        e1, e2 = [a / bc for a in m1], [a / bc for a in m2]
        var = sum(max(b - a * a, 0.0) for a, b in zip(e1, e2)) / 4
        sq = sum(a * a for a in e1) / 4
        expected = 1.0 if t <= 3 else max(floor, 1.0 / (1.0 + alpha * var / (sq + eps)))
        assert math.isclose(vgs.scale_()["0"], expected, rel_tol=1e-9, abs_tol=1e-12)
        assert_close(p.grad, g * expected, rtol=1e-12, atol=1e-12)


def test_noisy_gradient_is_damped_more_than_steady() -> None:
    noisy, steady = _params(8, 8)
    vgs = VarianceGradientScaler(
        [("noisy", noisy), ("steady", steady)], warmup_steps=5, beta=0.95, min_scale=0.1
    )
    gen = torch.Generator().manual_seed(1)
    for _ in range(200):
        sign = 1.0 if torch.rand((), generator=gen) < 0.5 else -1.0
        noisy.grad = sign * torch.ones(8)  # spatial mean ±1: random sign
        steady.grad = 1.0 + 0.05 * torch.randn(8, generator=gen)
        factors = vgs.scale_()
    assert factors["steady"] > 0.95
    assert factors["noisy"] < 0.3
    assert vgs.last_factors == factors


@pytest.mark.parametrize("mode", ["spatial_mean", "per_element"])
def test_factor_within_bounds_and_warmup(mode) -> None:
    a, b = _params((3, 4), 5)
    vgs = VarianceGradientScaler(
        [a, b], warmup_steps=10, min_scale=0.2, alpha=5.0, beta=0.9, mode=mode
    )
    gen = torch.Generator().manual_seed(2)
    seen = []
    for t in range(1, 120):
        scale = 10.0 ** torch.randint(-4, 4, (), generator=gen).item()
        ga = scale * torch.randn(3, 4, generator=gen)
        gb = torch.randn(5, generator=gen) + 0.1 * t
        a.grad, b.grad = ga.clone(), gb.clone()
        factors = vgs.scale_()
        if t <= 10:  # warm-up: untouched
            assert factors == {"0": 1.0, "1": 1.0}
            assert torch.equal(a.grad, ga) and torch.equal(b.grad, gb)
        seen += list(factors.values())
        for f in factors.values():
            assert 0.2 <= f <= 1.0
    assert min(seen) < 0.9  # it does damp something


def test_per_element_catches_anticorrelated_noise_spatial_misses() -> None:
    """g = [+x, −x] with random x: the spatial mean is 0 every step (no temporal variance), so
    spatial_mean mode cannot see the noise; per_element sees Var(±x) ≫ mean²."""
    (ps,) = _params(2)
    (pe,) = _params(2)
    spatial = VarianceGradientScaler([ps], warmup_steps=5, mode="spatial_mean")
    per_el = VarianceGradientScaler([pe], warmup_steps=5, mode="per_element")
    gen = torch.Generator().manual_seed(3)
    for _ in range(100):
        x = torch.randn((), generator=gen).item()
        ps.grad = torch.tensor([x, -x])
        pe.grad = torch.tensor([x, -x])
        fs, fe = spatial.scale_()["0"], per_el.scale_()["0"]
    assert fs == pytest.approx(1.0)
    assert fe < 0.2


def test_modes_coincide_for_scalar_tensor() -> None:
    (a,) = _params(1)
    (b,) = _params(1)
    va = VarianceGradientScaler([a], warmup_steps=0, mode="spatial_mean")
    vb = VarianceGradientScaler([b], warmup_steps=0, mode="per_element")
    gen = torch.Generator().manual_seed(4)
    for _ in range(20):
        g = torch.randn(1, generator=gen) + 0.5
        a.grad, b.grad = g.clone(), g.clone()
        assert va.scale_()["0"] == pytest.approx(vb.scale_()["0"], rel=1e-5)


@pytest.mark.parametrize("mode", ["spatial_mean", "per_element"])
def test_vgs_then_clip_bounds_final_norm(mode) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    vgs = VarianceGradientScaler(model.named_parameters(), warmup_steps=3, mode=mode)
    max_norm = 0.5
    gen = torch.Generator().manual_seed(5)
    for _ in range(30):
        model.zero_grad()
        x = 10 * torch.randn(32, 6, generator=gen)
        model(x).pow(2).sum().backward()
        pre = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        vgs.scale_()
        mid = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        assert mid <= pre * (1 + 1e-6)  # factors ≤ 1 never grow the gradient
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        post = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        assert post <= max_norm * (1 + 1e-6)
    assert set(vgs.last_factors) == {n for n, _ in model.named_parameters()}


def _roundtrip(sd: dict) -> dict:
    tensors, plain = {}, {}
    for name, entry in sd["state"].items():
        plain[name] = {}
        for k, v in entry.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{name}/{k}"] = v
            else:
                assert isinstance(v, int), (k, type(v))
                plain[name][k] = v
    tensors, plain = st_load(st_save(tensors)), json.loads(json.dumps(plain))
    for key, v in tensors.items():
        name, k = key.rsplit("/", 1)
        plain[name][k] = v
    return {"state": plain}


@pytest.mark.parametrize("mode", ["spatial_mean", "per_element"])
def test_state_dict_roundtrip_continues_identically(mode) -> None:
    def grads(t):
        g = torch.Generator().manual_seed(100 + t)
        return [torch.randn(3, 2, generator=g) + 0.2, torch.randn(4, generator=g)]

    def run(vgs, params, ts):
        out = []
        for t in ts:
            for p, g in zip(params, grads(t)):
                p.grad = g
            out.append(vgs.scale_())
            out.append([p.grad.clone() for p in params])
        return out

    kw = {"warmup_steps": 2, "mode": mode, "beta": 0.8}
    pa = _params((3, 2), 4)
    full = run(VarianceGradientScaler(pa, **kw), pa, range(12))
    pb = _params((3, 2), 4)
    first = VarianceGradientScaler(pb, **kw)
    head = run(first, pb, range(6))
    sd = _roundtrip(first.state_dict())
    pc = _params((3, 2), 4)
    resumed = VarianceGradientScaler(pc, **kw)
    resumed.load_state_dict(sd)
    tail = run(resumed, pc, range(6, 12))
    for x, y in zip(full, head + tail):
        if isinstance(x, dict):
            assert x == y
        else:
            assert all(torch.equal(a, b) for a, b in zip(x, y))


def test_load_state_dict_rejects_wrong_mode_or_name() -> None:
    (p,) = _params(3)
    src = VarianceGradientScaler([("w", p)], warmup_steps=0, mode="spatial_mean")
    p.grad = torch.ones(3)
    src.scale_()
    with pytest.raises(ValueError, match="mode"):
        VarianceGradientScaler([("w", p)], mode="per_element").load_state_dict(src.state_dict())
    with pytest.raises(ValueError, match="unknown parameter"):
        VarianceGradientScaler([("v", p)]).load_state_dict(src.state_dict())


def test_non_finite_gradient_leaves_grad_and_statistics_alone() -> None:
    (a,) = _params(3)
    (b,) = _params(3)
    va = VarianceGradientScaler([a], warmup_steps=0, beta=0.9)
    vb = VarianceGradientScaler([b], warmup_steps=0, beta=0.9)
    seq = [
        torch.tensor([1.0, 2.0, 3.0]),
        torch.tensor([-1.0, 0.5, 2.0]),
        torch.tensor([0.0, 1.0, 0.2]),
    ]
    for i, g in enumerate(seq):
        if i == 1:
            a.grad = torch.tensor([1.0, float("nan"), 0.0])
            assert va.scale_()["0"] == 1.0
            assert torch.isnan(a.grad[1])
        a.grad, b.grad = g.clone(), g.clone()
        fa, fb = va.scale_()["0"], vb.scale_()["0"]
        assert math.isfinite(fa) and fa == fb


def test_grad_none_skipped_and_subset_selection() -> None:
    a, b = _params(2, 2)
    vgs = VarianceGradientScaler({"a": a, "b": b}, warmup_steps=0)
    a.grad = torch.ones(2)
    assert set(vgs.scale_()) == {"a"}
    b.grad = torch.ones(2)
    assert set(vgs.scale_([b])) == {"b"}
    assert set(vgs.scale_([("b", b)])) == {"b"}
    assert set(vgs.step()) == {"a", "b"}
    with pytest.raises(ValueError, match="does not track"):
        vgs.scale_([torch.nn.Parameter(torch.ones(2))])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"beta": 1.0},
        {"eps": 0.0},
        {"alpha": -1.0},
        {"warmup_steps": -1},
        {"min_scale": 0.0},
        {"min_scale": 1.5},
        {"mode": "global"},
    ],
)
def test_invalid_arguments_raise(kwargs) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        VarianceGradientScaler(_params(1), **kwargs)


def test_constructor_rejects_empty_and_duplicates() -> None:
    (p,) = _params(1)
    with pytest.raises(ValueError, match="empty"):
        VarianceGradientScaler([])
    with pytest.raises(ValueError, match="twice"):
        VarianceGradientScaler([("a", p), ("b", p)])


def test_pure_functions() -> None:
    assert vgs_factor(0.0, alpha=1.0, min_scale=0.1) == 1.0  # zero variance
    assert vgs_factor(1.0, alpha=1.0, min_scale=0.1) == 0.5  # Var = mean²
    assert vgs_factor(1e9, alpha=1.0, min_scale=0.1) == 0.1  # floor
    r = normalized_variance(torch.tensor(1.0), torch.tensor(2.0), eps=0.0)
    assert r.item() == pytest.approx(1.0)
    # per element: ratio of means, Var = [1, 0] → 0.5; mean² = [1, 4] → 2.5; r = 0.2
    r = normalized_variance(torch.tensor([1.0, -2.0]), torch.tensor([2.0, 4.0]), eps=0.0)
    assert r.item() == pytest.approx(0.2)
