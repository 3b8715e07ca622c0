"""``riskppo paper RUN_DIR --data FEED``: paper-trade a run over a price file that grows.

Each call reads FEED (read like the run's data, the whole file), checks that the bars consumed
by earlier calls are unchanged, steps the agent through the bars appended since (its LSTM state,
position and equity carried over from the last call, :mod:`~riskppo.live.paper_state`)
and decides at the new last bar: the position to hold from the next bar. Orders (an exposure, or
a portfolio's per-asset weight, that changes) are appended to ``RUN_DIR/paper/orders.csv``.

**First call.** The agent starts at the feed's first bar with complete features and runs over
the whole history (its warm-up: positions simulated, nothing ordered); the paper account starts
flat at the feed's last bar, where the first order (reason ``start``) takes it to the agent's
position. Equity is counted from there.

**The check.** Every call ends by replaying the backtest's own stepping
(:func:`~riskppo.live.signal.live_run`) over the same bars from the same first bar and
comparing: the orders it implies from the paper start, the last decision, the LSTM state and the
equity must equal the live record exactly; the one-line verdict is :attr:`PaperReport.check`
(``riskppo paper`` prints it and exits 1 on a mismatch, :mod:`riskppo.cli.live`).

**Reasons** of an order: ``start``; ``overlay`` (the risk overlay capped the new position);
``signal`` (the policy's action changed); ``sizing`` (only the volatility scale moved).

A feed whose consumed bars changed (history rewritten, a bar removed or inserted) or that ends
before the last consumed bar is refused with one line, and nothing is written.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd
import torch

from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.live.decide import Decision, decide
from riskppo.live.inputs import LiveInputError, RunData, file_env_factory, run_data
from riskppo.live.paper_state import (
    ORDERS_HEADER,
    PaperFiles,
    PaperState,
    commit,
    feed_hash,
    lstm_from_json,
    lstm_to_json,
    paper_files,
    read_state,
    repair_orders,
)
from riskppo.live.signal import bar_time, live_run
from riskppo.runs.rundir import load_for_evaluation
from riskppo.safefs import read_text_nofollow

if TYPE_CHECKING:
    from pathlib import Path

    from riskppo.agent import DistributionalPPO

__all__ = ["PaperReport", "order_rows", "paper_step"]

# the env's episode state (its _new_episode_state) besides the bar and the episode end
TRADING_EPISODE = (
    "_pos", "_signal", "_dpda", "_log_equity", "_log_peak", "_turnover", "_sum_abs_gross",
    "_sum_costs", "_steps",
)  # fmt: skip
PORTFOLIO_EPISODE = (
    "_held", "_filled", "_contrib", "_scale_now", "_signal_now", "_uncapped_now", "_cap_now",
    "_log_equity", "_log_peak", "_turnover", "_sum_abs_gross", "_sum_costs", "_steps",
    "_held_jacobian",
)  # fmt: skip


class PaperReport(NamedTuple):
    """What one call did. ``new_bars``: bars stepped through; ``rows``: order rows written;
    ``check``: the verdict line; ``ok``: the live record equals the backtest's."""

    state: PaperState
    new_bars: int
    rows: list[str]
    check: str
    ok: bool


class Stepped(NamedTuple):
    """The agent driven over bars: a decision at each, the env and LSTM after the last."""

    decisions: list[Decision]
    actions: list[np.ndarray]
    lstm: Any
    env: Any


def _episode_fields(env: Any) -> tuple[str, ...]:
    return PORTFOLIO_EPISODE if isinstance(env, PortfolioEnv) else TRADING_EPISODE


