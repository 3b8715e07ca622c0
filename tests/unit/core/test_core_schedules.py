"""Entropy-coefficient schedule (R-ALG-10)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from riskppo.core import (
    EntropyFloorState,
    EntropyScheduleConfig,
    EntropyScheduleState,
    entropy_coef_step,
    entropy_floor_step,
    ls_slope,
)


def _run(cfg: EntropyScheduleConfig, entropies: list[float]) -> list[float]:
    state = EntropyScheduleState()
    coefs = []
    for h in entropies:
        coef, state = entropy_coef_step(cfg, state, h)
        coefs.append(coef)
    return coefs


def test_ls_slope_matches_polyfit() -> None:
    ys = (3.0, 2.5, 2.7, 1.0, 0.2)
    assert ls_slope(ys) == pytest.approx(np.polyfit(np.arange(5), ys, 1)[0])


def test_no_decay_before_plateau_then_linear_decay() -> None:
    cfg = EntropyScheduleConfig(
        ent_coef=0.1,
        ent_coef_min=0.01,
        decay="linear",
        decay_updates=10,
        plateau_window=4,
        plateau_tol=0.01,
    )
    falling = [5.0 - 0.5 * i for i in range(8)]  # slope −0.5: not a plateau
    state = EntropyScheduleState()
    for h in falling:
        coef, state = entropy_coef_step(cfg, state, h)
        assert coef == 0.1
    assert state.decay_start is None
    # Entropy flattens at 1.0: the window is [1, 1, 1, 1] (slope 0) at the 4th flat update.
    coefs = []
    for _ in range(20):
        coef, state = entropy_coef_step(cfg, state, 1.0)
        coefs.append(coef)
    assert state.decay_start == 8 + 3
    assert coefs[:4] == [0.1] * 4  # k = 0 at the start update
    for k in range(1, 11):
        assert coefs[3 + k] == pytest.approx(0.1 + (0.01 - 0.1) * k / 10)
    assert coefs[-1] == pytest.approx(0.01)


def test_exponential_decay_reaches_min_after_decay_updates() -> None:
    cfg = EntropyScheduleConfig(
        ent_coef=0.1, ent_coef_min=0.001, decay="exponential", decay_updates=10, plateau_window=0
    )
    coefs = _run(cfg, [1.0] * 30)
    assert coefs[0] == 0.1
    assert coefs[5] == pytest.approx(0.01)  # 0.1 · (0.01)^(5/10)
    assert coefs[10] == pytest.approx(0.001)
    assert all(c >= 0.001 for c in coefs) and coefs[-1] == 0.001
    assert all(a >= b for a, b in itertools.pairwise(coefs))


def test_exponential_decay_to_zero_floor_uses_one_percent_target() -> None:
    cfg = EntropyScheduleConfig(
        ent_coef=0.1, ent_coef_min=0.0, decay="exponential", decay_updates=10, plateau_window=0
    )
    coefs = _run(cfg, [1.0] * 21)
    assert coefs[10] == pytest.approx(0.001) and coefs[20] == pytest.approx(1e-5)


def test_floor_always_holds_and_decay_none_never_starts() -> None:
    cfg = EntropyScheduleConfig(
        ent_coef=0.05,
        ent_coef_min=0.02,
        decay="linear",
        decay_updates=3,
        plateau_window=2,
        plateau_tol=1.0,
    )
    assert min(_run(cfg, [1.0] * 50)) == 0.02
    cfg_none = EntropyScheduleConfig(ent_coef=0.05, decay="none", plateau_window=2)
    state = EntropyScheduleState()
    for _ in range(10):
        coef, state = entropy_coef_step(cfg_none, state, 1.0)
        assert coef == 0.05
    assert state.decay_start is None


def test_boost_when_entropy_collapses() -> None:
    cfg = EntropyScheduleConfig(
        ent_coef=0.01, ent_coef_min=0.001, decay="none", boost_threshold=0.1, boost_factor=3.0
    )
    state = EntropyScheduleState()
    coef, state = entropy_coef_step(cfg, state, 0.05)
    assert coef == pytest.approx(0.03) and state.boosted is True
    coef, state = entropy_coef_step(cfg, state, 0.5)
    assert coef == 0.01 and state.boosted is False
    assert state.update == 2 and state.coef == 0.01


def test_config_validation_and_non_finite_entropy() -> None:
    with pytest.raises(ValueError, match="ent_coef_min"):
        EntropyScheduleConfig(ent_coef=0.01, ent_coef_min=0.1)
    with pytest.raises(ValueError, match="decay"):
        EntropyScheduleConfig(decay="cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="plateau_window"):
        EntropyScheduleConfig(plateau_window=1)
    with pytest.raises(ValueError, match="boost_factor"):
        EntropyScheduleConfig(boost_factor=0.5)
    with pytest.raises(ValueError, match="mean_entropy"):
        entropy_coef_step(EntropyScheduleConfig(), EntropyScheduleState(), float("nan"))


# ---- learned entropy floor (R-ALG-10, SAC v2 §5) ------------------------------------------------
def _floor(state, h, target=0.5):
    return entropy_floor_step(state, h, target, lr=1.0, coef_min=1e-4, coef_max=0.5)


def test_entropy_floor_grows_below_target_and_decays_above() -> None:
    s = EntropyFloorState(math.log(1e-4))
    coefs = []
    for _ in range(5):
        c, s = _floor(s, 0.2)  # 0.3 nats below the target
        coefs.append(c)
    # log c rises by lr·gap = 0.3 per update: geometric growth, ×e^0.3 each step
    np.testing.assert_allclose(np.diff(np.log(coefs)), 0.3, rtol=1e-12)
    assert s.below == 5
    c_up = coefs[-1]
    c, s = _floor(s, 0.9)  # above the target: decays, the binding count resets
    assert c == pytest.approx(c_up * math.exp(-0.4)) and s.below == 0


def test_entropy_floor_bounds() -> None:
    s = EntropyFloorState(math.log(1e-4))
    for _ in range(100):
        c, s = _floor(s, 0.0)
    assert c == pytest.approx(0.5)  # capped at coef_max
    for _ in range(100):
        c, s = _floor(s, 2.0)
    assert c == pytest.approx(1e-4)  # never below coef_min


@pytest.mark.parametrize(
    "kwargs", [{"lr": 0.0}, {"coef_min": 0.0}, {"coef_min": 1.0, "coef_max": 0.5}]
)
def test_entropy_floor_invalid_arguments(kwargs) -> None:
    args = {"lr": 1.0, "coef_min": 1e-4, "coef_max": 0.5, **kwargs}
    with pytest.raises(ValueError, match="entropy_floor_step"):
        entropy_floor_step(EntropyFloorState(0.0), 0.1, 0.5, **args)
    with pytest.raises(ValueError, match="mean_entropy"):
        entropy_floor_step(EntropyFloorState(0.0), math.nan, 0.5, lr=1, coef_min=1e-4, coef_max=1)
