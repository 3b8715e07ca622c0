"""UPGD / AdaptiveUPGD (R-OPT-1) against independent per-element references, and the registry."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from riskppo.optim import OPTIMIZERS, UPGD, AdaptiveUPGD, build_optimizer


def assert_close(actual, expected, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    """|a − e| ≤ atol + rtol·|e| element-wise, same shape and dtype (torch.testing is slow to
    import)."""
    actual = actual.detach()
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    err = (actual - expected).abs()
    bound = atol + rtol * expected.abs()
    assert bool((err <= bound).all()), f"max error {err.max().item():.3e}\n{actual}\n{expected}"


# ---------------------------------------------------------------------------------- references
# Plain Python floats, one element at a time, straight from the formulas of R-OPT-1 and the
# reference code (mohmdelsayed/upgd): η = max RAW trace over all weights of all groups.


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class RefUPGD:
    """Element-wise reference. ``groups``: list of (hyper-params, list of flat float lists)."""

    def __init__(self, groups: list[tuple[dict, list[list[float]]]], adaptive: bool = False):
        self.groups = groups
        self.adaptive = adaptive
        self.state: dict[tuple[int, int], dict] = {}

    def step(self, grads, noise=None) -> None:
        """``grads[g][k]``: flat float list or None; ``noise[g][k]``: flat list or None."""
        active = []
        maxima = []
        for gi, (hp, tensors) in enumerate(self.groups):
            for ki, theta in enumerate(tensors):
                grad = grads[gi][ki]
                if grad is None:
                    continue
                st = self.state.setdefault(
                    (gi, ki),
                    {
                        "t": 0,
                        "u": [0.0] * len(theta),
                        "m": [0.0] * len(theta),
                        "v": [0.0] * len(theta),
                    },
                )
                st["t"] += 1
                bu = hp["beta_utility"]
                for i in range(len(theta)):
                    st["u"][i] = bu * st["u"][i] + (1 - bu) * (-grad[i] * theta[i])
                    maxima.append(st["u"][i])
                active.append((gi, ki))
        eta = max(maxima)
        for gi, ki in active:
            hp, tensors = self.groups[gi]
            theta, grad, st = tensors[ki], grads[gi][ki], self.state[(gi, ki)]
            t = st["t"]
            bc = 1 - hp["beta_utility"] ** t
            for i in range(len(theta)):
                scaled = (st["u"][i] / bc) / eta if eta > 0 else 0.0  # documented η ≤ 0 guard
                gate = 1.0 - _sigmoid(scaled)
                d = grad[i]
                if self.adaptive:
                    b1, b2 = hp["betas"]
                    st["m"][i] = b1 * st["m"][i] + (1 - b1) * grad[i]
                    st["v"][i] = b2 * st["v"][i] + (1 - b2) * grad[i] ** 2
                    mhat = st["m"][i] / (1 - b1**t)
                    vhat = st["v"][i] / (1 - b2**t)
                    d = mhat / (math.sqrt(vhat) + hp["eps"])
                if noise is not None:
                    d = d + noise[gi][ki][i]
                theta[i] = theta[i] * (1 - hp["lr"] * hp["weight_decay"]) - hp["lr"] * d * gate


def _problem(seed: int, sizes=(3, 4, 2, 5)):
    """Separable quadratic loss Σ ½c·θ² − d·θ (gradient c·θ − d), random per element."""
    rng = random.Random(seed)
    thetas = [[rng.uniform(-1.5, 1.5) for _ in range(n)] for n in sizes]
    cs = [[rng.uniform(0.2, 2.0) for _ in range(n)] for n in sizes]
    ds = [[rng.uniform(-1.0, 1.0) for _ in range(n)] for n in sizes]
    return thetas, cs, ds


def _torch_params(thetas, dtype=torch.float64):
    return [torch.nn.Parameter(torch.tensor(t, dtype=dtype)) for t in thetas]


def _loss_backward(params, cs, ds, skip=()):
    for p in params:
        p.grad = None
    loss = sum(
        (0.5 * torch.tensor(c, dtype=p.dtype) * p**2 - torch.tensor(d, dtype=p.dtype) * p).sum()
        for k, (p, c, d) in enumerate(zip(params, cs, ds))
        if k not in skip
    )
    loss.backward()


HP1 = {"lr": 0.05, "weight_decay": 0.3, "beta_utility": 0.9, "sigma": 0.0}
HP2 = {"lr": 0.2, "weight_decay": 0.01, "beta_utility": 0.5, "sigma": 0.0}
ADAM = {"betas": (0.8, 0.95), "eps": 1e-3}


def _run_against_reference(opt_cls, adaptive: bool, steps: int = 8) -> None:
    thetas, cs, ds = _problem(0)
    params = _torch_params(thetas)
    hp1, hp2 = dict(HP1), dict(HP2)
    if adaptive:
        hp1.update(ADAM)
        hp2.update(ADAM, betas=(0.5, 0.9))
    opt = opt_cls([{"params": params[:2], **hp1}, {"params": params[2:], **hp2}], lr=1.0, seed=0)
    ref_thetas = [list(t) for t in thetas]
    ref = RefUPGD([(hp1, ref_thetas[:2]), (hp2, ref_thetas[2:])], adaptive=adaptive)
    for step in range(steps):
        skip = (3,) if step % 3 == 1 else ()  # parameter 3 sometimes has grad None
        _loss_backward(params, cs, ds, skip=skip)
        grads = [
            [c * th - d for th, c, d in zip(ref_thetas[k], cs[k], ds[k])] if k not in skip else None
            for k in range(4)
        ]
        opt.step()
        ref.step([grads[:2], grads[2:]])
        for p, t in zip(params, ref_thetas):
            assert_close(p.detach(), torch.tensor(t, dtype=p.dtype), rtol=1e-12, atol=1e-12)
    assert opt.state[params[3]]["step"] == steps - len([s for s in range(steps) if s % 3 == 1])


def test_upgd_matches_elementwise_reference_two_groups_weight_decay() -> None:
    _run_against_reference(UPGD, adaptive=False)


def test_adaptive_upgd_matches_elementwise_reference() -> None:
    _run_against_reference(AdaptiveUPGD, adaptive=True)


def test_upgd_first_step_by_hand() -> None:
    # θ = [1, −2, 0.5], g = [0.5, 1, −2], β_u = 0.9, lr = 0.1, λ = 0.5.
    # u = 0.1·(−g·θ) = [−0.05, 0.2, 0.1]; η = max raw u = 0.2; bias correction 1 − 0.9 = 0.1
    # ũ = [−0.5, 2, 1]; ũ/η = [−2.5, 10, 5]; ū = sigmoid(·) = [0.0758581800…, 0.9999546…, 0.9933…]
    # θ' = θ·(1 − 0.05) − 0.1·g·(1 − ū)
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    p.grad = torch.tensor([0.5, 1.0, -2.0], dtype=torch.float64)
    opt = UPGD([p], lr=0.1, weight_decay=0.5, beta_utility=0.9, sigma=0.0)
    opt.step()
    u = opt.state[p]["utility"]
    assert_close(u, torch.tensor([-0.05, 0.2, 0.1], dtype=torch.float64), rtol=1e-15, atol=1e-15)
    ubar = [0.07585818002124355, 0.9999546021312976, 0.9933071490757153]
    expected = [
        0.95 - 0.1 * 0.5 * (1 - ubar[0]),  # 0.9037929090010621
        -1.9 - 0.1 * 1.0 * (1 - ubar[1]),  # -1.9000045397868701
        0.475 + 0.1 * 2.0 * (1 - ubar[2]),  # 0.4763385701848569
    ]
    assert_close(p.detach(), torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    assert abs(expected[0] - 0.9037929090010621) < 1e-15


@pytest.mark.parametrize("opt_cls", [UPGD, AdaptiveUPGD])
def test_noise_placement_matches_reference(opt_cls) -> None:
    """With σ > 0 the noise is drawn in parameter order from the optimizer's own generator and
    added to the (gradient | Adam) direction before gating — replay the draws in the reference."""
    adaptive = opt_cls is AdaptiveUPGD
    thetas, cs, ds = _problem(1, sizes=(3, 2))
    params = _torch_params(thetas)
    hp = {**HP1, "sigma": 0.3, **(ADAM if adaptive else {})}
    opt = opt_cls([{"params": params, **hp}], seed=123)
    ref_thetas = [list(t) for t in thetas]
    ref = RefUPGD([(hp, ref_thetas)], adaptive=adaptive)
    gen = torch.Generator().manual_seed(123)
    for _ in range(4):
        _loss_backward(params, cs, ds)
        grads = [[c * th - d for th, c, d in zip(ref_thetas[k], cs[k], ds[k])] for k in range(2)]
        noise = [
            (0.3 * torch.randn(len(t), generator=gen, dtype=torch.float64)).tolist()
            for t in ref_thetas
        ]
        opt.step()
        ref.step([grads], noise=[noise])
        for p, t in zip(params, ref_thetas):
            assert_close(p.detach(), torch.tensor(t, dtype=p.dtype), rtol=1e-12, atol=1e-12)


def test_float32_close_to_float64() -> None:
    thetas, cs, ds = _problem(2)
    out = {}
    for dtype in (torch.float32, torch.float64):
        params = _torch_params(thetas, dtype)
        opt = UPGD(params, lr=0.05, weight_decay=0.1, beta_utility=0.9, sigma=0.0)
        for _ in range(10):
            _loss_backward(params, cs, ds)
            opt.step()
        out[dtype] = torch.cat([p.detach().double() for p in params])
        assert all(p.dtype == dtype for p in params)
    assert_close(out[torch.float32], out[torch.float64], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------- reproducibility
def _make_noisy(opt_cls, seed, init_seed=99):
    torch.manual_seed(init_seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = opt_cls(
        model.parameters(), lr=1e-2, weight_decay=1e-3, beta_utility=0.9, sigma=0.1, seed=seed
    )
    return model, opt


def _fit(model, opt, steps):
    x = torch.linspace(-1, 1, 32).reshape(8, 4)
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def _train_noisy(opt_cls, seed, steps):
    """Fixed model init; only the optimizer seed varies."""
    model, opt = _make_noisy(opt_cls, seed)
    _fit(model, opt, steps)
    return model, opt


@pytest.mark.parametrize("opt_cls", [UPGD, AdaptiveUPGD])
def test_noise_reproducible_by_seed(opt_cls) -> None:
    a, _ = _train_noisy(opt_cls, seed=7, steps=5)
    b, _ = _train_noisy(opt_cls, seed=7, steps=5)
    c, _ = _train_noisy(opt_cls, seed=8, steps=5)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()))


def test_seed_from_global_generator_is_reproducible() -> None:
    p1, p2 = torch.nn.Parameter(torch.zeros(5)), torch.nn.Parameter(torch.zeros(5))
    torch.manual_seed(5)
    o1 = UPGD([p1], lr=1.0, sigma=1.0)
    torch.manual_seed(5)
    o2 = UPGD([p2], lr=1.0, sigma=1.0)
    for p, o in ((p1, o1), (p2, o2)):
        p.grad = torch.ones(5)
        o.step()
    assert torch.equal(p1, p2)


def _safetensors_roundtrip(sd: dict) -> dict:
    """Write the optimizer state as a checkpoint would: tensors → safetensors, rest → JSON."""
    tensors, plain = {}, {"param_groups": sd["param_groups"], "state": {}}
    tensors["generator_state"] = sd["generator_state"]
    plain["step"] = sd["step"]
    for idx, st in sd["state"].items():
        plain["state"][str(idx)] = {}
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"state.{idx}.{k}"] = v
            else:
                assert isinstance(v, (int, float)), (k, type(v))
                plain["state"][str(idx)][k] = v
    blob, text = st_save(tensors), json.dumps(plain)
    tensors, plain = st_load(blob), json.loads(text)
    out = {"param_groups": plain["param_groups"], "step": plain["step"], "state": {}}
    out["generator_state"] = tensors["generator_state"]
    for idx, st in plain["state"].items():
        out["state"][int(idx)] = dict(st)
    for key, v in tensors.items():
        if key.startswith("state."):
            _, idx, k = key.split(".", 2)
            out["state"][int(idx)][k] = v
    return out


@pytest.mark.parametrize("opt_cls", [UPGD, AdaptiveUPGD])
def test_state_dict_roundtrip_continues_bit_identically(opt_cls) -> None:
    full, _ = _train_noisy(opt_cls, seed=3, steps=10)
    half, opt = _train_noisy(opt_cls, seed=3, steps=5)
    sd = _safetensors_roundtrip(opt.state_dict())
    assert sd["generator_state"].dtype == torch.uint8 and sd["step"] == 5
    # a fresh model/optimizer (other init, other seed) restored from the checkpoint
    model2, opt2 = _make_noisy(opt_cls, seed=999, init_seed=1234)
    opt2.load_state_dict(sd)
    with torch.no_grad():
        for p, q in zip(model2.parameters(), half.parameters()):
            p.copy_(q)
    _fit(model2, opt2, 5)
    for pf, pr in zip(full.parameters(), model2.parameters()):
        assert torch.equal(pf, pr)
    assert opt2.state_dict()["step"] == 10


def test_foreign_generator_state_reseeds_deterministically_with_warning() -> None:
    """A state from another device type (e.g. a 16-byte CUDA Philox state) cannot be set on a
    CPU generator: warn and reseed deterministically from it."""
    runs = []
    for _ in range(2):
        p = torch.nn.Parameter(torch.zeros(4))
        opt = UPGD([p], lr=1.0, sigma=1.0, seed=0)
        sd = opt.state_dict()
        sd["generator_state"] = torch.arange(16, dtype=torch.uint8)
        with pytest.warns(RuntimeWarning, match="reseeding"):
            opt.load_state_dict(sd)
        p.grad = torch.zeros(4)
        opt.step()
        runs.append(p.detach().clone())
    assert torch.equal(runs[0], runs[1]) and torch.isfinite(runs[0]).all()


# ---------------------------------------------------------------------------------- guards
@pytest.mark.parametrize("opt_cls", [UPGD, AdaptiveUPGD])
def test_eta_non_positive_guard_gives_finite_half_gate(opt_cls) -> None:
    # (a) all-zero weights → all utilities 0 → η = 0 (reference: 0/0 = NaN)
    p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    p.grad = torch.tensor([1.0, -2.0, 3.0, 0.0], dtype=torch.float64)
    opt = opt_cls([p], lr=0.1, beta_utility=0.9, sigma=0.0)
    opt.step()
    assert torch.isfinite(p).all()
    if opt_cls is UPGD:  # ū = ½ everywhere → half a gradient step
        assert_close(p.detach(), -0.1 * 0.5 * p.grad, rtol=0, atol=1e-15)
    # (b) zero gradients → utilities 0
    q = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    q.grad = torch.zeros(3, dtype=torch.float64)
    opt_cls([q], lr=0.1, sigma=0.1, seed=0).step()
    assert torch.isfinite(q).all()
    # (c) every −g·θ < 0 → η < 0 (reference would invert the ranking); ū = ½ still
    r = torch.nn.Parameter(torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64))
    r.grad = torch.tensor([1.0, 0.5, -1.0], dtype=torch.float64)
    before = r.detach().clone()
    opt = opt_cls([r], lr=0.1, beta_utility=0.9, sigma=0.0)
    opt.step()
    assert torch.isfinite(r).all()
    if opt_cls is UPGD:
        assert_close(r.detach(), before - 0.05 * r.grad, rtol=0, atol=1e-15)


def test_grad_none_params_untouched_and_empty_step_is_noop() -> None:
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(2))
    opt = UPGD([a, b], lr=0.1, weight_decay=0.5, sigma=0.5, seed=0)
    opt.step()  # no gradients at all
    assert len(opt.state) == 0 and opt.state_dict()["step"] == 0
    a.grad = torch.ones(3)
    opt.step()
    assert torch.equal(b, torch.ones(2)) and b not in opt.state
    assert opt.state[a]["step"] == 1


def test_gating_protects_high_utility_weights() -> None:
    # Same gradient g = −1 for both; θ = +3 has utility −g·θ = +3 (useful), θ = −3 has −3.
    p = torch.nn.Parameter(torch.tensor([3.0, -3.0], dtype=torch.float64))
    opt = UPGD([p], lr=0.1, beta_utility=0.9, sigma=0.0)
    start = p.detach().clone()
    for _ in range(3):
        p.grad = torch.tensor([-1.0, -1.0], dtype=torch.float64)
        opt.step()
    moved = (p.detach() - start).abs()
    assert moved[0] < 0.1 * moved[1]
    ubar = torch.sigmoid(opt.state[p]["utility"] / (1 - 0.9**3) / opt.state[p]["utility"].max())
    assert ubar[0] > 0.9 and ubar[1] < 0.1


def test_global_eta_spans_param_groups() -> None:
    """η is the max over ALL groups: the small-utility group is scaled by the other's max."""
    a = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    b = torch.nn.Parameter(torch.tensor([10.0], dtype=torch.float64))
    opt = UPGD([{"params": [a]}, {"params": [b]}], lr=0.1, beta_utility=0.0, sigma=0.0)
    a.grad = torch.tensor([-1.0], dtype=torch.float64)  # utility 1
    b.grad = torch.tensor([-1.0], dtype=torch.float64)  # utility 10 → η = 10
    opt.step()
    gate_a = 1 - _sigmoid(1.0 / 10.0)
    assert_close(
        a.detach(), torch.tensor([1.0 + 0.1 * gate_a], dtype=torch.float64), rtol=0, atol=1e-15
    )


