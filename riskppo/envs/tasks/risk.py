"""Small environments with known risk, for testing the CVaR constraint and critic fidelity.

* :class:`RiskyChoiceEnv` (``riskppo/RiskyChoice-v0``, R-RISK-3): one decision per episode —
  action 0 is *safe* (reward ``safe_reward``, certain), action 1 is *risky* (``risky_win`` with
  probability ``1 − crash_prob``, else ``risky_loss``: a higher mean with a heavy lower tail).
  With the defaults (1; 3 / −10 at 10%): mean 1 vs 1.7, CVaR_0.1 1 vs −10. A policy taking the
  risky action with probability ``p`` has ``CVaR_0.1 = 1 − 11p`` (for p ≤ 1), so a limit of 0
  forces ``p ≤ 1/11``.
* :class:`ChainEnv` (``riskppo/Chain-v0``): a walk along ``length`` states with a Bernoulli(½)
  reward per step; the undiscounted return-to-go from state ``k`` is Binomial(length − k, ½) —
  a known distribution to check the learned quantiles against (:meth:`ChainEnv.true_quantiles`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class RiskyChoiceEnv(gym.Env[np.ndarray, np.int64]):
    """One-step bandit with a safe and a risky arm (see the module docstring)."""

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium declares it as an attribute)

    def __init__(
        self,
        safe_reward: float = 1.0,
        risky_win: float = 3.0,
        risky_loss: float = -10.0,
        crash_prob: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        if not 0.0 <= crash_prob <= 1.0:
            raise ValueError(f"crash_prob must be in [0, 1], got {crash_prob}")
        del render_mode
        self.safe_reward, self.risky_win, self.risky_loss = safe_reward, risky_win, risky_loss
        self.crash_prob = crash_prob
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if int(action) == 0:
            reward = self.safe_reward
        else:
            crash = self.np_random.random() < self.crash_prob
            reward = self.risky_loss if crash else self.risky_win
        return np.zeros(1, np.float32), float(reward), True, False, {"risky": int(action) == 1}


class ChainEnv(gym.Env[np.ndarray, np.int64]):
    """Deterministic walk over ``length`` states, Bernoulli(½) reward per step (see module doc)."""

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium declares it as an attribute)

    def __init__(self, length: int = 5, render_mode: str | None = None) -> None:
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        del render_mode
        self.length = length
        self.observation_space = spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = spaces.Discrete(2)  # both actions do the same
        self.pos = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, np.float32)
        obs[min(self.pos, self.length - 1)] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        del action
        reward = float(self.np_random.random() < 0.5)
        self.pos += 1
        return self._obs(), reward, self.pos >= self.length, False, {}

    def true_quantiles(self, state: int, taus: np.ndarray) -> np.ndarray:
        """Quantiles (lower inverse CDF) of the return-to-go from ``state``: Binomial(n, ½)."""
        from math import comb

        n = self.length - state
        pmf = np.array([comb(n, k) for k in range(n + 1)], dtype=float) / 2.0**n
        cdf = np.cumsum(pmf)
        return np.searchsorted(cdf, np.asarray(taus) - 1e-12).astype(float)