def _snapshot(env: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _episode_fields(env):
        v = getattr(env, name)
        out[name] = v.tolist() if isinstance(v, np.ndarray) else v
    return out


def _restore(env: Any, saved: dict[str, Any]) -> None:
    for name in _episode_fields(env):
        v = saved[name]
        setattr(env, name, np.asarray(v, dtype=np.float64) if isinstance(v, list) else v)


def _act(model: DistributionalPPO, raw: np.ndarray, lstm: Any, start: bool) -> tuple[Any, Any]:
    """The policy's deterministic action for one raw env observation ``[D]`` (normalised as
    the evaluation VecEnv normalises it)."""
    obs = model.normalize_obs(np.asarray(raw, dtype=np.float32)[None])
    actions, lstm = model.predict(obs, lstm, np.array([start]), deterministic=True)
    return np.array(actions[0]), lstm


def drive(
    model: DistributionalPPO, env: Any, bar: int, lstm: Any, pending: np.ndarray | None
) -> Stepped:
    """From ``bar`` (``pending``: the action already decided there, the env's episode state
    restored; ``None``: a fresh start, the agent decides at ``bar``) to the env's last bar."""
    last = env.trading_range[1]
    decisions: list[Decision] = []
    actions: list[np.ndarray] = []
    action = pending
    if action is None:
        raw, _ = env.reset(options={"start": bar})
        action, lstm = _act(model, raw, lstm, True)
        decisions.append(decide(env, action, bar))
        actions.append(action)
    while bar < last:
        raw, _, terminated, _, info = env.step(action)
        bar = int(info["bar"])
        if terminated:
            raise LiveInputError(f"the agent was ruined at bar {bar} (env.kwargs.ruin_equity)")
        action, lstm = _act(model, raw, lstm, False)
        decisions.append(decide(env, action, bar))
        actions.append(action)
    return Stepped(decisions, actions, lstm, env)


def _reason(d: Decision, prev_action: np.ndarray | None, action: np.ndarray) -> str:
    capped = d.forecast_cvar is not None and d.overlay_cap is not None and _at_cap(d)
    if capped:
        return "overlay"
    if prev_action is None or not np.array_equal(prev_action, action):
        return "signal"
    return "sizing"


def _at_cap(d: Decision) -> bool:
    """Whether the overlay's cap bound the decision (the forecast at the limit)."""
    if d.weights is not None:
        held = float(np.abs(d.weights).sum())
        return d.overlay_cap is not None and held < d.vol_scale * d.signal * (1 - 1e-12)
    return abs(d.exposure) < abs(d.signal) * d.vol_scale * (1 - 1e-12)


def order_rows(
    decisions: list[Decision],
    actions: list[np.ndarray],
    index: pd.DatetimeIndex,
    assets: tuple[str, ...],
    before: tuple[np.ndarray, np.ndarray | None] | None,
) -> list[str]:
    """CSV rows ``time,asset,from,to,reason`` of the positions that change along
    ``decisions`` (with their ``actions``), from ``before`` = ``(held, action)`` (``None``:
    the paper start, flat, reason ``start``)."""
    rows: list[str] = []
    held, prev_action = (np.zeros(len(assets)), None) if before is None else before
    first = before is None
    for d, action in zip(decisions, actions, strict=True):
        now = np.array([d.exposure]) if d.weights is None else np.asarray(d.weights)
        reason = "start" if first else _reason(d, prev_action, action)
        for asset, old, new in zip(assets, held, now, strict=True):
            if old != new:
                when = index[d.bar].isoformat()
                rows.append(f"{when},{asset},{float(old)!r},{float(new)!r},{reason}\n")
        held, prev_action, first = now, action, False
    return rows


def _held(state: PaperState) -> np.ndarray:
    return np.array([state.exposure]) if state.weights is None else np.asarray(state.weights)


def _assets(env: Any, data: Path) -> tuple[str, ...]:
    """The order log's asset names: a portfolio's symbols, else the feed's file name."""
    symbols = getattr(env, "symbols", None)
    return tuple(symbols) if symbols is not None else (data.name.split(".")[0],)


def _frames(env: Any) -> list[pd.DataFrame]:
    return list(env.data.frames) if isinstance(env, PortfolioEnv) else [env.df]


def _check_feed(state: PaperState, index: pd.DatetimeIndex, frames: list[pd.DataFrame]) -> None:
    """:class:`LiveInputError` unless the feed still holds the bars consumed, unchanged."""
    last = pd.Timestamp(state.last_bar)
    where = f"the bars consumed so far end at {last} (bar {state.bars - 1})"
    if len(index) < state.bars or index[-1] < last:
        raise LiveInputError(
            f"{state.data}: the feed ends at {index[-1]} ({len(index)} bars) but {where}: it "
            "went back in time; nothing was changed"
        )
    if index[state.bars - 1] != last:
        found = int(index.searchsorted(last))
        moved = "is gone" if found >= len(index) or index[found] != last else f"is bar {found}"
        raise LiveInputError(
            f"{state.data}: {where}, and in the feed that bar {moved}: bars were removed or "
            "inserted before it (history rewritten, or skipped); nothing was changed"
        )
    if feed_hash(frames, state.bars) != state.feed_sha256:
        raise LiveInputError(
            f"{state.data}: a bar already consumed (up to {last}) changed since the last call: "
            "history rewritten; nothing was changed (restore the feed, or delete RUN_DIR/paper "
            "to start over)"
        )


def _new_state(
    old: PaperState | None, stepped: Stepped, index: pd.DatetimeIndex, meta: dict[str, Any]
) -> PaperState:
    d = stepped.decisions[-1]
    env = stepped.env
    return PaperState(
        checkpoint=meta["checkpoint"],
        data=meta["data"],
        episode_start=int(index[meta["episode_start"]].value) if old is None else old.episode_start,
        paper_start=int(index[d.bar].value) if old is None else old.paper_start,
        bars=len(index),
        last_bar=int(index[d.bar].value),
        feed_sha256=feed_hash(_frames(env), len(index)),
        env=_snapshot(env),
        action=[float(a) for a in np.atleast_1d(stepped.actions[-1])],
        lstm=lstm_to_json(stepped.lstm),
        exposure=d.exposure,
        weights=None if d.weights is None else [float(w) for w in d.weights],
        signal=d.signal,
        log_equity_start=float(env._log_equity) if old is None else old.log_equity_start,
        orders_rows=(0 if old is None else old.orders_rows) + meta["n_rows"],
        orders_bytes=meta["orders_bytes"],
    )


def paper_step(run_dir: str | Path, data: str | Path) -> PaperReport:
    """One call of the paper loop (module docstring) on the run ``run_dir`` and the feed
    ``data``; the caller holds the run's lock."""
    from pathlib import Path

    run_dir, data = Path(run_dir), Path(data)
    files = paper_files(run_dir)
    state = read_state(files)
    repair_orders(files, state)
    ckpt, model = load_for_evaluation(run_dir)
    try:
        if state is not None and state.checkpoint != ckpt.name:
            raise LiveInputError(
                f"the paper loop runs checkpoint {state.checkpoint} but the run's newest good "
                f"one is {ckpt.name}: delete {files.dir} to paper-trade the new one from scratch"
            )
        return _paper_step(model, files, state, data, ckpt.name)
    finally:
        model.close()


def _paper_step(
    model: DistributionalPPO, files: PaperFiles, state: PaperState | None, data: Path, ckpt: str
) -> PaperReport:
    from riskppo.envs.registration import resolve_overlay

    cfg, run = model.config, run_data(model.config)
    start = None if state is None else pd.Timestamp(state.episode_start)
    shape = tuple(model.observation_space.shape or ())
    factory, index = file_env_factory(cfg, data, run, shape, start)
    env: Any = factory(**resolve_overlay(cfg.env.kwargs, cfg.risk))
    assets = _assets(env, data)
    if state is not None:
        _check_feed(state, index, _frames(env))
        if len(index) == state.bars:  # nothing new: the state stands
            check, ok = paper_check(model, run, data, state, files)
            return PaperReport(state, 0, [], check, ok)
        bar = state.bars - 1
        env.reset(options={"start": bar})
        _restore(env, state.env)
        space = model.action_space
        pending = np.asarray(state.action, dtype=space.dtype).reshape(space.shape or ())
        lstm = lstm_from_json(state.lstm, model.device)
        stepped = drive(model, env, bar, lstm, pending)
        rows = order_rows(
            stepped.decisions, stepped.actions, index, assets, (_held(state), pending)
        )
        new_bars = len(index) - state.bars
    else:
        stepped = drive(model, env, env.trading_range[0], None, None)
        rows = order_rows(stepped.decisions[-1:], stepped.actions[-1:], index, assets, None)
        new_bars = len(stepped.decisions)
    size = files.orders.stat().st_size if files.orders.exists() else 0
    text = "".join(rows)
    meta = {
        "checkpoint": ckpt,
        "data": str(data),
        "episode_start": env.trading_range[0] if state is None else None,
        "n_rows": len(rows),
        "orders_bytes": size + (0 if size else len(ORDERS_HEADER)) + len(text.encode()),
    }
    new = _new_state(state, stepped, index, meta)
    commit(files, text, new)
    check, ok = paper_check(model, run, data, new, files)
    return PaperReport(new, new_bars, rows, check, ok)


def paper_check(
    model: DistributionalPPO, run: RunData, data: Path, state: PaperState, files: PaperFiles
) -> tuple[str, bool]:
    """The check line (module docstring) and whether the live record passed it."""
    live = live_run(model, data, run, start=pd.Timestamp(state.episode_start))
    ep, env, index = live.episode, live.episode.env, live.index
    start_bar = int(index.get_loc(pd.Timestamp(state.paper_start)))
    decisions, actions = [], []
    log_eq_start = 0.0
    for action, info in zip(ep.actions, ep.infos, strict=True):
        if int(info["bar"]) == start_bar:
            log_eq_start = float(info["log_equity"])
        if int(info["bar"]) - 1 >= start_bar:
            decisions.append(decide(env, action, int(info["bar"]) - 1))
            actions.append(action)
    decisions.append(live.decision)
    actions.append(live.action)
    expected = order_rows(decisions, actions, index, _assets(env, data), None)
    written = read_text_nofollow(files.orders).splitlines(keepends=True)[1:]
    equity = math.exp(float(ep.infos[-1]["log_equity"]) - log_eq_start)
    live_equity = math.exp(state.log_equity - state.log_equity_start)
    lstm = lstm_from_json(state.lstm, model.device)
    problems = [
        what
        for what, same in (
            ("orders", written == expected),
            ("target", _same_position(state, live.decision)),
            ("equity", equity == live_equity),
            ("LSTM state", _same_lstm(lstm, live.state)),
        )
        if not same
    ]
    first = bar_time(index[ep.infos[0]["bar"] - 1])
    span = f"{first} … {bar_time(index[-1])}, {len(ep.infos)} steps"
    if problems:
        differ = ", ".join(problems)
        return (
            f"check: MISMATCH with a backtest over the same bars ({span}): {differ} differ",
            False,
        )
    return (
        f"check: a backtest over the same bars ({span}) gives the same {len(expected)} order "
        f"row(s), target {live.decision.exposure:+.6f} and equity {equity:.6f} since "
        f"{bar_time(index[start_bar])}: OK",
        True,
    )


def _same_position(state: PaperState, d: Decision) -> bool:
    if d.weights is not None:
        return state.weights == [float(w) for w in d.weights]
    return state.exposure == d.exposure


def _same_lstm(a: Any, b: Any) -> bool:
    pairs = [(a.pi, b.pi), *zip(a.vf, b.vf, strict=True)]
    return all(torch.equal(x.h, y.h) and torch.equal(x.c, y.c) for x, y in pairs)
