"""GAE and advantage normalisation against independent references (design §1.2, R-ALG-6/7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from riskppo.core import AdvantageStats, gae, gae_reference, normalize_advantages

GAMMA, LAM = 0.97, 0.9


def _rollout(
    t: int = 40, n: int = 5, seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(t, n, generator=g, dtype=dtype)
    values = torch.randn(t, n, generator=g, dtype=dtype)
    next_values = torch.randn(t, n, generator=g, dtype=dtype)
    u = torch.rand(t, n, generator=g)
    terminated = u < 0.1
    truncated = (u >= 0.1) & (u < 0.2)
    return rewards, values, next_values, terminated, truncated


def _forward_sum_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Independent reference: A_t = Σ_l (γλ)^l δ_{t+l}, summed forward until the episode ends.

    Written as a forward sum (not the backward recursion used by the library) with numpy floats.
    """
    r, v, nv = (np.asarray(x, dtype=np.float64) for x in (rewards, values, next_values))
    term = np.asarray(terminated, dtype=bool)
    done = term | np.asarray(truncated, dtype=bool)
    steps, envs = r.shape
    delta = r + gamma * np.where(term, 0.0, nv) - v
    adv = np.zeros_like(r)
    for e in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                total += weight * delta[k, e]
                if done[k, e]:
                    break
                weight *= gamma * lam
            adv[t, e] = total
    return adv, adv + v


def test_gae_matches_forward_sum_reference_and_reference_loop() -> None:
    roll = _rollout()
    assert roll[3].any() and roll[4].any()  # both kinds of episode end are exercised
    expected_adv, expected_ret = _forward_sum_gae(*roll, GAMMA, LAM)
    for fn in (gae, gae_reference):
        adv, ret = fn(*roll, GAMMA, LAM)
        np.testing.assert_allclose(adv.numpy(), expected_adv, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ret.numpy(), expected_ret, rtol=0, atol=1e-12)


def test_gae_float32_keeps_dtype_and_float_flags_equal_bool_flags() -> None:
    r, v, nv, term, trunc = _rollout(dtype=torch.float32, seed=3)
    adv, ret = gae(r, v, nv, term, trunc, GAMMA, LAM)
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32
    adv_f, _ = gae(r, v, nv, term.float(), trunc.float(), GAMMA, LAM)
    torch.testing.assert_close(adv, adv_f, rtol=0, atol=0)
    expected, _ = _forward_sum_gae(r, v, nv, term, trunc, GAMMA, LAM)
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-5)


def test_truncation_bootstraps_from_next_values_termination_does_not() -> None:
    # One env, 4 steps, the episode ends at step 2; step 3 starts a new episode.
    r = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float64)
    v = torch.tensor([[0.5], [0.25], [0.125], [1.0]], dtype=torch.float64)
    nv = torch.tensor([[0.25], [0.125], [10.0], [2.0]], dtype=torch.float64)  # 10 = final obs
    no = torch.zeros(4, 1, dtype=torch.bool)
    end = no.clone()
    end[2] = True
    g, lam = 0.5, 0.5
    adv_trunc, _ = gae(r, v, nv, no, end, g, lam)
    adv_term, _ = gae(r, v, nv, end, no, g, lam)
    # Truncated at step 2: δ_2 = r + γ·V(final obs) − v, and the recursion stops at step 2.
    a2 = 3.0 + g * 10.0 - 0.125
    a1 = (2.0 + g * 0.125 - 0.25) + g * lam * a2
    a0 = (1.0 + g * 0.25 - 0.5) + g * lam * a1
    a3 = 4.0 + g * 2.0 - 1.0
    torch.testing.assert_close(adv_trunc[:, 0], torch.tensor([a0, a1, a2, a3], dtype=torch.float64))
    # Terminated at step 2: no bootstrap at all.
    b2 = 3.0 - 0.125
    b1 = (2.0 + g * 0.125 - 0.25) + g * lam * b2
    b0 = (1.0 + g * 0.25 - 0.5) + g * lam * b1
    torch.testing.assert_close(adv_term[:, 0], torch.tensor([b0, b1, b2, a3], dtype=torch.float64))


