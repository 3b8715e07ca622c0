"""``predict(obs, raw=True)`` and ``model.normalize_obs``: a model trained with
``env.normalize_obs`` (the ``cartpole_masked`` preset, briefly trained so its statistics are
not the initial ones) acts on raw env observations exactly as on the ones its VecEnv normalises,
and raw observations passed as normalised ones give one warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from riskppo import DistributionalPPO
from riskppo.cli.main import load_config, preset_path
from riskppo.envs.vec.build import find_normalizer

SMALL = ["env.n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64", "ppo.n_epochs=1"]


@pytest.fixture(scope="module")
def model() -> DistributionalPPO:
    cfg = load_config(str(preset_path("cartpole_masked.yaml")), SMALL)
    model = DistributionalPPO(config=cfg)
    model.learn(256)
    rms = model.obs_statistics()
    assert rms is not None and not np.allclose(rms.var, 1.0)  # statistics that matter
    return model


def _episode(model: DistributionalPPO, steps: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """``[T, 1, D]`` normalised observations of an evaluation VecEnv and the raw ones behind
    them, the model acting on the normalised ones."""
    venv = model.make_eval_env(n_envs=1)
    norm = find_normalizer(venv)
    assert norm is not None
    seen, raw = [], []
    obs, state, starts = venv.reset(), None, np.ones(1, dtype=bool)
    for _ in range(steps):
        seen.append(obs)
        raw.append(norm.get_original_obs())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # normalised observations: no warning
            action, state = model.predict(obs, state, starts, deterministic=True)
        obs, _, starts, _ = venv.step(action)
    venv.close()
    return np.stack(seen), np.stack(raw)


def test_raw_path_equals_the_normalised_path(model: DistributionalPPO) -> None:
    seen, raw = _episode(model)
    assert not np.array_equal(seen, raw)
    np.testing.assert_array_equal(model.normalize_obs(raw), seen)  # bit for bit
    s1 = s2 = None
    for t in range(len(seen)):
        start = np.array([t == 0])
        a1, s1 = model.predict(seen[t], s1, start, deterministic=True)
        a2, s2 = model.predict(raw[t], s2, start, deterministic=True, raw=True)
        np.testing.assert_array_equal(a1, a2)
        for x, y in zip(s1.pi, s2.pi, strict=True):
            assert torch_equal(x, y)


def torch_equal(x: object, y: object) -> bool:
    import torch

    assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
    return bool(torch.equal(x, y))


def test_raw_observations_passed_as_normalised_warn_once(tmp_path: Path) -> None:
    cfg = load_config(str(preset_path("cartpole_masked.yaml")), SMALL)
    trained = DistributionalPPO(config=cfg)
    trained.learn(256)
    _, raw = _episode(trained)
    path = trained.save(tmp_path / "ckpt")
    loaded = DistributionalPPO.load(path, rebuild_env=False)  # statistics from the checkpoint
    for m in (trained, loaded):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state = None
            for t in range(len(raw)):
                _, state = m.predict(raw[t], state, np.array([t == 0]), deterministic=True)
        lines = [str(w.message) for w in caught if "un-normalised" in str(w.message)]
        assert len(lines) == 1, lines
        assert "raw=True" in lines[0] and "env.normalize_obs" in lines[0]
        assert caught[0].filename == __file__  # points at the caller's predict line


def test_a_model_without_normalisation_takes_obs_as_they_are() -> None:
    model = DistributionalPPO("CartPole-v1", n_envs=1, n_steps=32, batch_size=32)
    obs = np.array([0.5, 2.0, -0.1, 3.0], dtype=np.float32)
    np.testing.assert_array_equal(model.normalize_obs(obs), obs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a1, _ = model.predict(obs, deterministic=True)
        a2, _ = model.predict(obs, deterministic=True, raw=True)
    assert a1 == a2
