"""The trading env's batched form: ``n`` episodes of one :class:`TradingEnv` stepped together.

All episodes share the env's price history and per-bar tables (features, exposure scale, fill
returns); only the episode state (bar, position, equity, ...) is per episode, held as ``[n]``
arrays, and a step is a handful of array operations instead of ``n`` Python calls. Each step
returns exactly what ``n`` separate :class:`TradingEnv` instances would (same float64 operations
in the same order; ``math.exp`` for the equity, as the single env does): observations, rewards,
terminations, truncations and info dicts. Each episode has its own random generator, seeded and
drawn from like a single env's ``np_random`` (``reset(seed=...)``), so each one's random starts
are a single env's.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from gymnasium.utils import seeding

from riskppo.envs.execution.account import account_step
from riskppo.envs.trading.env import TradingEnv

__all__ = ["BatchStep", "TradingBatch"]

# rows of TradingBatch.state: the per-episode state of TradingEnv (its _new_episode_state)
_STATE = (
    "position", "signal", "log_equity", "log_peak", "turnover", "sum_abs_gross", "costs", "dpda"
)  # fmt: skip
_POS, _LOG_EQ, _PEAK = (_STATE.index(name) for name in ("position", "log_equity", "log_peak"))
_FLOWS = 6  # the last step's gross return, costs, fee, borrow cost, reward slopes (now, prev)


class BatchStep(NamedTuple):
    """One step of every episode (``n`` = number of episodes)."""

    obs: np.ndarray  # [n, D] float32, observation of the bar reached
    rewards: np.ndarray  # [n] float64, scaled net log return
    terminated: np.ndarray  # [n] bool, ruin
    truncated: np.ndarray  # [n] bool, end of the episode's range
    ended: list[int]  # the episodes that ended (terminated or truncated), ascending
    infos: list[dict[str, Any]]  # n info dicts, as TradingEnv.step's


class TradingBatch:
    """``n`` episodes of ``env`` (its tables and settings; its own episode state is not used).

    ``reset(i, seed, options)`` starts episode ``i`` like ``TradingEnv.reset``; ``step(actions)``
    (``[n]`` discrete indices or ``[n, 1]`` continuous actions) steps all ``n`` at once. An
    episode that ended must be reset before the next step.
    """

    def __init__(self, env: TradingEnv, n: int) -> None:
        self.env, self.n = env, n
        self._scale = np.asarray(env._scale, dtype=np.float64)  # [T] exposure per unit signal
        self._cap = np.asarray(env._cap, dtype=np.float64)  # [T] overlay cap on |exposure|
        self._e_old = np.asarray(env._e_old, dtype=np.float64)  # [T] simple returns of the legs
        self._e_new = np.asarray(env._e_new, dtype=np.float64)  # [T]
        self._e_prev = np.asarray(env._e_prev, dtype=np.float64)  # [T]
        self._positions = np.asarray(env.positions, dtype=np.float64)  # [K] discrete targets
        self._rngs: list[np.random.Generator | None] = [None] * n
        # [14, n] float64: the episode state (rows _STATE), then the last step's flows (gross
        # return, costs, fee, borrow cost, reward slopes); one array, so one tolist() gives the
        # info rows
        self._rows = np.zeros((len(_STATE) + _FLOWS, n))
        self.state = self._rows[: len(_STATE)]  # [8, n]
        self._flows = self._rows[len(_STATE) :]  # [6, n]
        self.t = np.zeros(n, np.int64)  # [n] bar observed
        self.start = np.zeros(n, np.int64)  # [n] first bar of the episode
        self.end_bar = np.zeros(n, np.int64)  # [n] bar that ends the episode (truncation)
        self._ended = list(range(n))  # episodes to reset before the next step

    def reset(
        self, i: int, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start episode ``i``; returns its observation ``[D]`` and info."""
        rng = self._rngs[i]
        if seed is not None or rng is None:  # as gymnasium.Env.reset seeds np_random
            rng, _ = seeding.np_random(seed)
            self._rngs[i] = rng
        t0, self.end_bar[i] = self.env.episode_bounds(rng, options)
        self.t[i] = self.start[i] = t0
        self._rows[:, i] = 0.0  # flat, equity 1, no gross return nor costs yet
        if i in self._ended:
            self._ended.remove(i)
        at = slice(i, i + 1)
        obs = self._observe(self.t[at], self.state[:, at])[0]
        (info,) = self._infos(self._rows[:, at], self.t[at], self.start[at])
        return obs, info

    def step(self, actions: np.ndarray) -> BatchStep:
        """Step every episode with its action (see the class docstring)."""
        if self._ended:
            raise RuntimeError(
                f"env {self._ended[0]}: call reset() before step() (and after an episode ends)"
            )
        env, flows = self.env, self._flows
        pos, sig, log_eq, peak, turnover, abs_gross, sum_costs, dpda = self.state  # [n] rows
        signal, inside = self._signals(actions)
        t, old = self.t, pos
        cap = self._cap[t]
        uncapped = signal * self._scale[t]
        target = np.clip(uncapped, -cap, cap)  # exposure decided at t
        new_dpda = np.where(inside & (np.abs(uncapped) < cap), env._slope_factor, 0.0)
        new_dpda *= self._scale[t]
        acc = account_step(old, target, self._e_prev[t], self._e_old[t], self._e_new[t],
                           new_dpda, dpda, env.account_settings)  # fmt: skip
        gross, dpos = acc.gross, acc.traded
        flows[0], flows[2], flows[3], flows[4], flows[5] = (
            gross,
            acc.fee_cost,
            acc.borrow_cost,
            acc.slope_new,
            acc.slope_old,
        )
        costs = np.add(acc.fee_cost, acc.borrow_cost, out=flows[1])
        net = gross - costs
        np.add(log_eq, net, out=log_eq)
        np.maximum(peak, log_eq, out=peak)
        np.add(turnover, dpos, out=turnover)
        np.add(abs_gross, np.abs(gross), out=abs_gross)
        np.add(sum_costs, costs, out=sum_costs)
        sig[:], pos[:], dpda[:] = signal, target, new_dpda  # (old, a view of pos, not read after)
        t += 1
        truncated = t >= self.end_bar
        ruin = env.ruin_equity
        if ruin is None:
            terminated = np.zeros(self.n, dtype=bool)
            ended = truncated
        else:  # math.exp: the single env's rounding
            terminated = np.array([math.exp(x) <= ruin for x in log_eq.tolist()])
            ended = terminated | truncated
        self._ended = np.flatnonzero(ended).tolist()
        return BatchStep(
            self._observe(t, self.state),
            net * env.reward_scale,
            terminated,
            truncated,
            list(self._ended),
            self._infos(self._rows, t, self.start),
        )

    def _signals(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Actions → ``[n]`` float64 signals (targets before sizing), as TradingEnv's, and
        ``[n]`` bool: the continuous action was strictly inside its bounds."""
        env = self.env
        a = actions if isinstance(actions, np.ndarray) else np.asarray(actions)
        if a.size != self.n or a.shape[0] != self.n:
            raise ValueError(f"expected {self.n} actions (one per env), got shape {a.shape}")
        a = a.reshape(self.n)
        if not env.continuous:
            k = len(self._positions)
            if a.dtype.kind not in "iu":
                raise ValueError(f"discrete actions must be integers in [0, {k}), got {a.dtype}")
            bad = (a < 0) | (a >= k)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"env {i}: action {int(a[i])} is outside [0, {k})")
            return self._positions[a], np.zeros(self.n, dtype=bool)
        x = a.astype(np.float64)  # a new array: the steps below work in place
        if not math.isfinite(float(x @ x)) and not (finite := np.isfinite(x)).all():
            i = int(np.flatnonzero(~finite)[0])
            raise ValueError(f"env {i}: continuous action is not finite: {a[i]!r}")
        inside = (x > -1.0) & (x < 1.0)
        np.minimum(np.maximum(x, -1.0, out=x), 1.0, out=x)
        if env.long_only:  # [-1, 1] -> signal m + (1 - m) * (0.5 * (x + 1)) in [m, 1]
            m = env.min_signal
            np.add(x, 1.0, out=x)
            np.multiply(x, 0.5, out=x)
            np.multiply(x, 1.0 - m, out=x)
            np.add(x, m, out=x)
        return x, inside

    def _observe(self, t: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Observations ``[m, D]`` float32 at bars ``t`` ``[m]`` of episodes in ``state``
        ``[8, m]``."""
        env = self.env
        n_win = env._n_win
        if env._table is not None:
            obs = env._table[t]  # a copy (fancy indexing)
        else:
            obs = np.empty((len(t), env._obs_dim), dtype=np.float32)
            obs[:, :n_win] = env._windows[t - env.window + 1]
        obs[:, n_win] = state[_POS]
        if env.obs_drawdown:
            rows = zip(state[_LOG_EQ].tolist(), state[_PEAK].tolist(), strict=True)
            obs[:, n_win + 1] = [1.0 - math.exp(x - p) for x, p in rows]
        return obs

    def _infos(self, rows: np.ndarray, t: np.ndarray, start: np.ndarray) -> list[dict[str, Any]]:
        """The info dicts of ``m`` episodes: ``rows`` ``[14, m]`` (state, then this step's
        gross return, costs, fee, borrow cost, reward slopes), bars ``t`` and first bars
        ``start`` ``[m]``."""
        ts = self.env._ts_ns
        fill = self.env.fill
        return [
            {
                "equity": math.exp(le),
                "log_equity": le,
                "position": p,
                "signal": s,
                "turnover": to,
                "drawdown": 1.0 - math.exp(le - pk),
                "reward_costs_fraction": sc / (sg + sc) if sg + sc > 0.0 else 0.0,
                "gross_return": g,
                "costs": c,
                "fee_cost": f,
                "borrow_cost": b,
                "bar": bar,
                "timestamp": ts[bar],
                "episode_step": bar - t0,
                "fill": fill,
                "reward_slope": d,
                "reward_slope_prev": dp,
            }
            for (p, s, le, pk, to, sg, sc, _, g, c, f, b, d, dp), bar, t0 in zip(
                rows.T.tolist(), t.tolist(), start.tolist(), strict=True
            )
        ]
