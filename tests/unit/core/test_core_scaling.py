"""Running moments, value-target scale and PopArt rescaling (R-ALG-8)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from riskppo.core import (
    RunningMoments,
    init_moments,
    popart_rescale,
    update_moments,
    value_target_scale,
)

F64 = torch.float64


@pytest.mark.parametrize("shape", [(), (3,)])
def test_update_moments_equals_moments_of_concatenation(shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    m = init_moments(shape)
    batches = []
    for size in (1, 7, 100, 3, 250):
        batch = 10.0 + 4.0 * torch.randn(size, *shape, generator=g)
        batches.append(batch.double().numpy())
        m = update_moments(m, batch)
        seen = np.concatenate(batches)
        np.testing.assert_allclose(m.mean.numpy(), seen.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(m.var.numpy(), seen.var(axis=0), rtol=1e-10)
        assert m.count.item() == len(seen)
    assert isinstance(m, RunningMoments) and m.mean.dtype == F64


def test_update_moments_edge_cases() -> None:
    m = init_moments()
    assert update_moments(m, torch.zeros(0)) is m
    with pytest.raises(ValueError, match="batch contains 1 non-finite"):
        update_moments(m, torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="batch must have shape"):
        update_moments(m, torch.zeros(4, 2))


def test_value_target_scale_floor_and_cap() -> None:
    scale, uncapped = value_target_scale(2.0, ret_clip=5.0, std_floor=0.1)
    assert scale == pytest.approx(0.1) and uncapped == pytest.approx(0.1)  # 1/(5·2)
    scale, uncapped = value_target_scale(0.01, ret_clip=5.0, std_floor=0.1)
    assert scale == pytest.approx(2.0) and uncapped == pytest.approx(2.0)  # floor: 1/(5·0.1)
    scale, uncapped = value_target_scale(0.0, ret_clip=1.0, std_floor=1e-4, cap=100.0)
    assert scale == 100.0 and uncapped == pytest.approx(1e4)  # cap hit: caller warns
    scale, _ = value_target_scale(torch.tensor(2.0, dtype=F64), ret_clip=5.0, std_floor=0.1)
    assert scale == pytest.approx(0.1)
    with pytest.raises(ValueError, match="std_floor"):
        value_target_scale(1.0, ret_clip=1.0, std_floor=0.0)


def _denormalised(w: torch.Tensor, b: torch.Tensor, h: torch.Tensor, mean, scale) -> torch.Tensor:
    return (h @ w.T + b) / scale + mean


@pytest.mark.parametrize("per_output", [False, True])
def test_popart_preserves_denormalised_outputs(per_output: bool) -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(4, 6, generator=g, dtype=F64)
    b = torch.randn(4, generator=g, dtype=F64)
    h = torch.randn(200, 6, generator=g, dtype=F64)
    if per_output:
        old_mean, new_mean = (
            torch.randn(4, generator=g, dtype=F64),
            torch.randn(4, generator=g, dtype=F64),
        )
        old_scale = torch.rand(4, generator=g, dtype=F64) + 0.1
        new_scale = torch.rand(4, generator=g, dtype=F64) + 0.1
    else:
        old_mean, old_scale, new_mean, new_scale = 2.0, 0.5, -1.0, 3.0
    w0, b0 = w.clone(), b.clone()
    w2, b2 = popart_rescale(w, b, old_mean, old_scale, new_mean, new_scale)
    assert torch.equal(w, w0) and torch.equal(b, b0)  # pure: inputs untouched
    before = _denormalised(w, b, h, old_mean, old_scale)
    after = _denormalised(w2, b2, h, new_mean, new_scale)
    torch.testing.assert_close(after, before, rtol=0, atol=1e-6)
    assert not torch.allclose(w2, w)


def test_popart_float32_and_errors() -> None:
    w = torch.randn(2, 3)
    b = torch.randn(2)
    w2, b2 = popart_rescale(w, b, 0.0, 1.0, 1.0, 2.0)
    assert w2.dtype == torch.float32 and b2.dtype == torch.float32
    h = torch.randn(10, 3)
    torch.testing.assert_close(_denormalised(w2, b2, h, 1.0, 2.0), _denormalised(w, b, h, 0.0, 1.0))
    with pytest.raises(ValueError, match="scale"):
        popart_rescale(w, b, 0.0, 0.0, 1.0, 2.0)
    with pytest.raises(ValueError, match="bias"):
        popart_rescale(w, torch.zeros(3), 0.0, 1.0, 1.0, 2.0)