def test_sigma_zero_does_not_advance_generator() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = UPGD([p], lr=0.1, sigma=0.0, seed=0)
    s0 = opt.state_dict()["generator_state"]
    p.grad = torch.ones(3)
    opt.step()
    assert torch.equal(opt.state_dict()["generator_state"], s0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": -1.0},
        {"weight_decay": -0.1},
        {"beta_utility": 1.0},
        {"beta_utility": -0.1},
        {"sigma": -1.0},
        {"sigma": float("nan")},
    ],
)
def test_invalid_hyperparameters_raise(kwargs) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        UPGD([torch.nn.Parameter(torch.ones(1))], **kwargs)


def test_invalid_adaptive_and_seed_generator_conflict() -> None:
    p = [torch.nn.Parameter(torch.ones(1))]
    with pytest.raises(ValueError, match="betas"):
        AdaptiveUPGD(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="eps"):
        AdaptiveUPGD(p, eps=-1.0)
    with pytest.raises(ValueError, match="generator or seed"):
        UPGD(p, seed=1, generator=torch.Generator())


def test_explicit_generator_is_used() -> None:
    gen = torch.Generator().manual_seed(11)
    p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    opt = UPGD([p], lr=1.0, beta_utility=0.0, sigma=1.0, generator=gen)
    p.grad = torch.zeros(4, dtype=torch.float64)
    opt.step()  # all utilities 0 → ū = ½; θ = −(0 + ξ)·½
    xi = torch.randn(4, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    assert_close(p.detach(), -0.5 * xi, rtol=0, atol=1e-15)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("opt_cls", [UPGD, AdaptiveUPGD])
def test_cuda_matches_cpu_without_noise_and_is_reproducible(opt_cls) -> None:
    thetas, cs, ds = _problem(4)
    outs = []
    for device in ("cpu", "cuda"):
        params = [
            torch.nn.Parameter(torch.tensor(t, dtype=torch.float64, device=device)) for t in thetas
        ]
        opt = opt_cls(params, lr=0.05, weight_decay=0.1, beta_utility=0.9, sigma=0.0)
        for _ in range(5):
            for p, c, d in zip(params, cs, ds):
                p.grad = torch.tensor(c, dtype=p.dtype, device=device) * p.detach() - torch.tensor(
                    d, dtype=p.dtype, device=device
                )
            opt.step()
        outs.append(torch.cat([p.detach().cpu() for p in params]))
    assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-12)
    runs = []
    for _ in range(2):
        p = torch.nn.Parameter(torch.ones(64, device="cuda"))
        opt = opt_cls([p], lr=0.1, sigma=0.5, seed=4)
        for _ in range(3):
            p.grad = torch.ones_like(p)
            opt.step()
        runs.append(p.detach().clone())
        assert opt.state_dict()["generator_state"].dtype == torch.uint8
    assert torch.equal(runs[0], runs[1])