def test_next_value_of_truncated_step_matters_of_terminated_step_does_not() -> None:
    r, v, nv, _, _ = _rollout(t=6, n=1, seed=5)
    flag = torch.zeros(6, 1, dtype=torch.bool)
    flag[3] = True
    no = torch.zeros_like(flag)
    bumped = nv.clone()
    bumped[3] += 1.0
    trunc_a, _ = gae(r, v, nv, no, flag, GAMMA, LAM)
    trunc_b, _ = gae(r, v, bumped, no, flag, GAMMA, LAM)
    diff = (trunc_b - trunc_a)[:, 0]
    # Steps 0..3 see the bump discounted by (γλ)^(3−t)·γ; the new episode (4, 5) does not.
    expected = torch.tensor(
        [GAMMA * (GAMMA * LAM) ** (3 - t) for t in range(4)] + [0.0, 0.0], dtype=torch.float64
    )
    torch.testing.assert_close(diff, expected)
    term_a, _ = gae(r, v, nv, flag, no, GAMMA, LAM)
    term_b, _ = gae(r, v, bumped, flag, no, GAMMA, LAM)
    torch.testing.assert_close(term_a, term_b, rtol=0, atol=0)


@pytest.mark.parametrize("end_kind", ["terminated", "truncated"])
def test_split_trajectory_invariance(end_kind: str) -> None:
    r, v, nv, term, trunc = _rollout(t=30, n=4, seed=7)
    k = 12
    # The split point carries the episode end (and for truncation the bootstrap next_values).
    (term if end_kind == "terminated" else trunc)[k - 1] = True
    full_adv, full_ret = gae(r, v, nv, term, trunc, GAMMA, LAM)
    head_adv, head_ret = gae(r[:k], v[:k], nv[:k], term[:k], trunc[:k], GAMMA, LAM)
    tail_adv, tail_ret = gae(r[k:], v[k:], nv[k:], term[k:], trunc[k:], GAMMA, LAM)
    torch.testing.assert_close(torch.cat([head_adv, tail_adv]), full_adv, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat([head_ret, tail_ret]), full_ret, rtol=0, atol=1e-12)


def test_split_without_episode_end_differs() -> None:
    # Sanity check of the previous test: without an end at the split the head changes.
    r, v, nv, _, _ = _rollout(t=10, n=1, seed=8)
    no = torch.zeros(10, 1, dtype=torch.bool)
    full, _ = gae(r, v, nv, no, no, GAMMA, LAM)
    head, _ = gae(r[:5], v[:5], nv[:5], no[:5], no[:5], GAMMA, LAM)
    assert not torch.allclose(head, full[:5])


@pytest.mark.parametrize("fn", [gae, gae_reference])
@pytest.mark.parametrize("name", ["rewards", "values", "next_values"])
def test_non_finite_input_raises_naming_the_tensor(fn, name: str) -> None:
    r, v, nv, term, trunc = _rollout(t=5, n=3)
    args = {"rewards": r, "values": v, "next_values": nv}
    args[name] = args[name].clone()
    args[name][1, 2] = float("nan")
    args[name][0, 0] = float("inf")
    with pytest.raises(ValueError, match=rf"{fn.__name__}: {name} contains 2 non-finite values"):
        fn(args["rewards"], args["values"], args["next_values"], term, trunc, GAMMA, LAM)


def test_shape_mismatch_raises_naming_argument() -> None:
    r, v, nv, term, trunc = _rollout(t=5, n=3)
    with pytest.raises(ValueError, match="next_values"):
        gae(r, v, nv[:4], term, trunc, GAMMA, LAM)
    with pytest.raises(ValueError, match="rewards"):
        gae(r[:, 0], v, nv, term, trunc, GAMMA, LAM)
    with pytest.raises(ValueError, match="gamma"):
        gae(r, v, nv, term, trunc, 1.5, LAM)


