"""``riskppo signal RUN_DIR --data FILE``: the position a trained run holds from the next bar.

:func:`signal` loads the run's newest good checkpoint (as ``riskppo backtest`` does), makes the
run's env over the file (:mod:`riskppo.live.inputs`), runs the backtest's own
stepping over it (:func:`~riskppo.evaluation.episode.run_agent_episode`: the LSTM warms up from
the first bar with complete features, or from ``start``, with the run's observation normaliser,
sizing, overlay, fills and fees) and takes the agent's decision at the file's last bar
(:func:`~riskppo.live.decide.decide`, checked against every stepped bar). On the same
bars it is the backtest's position bit for bit: the decision at bar ``t`` of a file that ends
at ``t`` is the ``position`` the backtest (started at the same bar) holds from bar ``t + 1``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from riskppo.evaluation.episode import AgentEpisode, run_agent_episode
from riskppo.jsonable import jsonable
from riskppo.live.decide import Decision, check_decisions, decide
from riskppo.live.inputs import LiveInputError, RunData, file_env_factory, run_data
from riskppo.runs.rundir import load_for_evaluation
from riskppo.safefs import write_text_atomic

if TYPE_CHECKING:
    from riskppo.agent import DistributionalPPO

__all__ = [
    "LiveRun",
    "SignalRecord",
    "live_run",
    "signal",
    "signal_record",
    "write_signal",
]


def bar_time(ts: pd.Timestamp) -> str:
    """A bar's time for a terminal: the date alone for a daily bar (midnight), else the time."""
    ts = pd.Timestamp(ts)
    return str(ts.date()) if ts == ts.normalize() else str(ts)


@dataclass(frozen=True)
class SignalRecord:
    """Tomorrow's order of a run and its inputs (:class:`~riskppo.live.decide.
    Decision`). ``timestamp``: the last bar (the decision is made at its close, filled as the
    run's ``fill`` says — by default at the next bar's open); ``start``: the bar the agent
    started at (its LSTM warmed up from there over ``steps`` bars); ``action``: the policy's
    raw action; ``held``: the exposure decided at the bar before (held now); ``weights``: a
    portfolio's per-asset weights (symbol → weight), else ``None``; ``cvar_limit``: the
    overlay's limit, ``None`` without one."""

    run_dir: str
    checkpoint: str
    data: str
    kind: str
    timestamp: pd.Timestamp
    start: pd.Timestamp
    steps: int
    action: list[float]
    signal: float
    vol_scale: float
    overlay_cap: float | None
    forecast_cvar: float | None
    cvar_limit: float | None
    held: float
    exposure: float
    weights: dict[str, float] | None

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values (times as ISO strings)."""
        out = asdict(self)
        out["timestamp"] = self.timestamp.isoformat()
        out["start"] = self.start.isoformat()
        return dict(jsonable(out))

    def lines(self) -> list[str]:
        """The record for a terminal."""
        cap = "none" if self.overlay_cap is None else f"{self.overlay_cap:.4f}"
        cvar = "n/a" if self.forecast_cvar is None else f"{self.forecast_cvar:+.4%}"
        limit = "" if self.cvar_limit is None else f" (limit {self.cvar_limit:+.2%})"
        out = [
            f"last bar      {bar_time(self.timestamp)}  ({self.steps} bars of warm-up from "
            f"{bar_time(self.start)})",
            f"raw signal    {self.signal:+.6f}  (policy action "
            f"{', '.join(f'{a:+.4f}' for a in self.action)})",
            f"vol scale     {self.vol_scale:.6f}",
            f"overlay cap   {cap}",
            f"forecast CVaR {cvar}{limit}",
            f"held now      {self.held:+.6f}",
            f"target        {self.exposure:+.6f}  (exposure for the next bar)",
        ]
        if self.weights is not None:
            out += [f"  {name:<12}{w:+.6f}" for name, w in self.weights.items()]
        return out


class LiveRun(NamedTuple):
    """The agent over a file up to its last bar, and its decision there."""

    episode: AgentEpisode
    action: np.ndarray  # the policy's action at the last bar
    state: Any  # the recurrent state after that decision
    decision: Decision
    index: pd.DatetimeIndex  # the file's bars


def live_run(
    model: DistributionalPPO, data: str | Path, run: RunData, start: Any = None
) -> LiveRun:
    """Run ``model`` over the file ``data`` with the backtest's stepping and decide at its last
    bar (module docstring)."""
    shape = tuple(model.observation_space.shape or ())
    factory, index = file_env_factory(model.config, data, run, shape, start)
    episode = run_agent_episode(model, "test", env=factory)
    if episode.final_obs is None:
        bar = index[int(episode.infos[-1]["bar"])]
        raise LiveInputError(
            f"{data}: the agent was ruined at {bar} (equity at env.kwargs.ruin_equity): it "
            "holds no position after that"
        )
    action, state = model.predict(
        episode.final_obs[None], episode.state, np.zeros(1, dtype=bool), deterministic=True
    )
    env: Any = episode.env
    check_decisions(env, episode.actions, episode.infos)
    decision = decide(env, np.array(action[0]), env.trading_range[1])
    return LiveRun(episode, np.array(action[0]), state, decision, index)


def signal_record(live: LiveRun, *, run_dir: str, checkpoint: str, data: str) -> SignalRecord:
    """The :class:`SignalRecord` of a :class:`LiveRun`."""
    d, env, ep = live.decision, live.episode.env, live.episode
    symbols = getattr(env, "symbols", None)
    overlay = getattr(env, "overlay", None)
    first = int(ep.infos[0]["bar"]) - 1
    return SignalRecord(
        run_dir=run_dir,
        checkpoint=checkpoint,
        data=data,
        kind="portfolio" if symbols is not None else "trading",
        timestamp=live.index[d.bar],
        start=live.index[first],
        steps=len(ep.infos),
        action=[float(a) for a in np.atleast_1d(live.action)],
        signal=d.signal,
        vol_scale=d.vol_scale,
        overlay_cap=d.overlay_cap,
        forecast_cvar=d.forecast_cvar,
        cvar_limit=None if overlay is None else float(overlay.limit),
        held=float(ep.infos[-1]["position"]),
        exposure=d.exposure,
        weights=None
        if d.weights is None or symbols is None
        else {str(s): float(w) for s, w in zip(symbols, d.weights, strict=True)},
    )


def signal(run_dir: str | Path, data: str | Path, *, start: Any = None) -> SignalRecord:
    """Tomorrow's target exposure of the run ``run_dir`` after the last bar of the price file
    ``data`` (module docstring); ``start``: the bar (a time) the agent starts at, default the
    file's first bar with complete features."""
    ckpt, model = load_for_evaluation(Path(run_dir))
    try:
        live = live_run(model, data, run_data(model.config), start)
        return signal_record(live, run_dir=str(run_dir), checkpoint=ckpt.name, data=str(data))
    finally:
        model.close()


def write_signal(record: SignalRecord, out: str | Path) -> Path:
    """Write ``record`` as JSON to ``out`` atomically (temp file, rename)."""
    text = json.dumps(record.to_dict(), indent=2, allow_nan=False) + "\n"
    return write_text_atomic(Path(out), text)
