"""Baseline strategies, run through the same :class:`~riskppo.envs.TradingEnv` as the agent.

A baseline is a **policy function** ``bar -> target position``: given the position in the env's
frame of the bar just observed (``info["bar"]``), it returns the target position decided at that
close. :func:`run_policy` steps a ``TradingEnv`` with it, so a baseline pays the same fees and
borrow costs and gets the same fill (the env's ``fill``: next open or next close) as the agent — the
comparison is apples to apples. On an env with discrete positions the target is mapped to the
nearest allowed position (ties: the first in the env's list); on a continuous env it is clipped to
``[-1, 1]``.

* :func:`buy_and_hold_policy` — long (target 1) from the first decision bar on; it pays the fee
  of entering once. Run through an env with ``sizing="none"`` it holds one full unit
  (``buy_and_hold``); through an env with ``sizing="vol_target"`` the 1 is a signal and the
  exposure is ``min(vol_target / σ̂_t, max_leverage)`` (``vol_target_buy_and_hold``), which pays
  fees on every rebalance. The backtest picks the sizing of each baseline itself, whatever the
  agent's config says.
* :func:`sma_crossover_policy` — long when the fast simple moving average of the close is above
  the slow one, else flat (or short with ``allow_short``). Causal: the target decided at bar
  ``t`` uses closes ``<= t`` only; before the slow average has ``slow`` closes it is flat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.trading.strategies import sma_crossover_targets

__all__ = [
    "BASELINES",
    "STRATEGIES",
    "Policy",
    "buy_and_hold_policy",
    "flat_frame",
    "nearest_action",
    "run_policy",
    "sma_crossover_policy",
    "sma_crossover_targets",
    "strategy_frame",
]

STRATEGIES: tuple[str, ...] = (
    "agent", "buy_and_hold", "vol_target_buy_and_hold", "vt_bh_overlay", "floor_overlay",
    "sma_crossover", "supervised",
)  # fmt: skip
"""Every strategy of a backtest, in table order: the agent, then the baselines and references
(``vt_bh_overlay``, ``floor_overlay``: the full and the least signal held in the agent's own env,
its risk overlay included; :mod:`riskppo.evaluation.references`)."""

Policy = Callable[[int], float]
"""Maps the index (position in the env's frame) of the observed bar to a target position."""

# Columns of a per-bar strategy frame (see strategy_frame).
FRAME_COLUMNS: tuple[str, ...] = (
    "position",
    "signal",
    "log_return",
    "gross_return",
    "costs",
    "equity",
    "drawdown",
    "close",
)


def buy_and_hold_policy() -> Policy:
    """Target position 1 (fully long) at every bar."""

    def policy(bar: int) -> float:
        return 1.0

    return policy


def sma_crossover_policy(
    close: pd.Series | np.ndarray, fast: int = 20, slow: int = 50, *, allow_short: bool = False
) -> Policy:
    """SMA-crossover policy over a frame's closes (see :func:`sma_crossover_targets`)."""
    targets = sma_crossover_targets(close, fast, slow, allow_short=allow_short)

    def policy(bar: int) -> float:
        return float(targets[bar])

    return policy


def nearest_action(env: TradingEnv, target: float) -> Any:
    """The env action reaching ``target``: nearest allowed discrete position, or clipped box."""
    if env.continuous:
        return env.action_for_signal(np.array([target]))[0]
    allowed = np.asarray(env.positions, dtype=np.float64)
    return int(np.argmin(np.abs(allowed - target)))


def run_policy(env: TradingEnv, policy: Policy, **reset_kwargs: Any) -> pd.DataFrame:
    """Run ``policy`` for one episode of ``env`` (reset first); its per-bar strategy frame.

    With an evaluation env (``random_start=False``) the episode covers the whole trading range;
    ``options={"start": bar}`` starts it at another decision bar.
    """
    _, info = env.reset(**reset_kwargs)
    infos: list[dict[str, Any]] = []
    done = False
    while not done:
        action = nearest_action(env, policy(int(info["bar"])))
        _, _, terminated, truncated, info = env.step(action)
        infos.append(info)
        done = terminated or truncated
    return strategy_frame(infos, env.df["close"])


def strategy_frame(infos: list[dict[str, Any]], close: pd.Series) -> pd.DataFrame:
    """Per-bar frame from the ``info`` dicts of the steps of one ``TradingEnv`` episode (from its
    reset on, which starts flat).

    Indexed by the timestamp of the bar at which each step's return is realised (the bar observed
    after the step, ``info["timestamp"]``); columns :data:`FRAME_COLUMNS`:

    * ``position`` — position (exposure, after any volatility sizing) held over the bar's session:
      the one decided at the previous close, or with ``fill="next_close"`` (``info["fill"]``)
      the one decided a bar earlier (flat on the first bar);
    * ``signal`` — the action's target before sizing of that position (equal to ``position``
      without sizing);
    * ``log_return`` — net log return ``gross_return - costs`` (unscaled, so ``reward_scale``
      cannot distort it; ``exp(cumsum)`` is the equity);
    * ``gross_return``, ``costs`` — its parts; ``equity``, ``drawdown`` — as the env reports them;
    * ``close`` — the bar's close price.
    """
    if not infos:
        raise ValueError("strategy_frame: no steps were taken")
    ts = np.fromiter((int(i["timestamp"]) for i in infos), dtype=np.int64, count=len(infos))
    index = pd.DatetimeIndex(pd.to_datetime(ts, unit="ns"), name="timestamp")
    bars = np.fromiter((int(i["bar"]) for i in infos), dtype=np.int64, count=len(infos))

    def col(key: str) -> np.ndarray:
        return np.fromiter((float(i[key]) for i in infos), dtype=np.float64, count=len(infos))

    gross, costs = col("gross_return"), col("costs")
    position = col("position")
    signal = (
        col("signal") if all("signal" in i for i in infos) else position.copy()
    )  # infos of older envs lack it
    if infos[0].get("fill") == "next_close":  # the bar is held by the previous decision
        position = np.concatenate(([0.0], position[:-1]))
        signal = np.concatenate(([0.0], signal[:-1]))
    return pd.DataFrame(
        {
            "position": position,
            "signal": signal,
            "log_return": gross - costs,
            "gross_return": gross,
            "costs": costs,
            "equity": col("equity"),
            "drawdown": col("drawdown"),
            "close": np.asarray(close, dtype=np.float64)[bars],
        },
        index=index,
    )


def flat_frame(close: pd.Series, bars: np.ndarray | list[int]) -> pd.DataFrame:
    """A strategy frame of holding nothing over ``bars`` (positions in ``close``'s frame; each row
    is realised at that bar): position, signal and returns 0, equity 1, no drawdown. Pads a
    baseline that cannot trade yet (e.g. sizing warm-up) to the agent's bars."""
    idx = np.asarray(bars, dtype=np.int64)
    zeros = np.zeros(len(idx))
    return pd.DataFrame(
        {
            "position": zeros,
            "signal": zeros,
            "log_return": zeros,
            "gross_return": zeros,
            "costs": zeros,
            "equity": np.ones(len(idx)),
            "drawdown": zeros,
            "close": np.asarray(close, dtype=np.float64)[idx],
        },
        index=pd.DatetimeIndex(close.index[idx], name="timestamp"),
    )


BASELINES: dict[str, Callable[..., Policy]] = {
    "buy_and_hold": lambda close, **_: buy_and_hold_policy(),
    "sma_crossover": lambda close, fast=20, slow=50, allow_short=False: sma_crossover_policy(
        close, fast, slow, allow_short=allow_short
    ),
}
"""Registry: baseline name → ``factory(close, **options) -> Policy``."""