# ------------------------------------------------------------------ normalize_advantages


def test_normalized_has_mean_zero_std_one_ddof1() -> None:
    g = torch.Generator().manual_seed(1)
    adv = 3.0 + 5.0 * torch.randn(64, 8, generator=g)
    out, stats = normalize_advantages(adv)
    assert out.dtype == torch.float32 and out.shape == adv.shape
    x = out.double().numpy()
    assert abs(x.mean()) < 1e-6
    assert abs(x.std(ddof=1) - 1.0) < 1e-6
    raw = adv.double().numpy()
    assert isinstance(stats, AdvantageStats)
    assert stats.mean == pytest.approx(raw.mean(), rel=1e-12)
    assert stats.std == pytest.approx(raw.std(ddof=1), rel=1e-12)
    assert stats.max_abs == pytest.approx(np.abs(x).max(), rel=1e-6)
    assert stats.floor_hit is False


def test_constant_advantages_give_finite_zeros() -> None:
    out, stats = normalize_advantages(torch.full((16, 4), 2.5))
    assert torch.equal(out, torch.zeros(16, 4))
    assert stats.floor_hit is True and stats.std == 0.0 and stats.max_abs == 0.0


def test_near_constant_advantages_do_not_blow_up() -> None:
    g = torch.Generator().manual_seed(2)
    noise = 1e-9 * torch.randn(32, 4, generator=g, dtype=torch.float64)
    out, stats = normalize_advantages(1.0 + noise)
    assert stats.floor_hit is True
    assert torch.isfinite(out).all()
    # Centred only: the result is the noise itself (≈1e-9), not noise/std (≈1).
    assert out.abs().max() < 1e-8
    torch.testing.assert_close(out, noise - noise.mean(), rtol=0, atol=1e-15)


def test_single_element_is_centred_only() -> None:
    out, stats = normalize_advantages(torch.tensor([7.0]))
    assert torch.equal(out, torch.zeros(1))
    assert stats.floor_hit is True and stats.mean == 7.0


def test_per_env_normalises_each_column() -> None:
    g = torch.Generator().manual_seed(4)
    scales = torch.tensor([0.1, 1.0, 100.0])
    adv = torch.randn(50, 3, generator=g, dtype=torch.float64) * scales + torch.tensor([1, 2, 3])
    out, stats = normalize_advantages(adv, per_env=True)
    x = out.numpy()
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(x.std(axis=0, ddof=1), 1.0, atol=1e-6)
    assert stats.floor_hit is False
    # A constant column is centred only while the other columns are still divided.
    adv[:, 1] = 5.0
    out2, stats2 = normalize_advantages(adv, per_env=True)
    assert stats2.floor_hit is True
    assert torch.equal(out2[:, 1], torch.zeros(50, dtype=torch.float64))
    np.testing.assert_allclose(out2[:, 0].numpy().std(ddof=1), 1.0, atol=1e-6)


def test_normalize_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="adv contains 1 non-finite"):
        normalize_advantages(torch.tensor([1.0, float("nan"), 2.0]))
    with pytest.raises(ValueError, match="per_env"):
        normalize_advantages(torch.zeros(5), per_env=True)
    with pytest.raises(ValueError, match="empty"):
        normalize_advantages(torch.zeros(0))


@pytest.mark.parametrize("seed", range(20))
def test_gae_equals_reference_on_random_shapes_and_discounts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    t, n = int(rng.integers(1, 13)), int(rng.integers(1, 5))
    gamma, lam = (float(x) for x in rng.choice([0.0, 0.5, 0.9, 0.99, 1.0], size=2))
    roll = _rollout(t=t, n=n, seed=seed)
    expected, _ = _forward_sum_gae(*roll, gamma, lam)
    fast, _ = gae(*roll, gamma, lam)
    ref, _ = gae_reference(*roll, gamma, lam)
    np.testing.assert_allclose(fast.numpy(), expected, atol=1e-10)
    np.testing.assert_allclose(ref.numpy(), expected, atol=1e-10)
