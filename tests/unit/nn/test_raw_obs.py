"""The raw-observation check behind ``predict``'s warning (riskppo.nn.raw_obs): raw observations
are noticed, normalised ones never are, whatever came before."""

from __future__ import annotations

import numpy as np

from riskppo.nn.raw_obs import RawObservationCheck, normalize_observations

MEAN = np.array([0.0, 5.0, 0.0, 0.0])
VAR = np.array([0.01**2, 2.0**2, 1.0, 0.0])  # small scale, offset mean, neutral, constant
CLIP = 10.0


def _raw(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(MEAN, np.sqrt(VAR), size=(n, 4))


class _Rms:
    mean, var = MEAN, VAR


def _normalised(rng: np.random.Generator, n: int) -> np.ndarray:
    return normalize_observations(_raw(rng, n), _Rms(), CLIP)


def test_normalised_observations_never_warn() -> None:
    rng = np.random.default_rng(0)
    check = RawObservationCheck()
    for _ in range(2000):
        assert check.observe(_normalised(rng, 1), MEAN, VAR, CLIP) is None


def test_raw_observations_warn_once_even_after_normalised_ones() -> None:
    rng = np.random.default_rng(1)
    check = RawObservationCheck()
    for _ in range(500):  # a long correct use first: the CUSUM stays at 0
        assert check.observe(_normalised(rng, 1), MEAN, VAR, CLIP) is None
    found = [check.observe(_raw(rng, 1), MEAN, VAR, CLIP) for _ in range(50)]
    reasons = [r for r in found if r is not None]
    assert len(reasons) == 1 and "log-likelihood ratio" in reasons[0]
    assert found.index(reasons[0]) < 10  # within a few observations


def test_an_entry_beyond_the_clip_is_raw_at_once() -> None:
    check = RawObservationCheck()
    why = check.observe(np.array([[0.0, 0.0, 12.0, 0.0]]), MEAN, VAR, CLIP)
    assert why is not None and "entry 2" in why and "±10" in why


def test_normalize_matches_vecnormalize_and_passes_through_without_statistics() -> None:
    obs = np.array([[0.02, 9.0, -30.0, 1.0]], dtype=np.float32)
    z = normalize_observations(obs, _Rms(), CLIP)
    expected = np.clip((obs - MEAN) / np.sqrt(VAR + 1e-8), -CLIP, CLIP).astype(np.float32)
    np.testing.assert_array_equal(z, expected)
    assert z.dtype == np.float32
    assert normalize_observations(obs, None, CLIP) is not None
    np.testing.assert_array_equal(normalize_observations(obs, None, CLIP), obs)
