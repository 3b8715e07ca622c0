"""The random-timing null in the agent's own env.

Could the agent's Sharpe ratio come from smooth random signals in its own band, moving as much
as its own (:func:`riskppo.stats.null.matched_smoothness`)? Only if the random signals are held
the way the agent's are: sized by the same volatility scale, capped by the same risk overlay
(its ``mode``), filled by the same fill and charged the same fee and borrow cost. Otherwise the
null scores a different bet (buy-and-hold's close-to-close return at the unoverlaid vol-targeted
exposure) and the overlay's own timing is credited to the agent.

:class:`EnvTables` holds the env's per-step tables over a record — the sizing's exposure per
unit of signal ``uncapped_scale``, the overlay's ``overlay_cap``, the fill table's returns
(:mod:`riskppo.envs.execution.fills`) and where the env starts flat — and turns ``[n, T]`` signals
into the positions and net returns a :class:`~riskppo.envs.TradingEnv` would book for each of
them (:func:`~riskppo.envs.execution.overlay.overlay_exposure`,
:func:`~riskppo.envs.execution.fills.step_returns`): array operations over all ``n`` signals at
once, equal to stepping the env with each signal sequence. :func:`timing_null` ranks the agent
among them (:func:`riskppo.stats.null.rank_against_null`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from riskppo.envs.execution.fills import FillReturns, fill_returns, step_returns
from riskppo.envs.execution.overlay import overlay_exposure
from riskppo.stats.null import RandomTiming, random_signals, rank_against_null

if TYPE_CHECKING:
    from riskppo.envs.trading.env import TradingEnv

__all__ = ["TABLE_COLUMNS", "EnvTables", "env_tables", "tables_from_record", "timing_null"]

NULL_CHUNK = 128  # random signals booked at once: bounds the memory of the null's temporaries
TABLE_COLUMNS = ("env_scale", "env_cap", "env_ret_old", "env_ret_new")
"""A walk-forward record's per-bar columns of the agent env's tables (:meth:`EnvTables.columns`)."""


@dataclass(frozen=True)
class EnvTables:
    """The agent env's tables over the ``T`` steps of a record (step ``i`` decides at one bar
    and is realised at the next, as the record's row ``i``).

    ``scale`` ``[T]``: the sizing's exposure per unit of signal at the decision bar
    (``TradingEnv.uncapped_scale``); ``cap`` ``[T]``: the overlay's cap on ``|exposure|``
    (``TradingEnv.overlay_cap``), ``None`` without an overlay; ``mode``: the overlay's ``"clip"``
    or ``"scale"``; ``fills``: the fill table's returns of each step; ``starts`` ``[T]`` bool: the
    steps at which the env starts flat (an episode's first; every walk-forward segment's);
    ``fee`` per unit of ``|Δexposure|``; ``borrow_per_bar`` per unit of short exposure held over
    a bar."""

    scale: np.ndarray
    cap: np.ndarray | None
    mode: str
    fills: FillReturns
    starts: np.ndarray
    fee: float
    borrow_per_bar: float

    def exposures(self, signals: np.ndarray) -> np.ndarray:
        """``[..., T]`` exposures the env holds for ``signals`` ``[..., T]``."""
        return overlay_exposure(signals, self.scale, self.cap, self.mode)

    def returns(self, signals: np.ndarray) -> np.ndarray:
        """``[..., T]`` net log returns the env books for ``signals`` ``[..., T]``."""
        return step_returns(
            self.exposures(signals),
            self.fills,
            self.starts,
            fee=self.fee,
            borrow_per_bar=self.borrow_per_bar,
        )

    def columns(self) -> dict[str, np.ndarray]:
        """The tables as per-bar record columns :data:`TABLE_COLUMNS` (``env_cap`` is ``inf``
        without an overlay)."""
        cap = np.full(len(self.scale), np.inf) if self.cap is None else self.cap
        return dict(
            zip(TABLE_COLUMNS, (self.scale, cap, self.fills.old, self.fills.new), strict=True)
        )


def env_tables(env: TradingEnv, first_bar: int, n_steps: int) -> EnvTables:
    """The tables of ``env`` for an episode of ``n_steps`` steps from decision bar ``first_bar``
    (``ValueError`` if it runs past the env's bars)."""
    bars = np.arange(first_bar, first_bar + n_steps)
    if n_steps < 1 or first_bar < 0 or bars[-1] + 1 >= len(env.df):
        raise ValueError(f"{n_steps} steps from bar {first_bar} do not fit {len(env.df)} bars")
    opens = env.df["open"].to_numpy(np.float64) if "open" in env.df.columns else None
    ret = fill_returns(env.fill, opens, env.df["close"].to_numpy(np.float64))
    overlay = env.overlay
    starts = np.zeros(n_steps, dtype=bool)
    starts[0] = True
    return EnvTables(
        scale=np.asarray(env.uncapped_scale, dtype=np.float64)[bars],
        cap=None if overlay is None or env.overlay_cap is None else env.overlay_cap[bars],
        mode="clip" if overlay is None else overlay.mode,
        fills=FillReturns(ret.old[bars], ret.new[bars], ret.delayed),
        starts=starts,
        fee=env.fee,
        borrow_per_bar=env.borrow_rate / env.bars_per_year,
    )


def tables_from_record(
    frame: pd.DataFrame, env: Mapping[str, Any], overlay: Mapping[str, Any] | None
) -> EnvTables | None:
    """The tables of a stitched walk-forward record ``frame`` (its :data:`TABLE_COLUMNS` and
    ``segment``; every segment starts flat), with the cells' ``env`` settings (``fill``,
    ``fee``, ``borrow_rate``, ``bars_per_year``) and ``overlay`` settings (its ``mode``; ``None``
    without one). ``None`` where the record or the settings predate them (an old run)."""
    need = ("fill", "fee", "borrow_rate", "bars_per_year")
    if any(c not in frame.columns for c in TABLE_COLUMNS) or any(env.get(k) is None for k in need):
        return None
    segment = frame["segment"].to_numpy()
    starts = np.concatenate(([True], segment[1:] != segment[:-1]))
    col = {c: frame[c].to_numpy(np.float64) for c in TABLE_COLUMNS}
    return EnvTables(
        scale=col["env_scale"],
        cap=None if overlay is None else col["env_cap"],
        mode="clip" if overlay is None else str(overlay.get("mode", "clip")),
        fills=FillReturns(col["env_ret_old"], col["env_ret_new"], env["fill"] == "next_close"),
        starts=starts,
        fee=float(env["fee"]),
        borrow_per_bar=float(env["borrow_rate"]) / float(env["bars_per_year"]),
    )


def timing_null(
    agent_sharpe: float,
    tables: EnvTables,
    band: tuple[float, float],
    *,
    smoothness: float,
    periods_per_year: float,
    n: int = 2000,
    seed: int = 0,
) -> RandomTiming:
    """Where ``agent_sharpe`` ranks among ``n`` smooth random signals in ``band``
    (:func:`~riskppo.stats.null.random_signals`, span ``smoothness``) held in the agent's env
    (``tables``): the annualised Sharpe ratios of their accounts' simple returns, as the
    agent's ``agent_sharpe`` must be."""
    signals = random_signals(int(n), len(tables.scale), band, smoothness, seed)  # [n, T]
    paths = np.empty_like(signals)
    for lo in range(0, len(signals), NULL_CHUNK):  # the account's temporaries, a chunk at a time
        paths[lo : lo + NULL_CHUNK] = np.expm1(tables.returns(signals[lo : lo + NULL_CHUNK]))
    return rank_against_null(agent_sharpe, paths, periods_per_year)