# ---------------------------------------------------------------------------------- registry
def test_registry_builds_each_kind() -> None:
    assert set(OPTIMIZERS) == {"adam", "adamw", "sgd", "upgd", "adaptive_upgd"}
    expected = {
        "adam": torch.optim.Adam,
        "adamw": torch.optim.AdamW,
        "sgd": torch.optim.SGD,
        "upgd": UPGD,
        "adaptive_upgd": AdaptiveUPGD,
    }
    for name, cls in expected.items():
        opt = build_optimizer(name, [torch.nn.Parameter(torch.ones(2))], lr=1e-3, weight_decay=0.1)
        assert type(opt) is cls
        assert opt.param_groups[0]["lr"] == 1e-3 and opt.param_groups[0]["weight_decay"] == 0.1


def test_registry_passes_kwargs_through() -> None:
    adam = build_optimizer("adam", [torch.nn.Parameter(torch.ones(2))], lr=3e-4, eps=1e-5)
    assert adam.param_groups[0]["eps"] == 1e-5
    upgd = build_optimizer(
        "upgd", [torch.nn.Parameter(torch.ones(2))], lr=1e-3, beta_utility=0.99, sigma=0.01, seed=3
    )
    assert upgd.param_groups[0]["beta_utility"] == 0.99 and upgd.param_groups[0]["sigma"] == 0.01


def test_registry_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ValueError) as err:
        build_optimizer("rmsprop", [torch.nn.Parameter(torch.ones(2))], lr=1e-3)
    msg = str(err.value)
    assert "rmsprop" in msg
    for name in ("adam", "adamw", "sgd", "upgd", "adaptive_upgd"):
        assert name in msg
