"""Stepping two vec envs side by side: everything they return must be equal; the trading vec
envs of the shipped configs to step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from riskppo.config import Config
from riskppo.envs.vec.build import build_vec_env

CONFIGS = Path(__file__).resolve().parents[1] / "riskppo" / "configs"


def shipped_config(name: str, overlay: bool, **env: Any) -> Config:
    """The shipped config ``name`` with observation normalisation off (and its risk overlay
    dropped unless ``overlay``); ``env``: more ``env`` section fields."""
    cfg = Config.from_yaml(CONFIGS / name)
    kwargs = dict(cfg.env.kwargs)
    if not overlay:
        kwargs.pop("overlay", None)
    update = {"kwargs": kwargs, "normalize_obs": False, **env}
    return cfg.model_copy(update={"env": cfg.env.model_copy(update=update)})


def build_venv(cfg: Config, vectorized: bool, part: str = "train", n: int = 8) -> VecEnv:
    """``n`` envs of ``cfg`` (seed 3), batched or not, below the finite-value guard."""
    env = cfg.env.model_copy(update={"vectorized": vectorized})
    venv = build_vec_env(cfg.env.id, env, 3, cfg.data, part=part, n_envs=n, risk=cfg.risk)
    return venv.venv  # below VecFiniteGuard


def assert_same_run(ref: VecEnv, fast: VecEnv, actions: np.ndarray) -> dict[str, int]:
    """Reset both, step both with ``actions`` ``[T, n, ...]``: observations, rewards (and their
    dtypes), done flags, infos, terminal observations, episode returns and lengths and reset
    infos must be equal. Returns how many episodes ended by truncation and by termination."""
    np.testing.assert_array_equal(ref.reset(), fast.reset())
    assert ref.reset_infos == fast.reset_infos
    ended = {"truncated": 0, "terminated": 0}
    for a in actions:
        o1, r1, d1, i1 = ref.step(a)
        o2, r2, d2, i2 = fast.step(a)
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        assert r1.dtype == r2.dtype and o1.dtype == o2.dtype
        np.testing.assert_array_equal(d1, d2)
        assert ref.reset_infos == fast.reset_infos
        for k, (a1, a2) in enumerate(zip(i1, i2, strict=True)):
            a1, a2 = dict(a1), dict(a2)
            t1, t2 = a1.pop("terminal_observation", None), a2.pop("terminal_observation", None)
            e1, e2 = a1.pop("episode", None), a2.pop("episode", None)
            assert a1 == a2
            assert (t1 is None) == (t2 is None) == (e1 is None) == (e2 is None) == (not d1[k])
            if t1 is not None:
                np.testing.assert_array_equal(t1, t2)
                assert (e1["r"], e1["l"]) == (e2["r"], e2["l"])
                ended["truncated" if a1["TimeLimit.truncated"] else "terminated"] += 1
    return ended
