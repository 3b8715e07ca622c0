"""Backtest a trained trading agent against baselines on one part of its split (R-TRADE-3).

:func:`backtest` runs the agent deterministically over the whole ``train`` / ``val`` / ``test``
period of its config (one env, start to end, observation statistics frozen), records every bar, asks
the critic for its predicted return distribution along the same observation sequence, and runs the
baselines (buy-and-hold, vol-targeted buy-and-hold, SMA crossover) through the same
:class:`TradingEnv` — same bars (from the agent's first decision bar), fees, borrow costs and fill
(the env's ``fill``: by default the next bar's open). The baselines' sizing does not follow the
agent's config: ``buy_and_hold`` and ``sma_crossover`` hold full unit positions (``sizing="none"``)
and ``vol_target_buy_and_hold`` is long signal 1 sized by ``sizing="vol_target"`` with the config's
``vol_target`` / ``vol_span`` / ``max_leverage`` (the env's defaults where the config has none),
without the agent's core position or risk overlay. ``vt_bh_overlay`` (the full signal) and
``floor_overlay`` (the agent's least signal: ``min_signal``, else 0) are held in the agent's own
env — its sizing, overlay, fill and fees (:mod:`riskppo.evaluation.references`); with an overlay
the verdict is read against ``vt_bh_overlay``.

Every strategy's metrics say how much it was in the market (``market_share``,
``mean_abs_exposure``) and give the constraint's own figure (``cvar_horizon``, the CVaR_α of
``risk.cvar_horizon``-bar returns) against ``risk.cvar_limit``; a strategy in the market on fewer
than :data:`~riskppo.evaluation.metrics.FLAT_MARKET_SHARE` of the bars is ``flat`` and called out
(:func:`flat_warning`).

:func:`backtest_run` does it for a run directory's latest checkpoint and writes
``RUN_DIR/backtest_<split>/``::

    metrics.json       {"agent": {...}, "buy_and_hold": {...}, "vol_target_buy_and_hold": {...},
                       "vt_bh_overlay": {...}, "floor_overlay": {...}, "sma_crossover": {...},
                       "supervised": {...}}; each with sharpe, sortino, max_drawdown, calmar,
                       cvar_95, annual_return, turnover (design §1.4) plus extras (market_share,
                       mean_abs_exposure, cvar_horizon, cvar_limit, cvar_limit_met, flat, ...;
                       see StrategyMetrics); undefined values are null
    run_info.json      dataset (the data file's name, or the bundled dataset's), data_path,
                       split, period, checkpoint, env costs and fill mode, key config
    equity.csv         per bar: close, agent position (exposure) and signal, equity and drawdown
                       of every strategy
    critic.csv         per decision bar: critic-predicted return-to-go quantiles, VaR/CVaR, realised
    report.html        one self-contained page (plots embedded)
    equity.png  position.png  returns.png  critic.png

:mod:`riskppo.cli.backtest` is the ``riskppo backtest RUN_DIR --split test`` command.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from riskppo import core
from riskppo.agent import DistributionalPPO
from riskppo.config import Config
from riskppo.envs.market.parts import SPLIT_PARTS
from riskppo.envs.registration import (
    data_kwargs,
    data_label,
    market_kind,
    resolve_overlay,
)
from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.trading.factory import make_trading_env
from riskppo.evaluation.backtest_result import SPLIT_NAMES, BacktestResult, flat_strategies
from riskppo.evaluation.baselines import (
    STRATEGIES,
    Policy,
    buy_and_hold_policy,
    flat_frame,
    run_policy,
    sma_crossover_policy,
    strategy_frame,
)
from riskppo.evaluation.episode import run_agent_episode
from riskppo.evaluation.metrics import (
    FLAT_MARKET_SHARE,
    MetricValue,
    StrategyMetrics,
    dumps_metrics,
    signal_floor,
    strategy_metrics,
)
from riskppo.evaluation.plots import save_plots
from riskppo.evaluation.references import FLAT_BY_DESIGN, FLOOR_OVERLAY, VT_BH_OVERLAY
from riskppo.evaluation.report import STRATEGY_LABELS, write_report
from riskppo.evaluation.supervised import supervised_signals
from riskppo.evaluation.timing_null import env_tables
from riskppo.evaluation.trials import TrialSpec, judge_trials
from riskppo.evaluation.verdict import statistics_block, verdict_lines
from riskppo.jsonable import jsonable
from riskppo.runs.rundir import load_for_evaluation
from riskppo.safefs import ensure_real_dir, write_text_atomic

__all__ = [
    "CRITIC_LEVELS",
    "STRATEGIES",
    "BacktestArtifacts",
    "BacktestResult",
    "backtest",
    "backtest_run",
    "flat_strategies",
    "flat_warning",
    "overlay_binding_replayed",
]

# the sizing each baseline runs with, whatever the agent's config says
BASELINE_SIZING: dict[str, str] = {
    "buy_and_hold": "none",
    "vol_target_buy_and_hold": "vol_target",
    "sma_crossover": "none",
}
CRITIC_LEVELS: tuple[float, ...] = (0.05, 0.25, 0.5, 0.75, 0.95)


@dataclass(frozen=True)
class BacktestArtifacts:
    """What :func:`backtest_run` wrote, and the result it wrote it from."""

    result: BacktestResult
    out_dir: Path
    metrics: Path
    report: Path
    equity_csv: Path
    plots: dict[str, Path]
    checkpoint: Path
    statistics: dict[str, Any]  # :func:`~riskppo.evaluation.verdict.statistics_block`

    def verdict(self) -> str:
        """The verdict and the figures it rests on, for a terminal
        (:func:`~riskppo.evaluation.verdict.verdict_lines`)."""
        bars = len(self.result.frames["agent"])
        where = f" on the {SPLIT_NAMES[self.result.part]} split ({bars:,} bars)"
        return "\n".join(verdict_lines(self.statistics, where))


def backtest(
    model: DistributionalPPO,
    part: str = "test",
    *,
    sma_fast: int = 20,
    sma_slow: int = 50,
    sma_allow_short: bool = False,
    agent: Any = None,
    flat_threshold: float = FLAT_MARKET_SHARE,
) -> BacktestResult:
    """Backtest ``model`` on ``part`` of its data split against buy-and-hold, vol-targeted
    buy-and-hold (without and in the agent's env, its overlay included), the agent's floor
    signal in its env, SMA crossover and the supervised baseline (a ridge forecast from the
    agent's features, fitted on the training rows, as a position in the agent's band).

    ``agent`` (default: ``model``) is what acts: anything with ``model.predict``'s signature,
    e.g. the model under an observation attack (R-ADV). A strategy in the market on fewer than
    ``flat_threshold`` of the bars is marked ``flat``.

    The agent acts deterministically from the first decision bar of the period to its end (one
    env, recurrent state carried, observation normalisation frozen at the model's statistics).
    Returns are the env's unscaled net log returns ``gross_return - costs`` (``reward_scale``
    does not enter). Raises ``ValueError`` if the model was not trained on the trading env.
    """
    cfg = model.config
    factory, env = _agent_env(cfg, part)
    close = env.df["close"]
    agent_frame, obs_seq, bootstrap = _run_agent(model, factory, part, close, agent or model)
    first_bar, last_bar = env.trading_range
    sma = {"fast": sma_fast, "slow": sma_slow, "allow_short": sma_allow_short}
    baseline_envs = {s: factory(**_with_sizing(cfg.env.kwargs, s)) for s in ("none", "vol_target")}
    frames = {"agent": agent_frame, **_run_baselines(baseline_envs, close, first_bar, sma)}
    frames |= _reference_frames(env, first_bar, signal_floor(cfg.env.kwargs))
    frames["supervised"] = _supervised_frame(cfg, env, first_bar)
    _check_same_bars(frames, agent_frame)
    start = pd.Timestamp(env.df.index[first_bar])
    critic = _critic_forecast(model, obs_seq, bootstrap, agent_frame, start, env.reward_scale)
    return BacktestResult(
        part=part,
        dataset=data_label(cfg.data.dataset, cfg.data.path, cfg.data.symbol),
        start=start,
        end=pd.Timestamp(env.df.index[last_bar]),
        bars_per_year=env.bars_per_year,
        frames=frames,
        metrics=_all_metrics(frames, cfg, env.bars_per_year, flat_threshold),
        critic=critic,
        cvar_alpha=cfg.risk.cvar_alpha,
        gamma=cfg.ppo.gamma,
        env_settings=_env_settings(
            env,
            baseline_envs["vol_target"],
            float(close.iloc[first_bar]),
            agent_frame["signal"].to_numpy(),
        ),
        config=cfg,
        num_timesteps=int(model.num_timesteps),
        sma=sma,
        flat_threshold=flat_threshold,
        tables=env_tables(env, first_bar, len(agent_frame)),
    )


def overlay_binding_replayed(model: DistributionalPPO, part: str) -> dict[str, Any] | None:
    """How the risk overlay bound on ``part`` with the positions the trained agent holds there:
    one deterministic episode over the period, judged by
    :meth:`~riskppo.envs.TradingEnv.overlay_binding` with its signals (None without an
    overlay). Over the training rows this is the agent's own binding share, where the env's
    tables alone can only say how often a full signal would be capped."""
    factory, env = _agent_env(model.config, part)
    if env.overlay is None:
        return None
    frame, _, _ = _run_agent(model, factory, part, env.df["close"], model)
    return env.overlay_binding(*env.trading_range, signals=frame["signal"].to_numpy())


def _agent_env(cfg: Config, part: str) -> tuple[Callable[..., TradingEnv], TradingEnv]:
    """The factory of ``part``'s whole-period envs and the agent's own env from it (its
    overlay resolved, unnormalised); ``ValueError`` unless ``cfg`` trades and ``part`` splits."""
    _check_backtestable(cfg, part)
    factory = _eval_env_factory(cfg, part)
    return factory, factory(**resolve_overlay(cfg.env.kwargs, cfg.risk))


def _check_backtestable(cfg: Config, part: str) -> None:
    """Raise ``ValueError`` unless ``cfg`` trained on the trading env and ``part`` is a split."""
    market_kind(cfg.env.id, "backtest", single_asset=True)
    if part not in SPLIT_PARTS:
        raise ValueError(f"part must be one of {SPLIT_PARTS}, got {part!r}")


def _run_baselines(
    baseline_envs: dict[str, TradingEnv],
    close: pd.Series,
    first_bar: int,
    sma: dict[str, Any],
) -> dict[str, pd.DataFrame]:
    """Strategy frame of each baseline, run in the env of its :data:`BASELINE_SIZING` from the
    agent's first decision bar ``first_bar``; ``sma`` holds ``fast``, ``slow``, ``allow_short``."""
    policies: dict[str, Policy] = {
        "buy_and_hold": buy_and_hold_policy(),
        "vol_target_buy_and_hold": buy_and_hold_policy(),
        "sma_crossover": sma_crossover_policy(
            close, sma["fast"], sma["slow"], allow_short=sma["allow_short"]
        ),
    }
    return {
        name: _run_baseline(baseline_envs[BASELINE_SIZING[name]], policy, first_bar)
        for name, policy in policies.items()
    }


def _reference_frames(env: TradingEnv, first_bar: int, floor: float) -> dict[str, pd.DataFrame]:
    """The full signal (``vt_bh_overlay``) and the agent's ``floor`` signal
    (``floor_overlay``) held in the agent's own env ``env`` (its sizing, overlay, fill and
    fees) from ``first_bar``."""
    return {
        VT_BH_OVERLAY: _run_baseline(env, buy_and_hold_policy(), first_bar),
        FLOOR_OVERLAY: _run_baseline(env, lambda bar: floor, first_bar),
    }


def _supervised_frame(cfg: Config, env: TradingEnv, first_bar: int) -> pd.DataFrame:
    """The supervised baseline (:mod:`riskppo.evaluation.supervised`) fitted on the run's
    training rows, traded in the agent's own env ``env`` (its band, sizing and overlay) from
    ``first_bar``."""
    train_env = _eval_env_factory(cfg, "train")(**resolve_overlay(cfg.env.kwargs, cfg.risk))
    if len(train_env.df) != len(env.df):
        raise RuntimeError("the training and backtest envs hold different frames")
    signals, _ = supervised_signals(train_env, env)
    return _run_baseline(env, lambda bar: float(signals[bar]), first_bar)


def _check_same_bars(frames: dict[str, pd.DataFrame], agent_frame: pd.DataFrame) -> None:
    """Raise ``RuntimeError`` if a strategy ran over other bars than the agent."""
    for name, frame in frames.items():
        if not frame.index.equals(agent_frame.index):
            raise RuntimeError(  # e.g. the agent was ruined (ruin_equity) and stopped early
                f"{name} ran over bars {frame.index[0]}..{frame.index[-1]} but the agent over "
                f"{agent_frame.index[0]}..{agent_frame.index[-1]}"
            )


def _all_metrics(
    frames: dict[str, pd.DataFrame], cfg: Config, bars_per_year: float, flat_threshold: float
) -> dict[str, StrategyMetrics]:
    """strategy → :class:`StrategyMetrics` of its net log returns and positions."""
    return {
        name: strategy_metrics(
            f["log_return"],
            f["position"],
            bars_per_year=bars_per_year,
            cvar_alpha=cfg.risk.cvar_alpha,
            cvar_horizon=cfg.risk.cvar_horizon,
            cvar_limit=cfg.risk.cvar_limit,
            flat_threshold=flat_threshold,
            signals=f["signal"],
            signal_floor=signal_floor(cfg.env.kwargs),
        )
        for name, f in frames.items()
    }


def _env_settings(
    env: TradingEnv, sized: TradingEnv, start_close: float, signals: np.ndarray
) -> dict[str, Any]:
    """Costs and settings of the agent's ``env`` and the vol-targeted baseline's ``sized`` env;
    ``start_close`` is the close at the first decision bar, ``signals`` ``[bars]`` the agent's
    signal on each decision bar (for how often the overlay bound)."""
    return {
        "fee": env.fee,
        "borrow_rate": env.borrow_rate,
        "positions": list(env.positions)
        if not env.continuous
        else f"continuous {list(env.signal_range)}",
        "fill": env.fill,
        "window": env.window,
        "reward_scale": env.reward_scale,
        "bars_per_year": env.bars_per_year,
        "agent_sizing": env.sizing,
        "signal_range": list(env.signal_range),
        "vol_target": sized.vol_target,
        "vol_span": sized.vol_span,
        "max_leverage": sized.max_leverage,
        "start_close": start_close,
        "overlay": env.overlay_binding(*env.trading_range, signals=signals) or None,
    }


def _with_sizing(kwargs: dict[str, Any], sizing: str) -> dict[str, Any]:
    """The agent's env kwargs with ``sizing`` instead of its own (vol_target / vol_span /
    max_leverage stay: the config's values, or the env's defaults where it has none). The
    agent's core position (``min_signal``) and risk ``overlay`` are not the baselines': they may
    go flat, and they are the positions a user knows, not ones the agent's limit shaped."""
    own = ("min_signal", "overlay")
    return {**{k: v for k, v in kwargs.items() if k not in own}, "sizing": sizing}


def _run_baseline(env: TradingEnv, policy: Policy, first_bar: int) -> pd.DataFrame:
    """Run ``policy`` from the agent's first decision bar ``first_bar`` to the period end.

    An env that cannot decide at ``first_bar`` yet (vol sizing needs ``vol_span`` bars of
    history: only possible at the very start of the data) starts at its first decision bar and
    is flat — no position, no return — on the bars before."""
    own_first = env.trading_range[0]
    start = max(first_bar, own_first)
    frame = run_policy(env, policy, options={"start": start})
    if start > first_bar:
        frame = pd.concat([flat_frame(env.df["close"], np.arange(first_bar + 1, start + 1)), frame])
    return frame


def flat_warning(
    metrics: dict[str, dict[str, MetricValue]] | BacktestResult,
    *,
    split: str | None = None,
    threshold: float = FLAT_MARKET_SHARE,
) -> str | None:
    """One line calling out the flat/near-flat strategies of a backtest, or ``None``.

    ``metrics`` is a :class:`BacktestResult` or a parsed ``metrics.json``.
    """
    if isinstance(metrics, BacktestResult):
        split = split or metrics.part
        threshold = metrics.flat_threshold
        metrics = metrics.metrics_dict()
    flat = [
        (name, entry.get("market_share"))
        for name, entry in metrics.items()
        if entry.get("flat") and name not in FLAT_BY_DESIGN  # a floor of 0 holds nothing
    ]
    if not flat:
        return None
    parts = [
        f"{STRATEGY_LABELS.get(name, name)} in the market on "
        f"{0.0 if share is None else float(share):.1%} of bars"
        for name, share in flat
    ]
    where = f" on the {split} split" if split else ""
    return (
        f"WARNING: flat/near-flat{where} (in the market on < {threshold:.0%} of bars): "
        + "; ".join(parts)
        + " — its risk figures describe holding (almost) nothing, not risk control"
    )


def _eval_env_factory(cfg: Config, part: str) -> Callable[..., TradingEnv]:
    """``factory(**env_kwargs)`` making the env of ``part`` that runs the whole period."""

    def factory(**kwargs: Any) -> TradingEnv:
        kwargs.pop("render_mode", None)
        kwargs["random_start"] = False  # the whole period, also for part="train"
        return make_trading_env(**data_kwargs(cfg.data), part=part, **kwargs)

    return factory


def _run_agent(
    model: DistributionalPPO,
    factory: Callable[..., TradingEnv],
    part: str,
    close: pd.Series,
    agent: Any,
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray | None]:
    """One deterministic episode of the agent over the period
    (:func:`~riskppo.evaluation.episode.run_agent_episode`).

    Returns its strategy frame, the ``[T, D]`` observations it decided on (as the policy saw
    them, i.e. normalised) and the final observation (``None`` if the episode was terminated).
    """
    episode = run_agent_episode(model, part, env=factory, agent=agent)
    frame = strategy_frame(episode.infos, close)
    return frame, episode.observations, episode.final_obs


def _critic_forecast(
    model: DistributionalPPO,
    obs_seq: np.ndarray,
    bootstrap: np.ndarray | None,
    agent_frame: pd.DataFrame,
    start: pd.Timestamp,
    reward_scale: float,
) -> pd.DataFrame:
    """Critic-predicted return-to-go quantiles along the agent's observation sequence, indexed
    by decision bar (``start``, then every bar of ``agent_frame`` but its last)."""
    log_returns = agent_frame["log_return"].to_numpy()
    index = pd.DatetimeIndex([start, *agent_frame.index[:-1]], name="timestamp")
    seq = obs_seq if bootstrap is None else np.concatenate([obs_seq, bootstrap[None]])
    episode_start = np.zeros((len(seq), 1), dtype=np.float32)
    episode_start[0] = 1.0
    taus, values = model.value_distribution(seq[:, None, :], episode_start=episode_start)
    q = np.sort(np.asarray(values, dtype=np.float64)[:, 0, :], axis=-1) / reward_scale  # [T(+1), K]
    taus = np.asarray(taus, dtype=np.float64)
    n = len(obs_seq)
    tail_value = float(q[n].mean()) if bootstrap is not None else 0.0
    gamma = model.config.ppo.gamma
    realised = np.empty(n)
    acc = tail_value
    for t in range(n - 1, -1, -1):  # G_t = r_t + γ G_{t+1}
        acc = float(log_returns[t]) + gamma * acc
        realised[t] = acc
    q = q[:n]
    alpha = model.config.risk.cvar_alpha
    qt = torch.from_numpy(q)
    out = {
        f"q{round(level * 100):02d}": np.array([np.interp(level, taus, row) for row in q])
        for level in CRITIC_LEVELS
    }
    out["mean"] = q.mean(axis=1)
    out["var"] = core.var_from_quantiles(qt, alpha).numpy()
    out["cvar"] = core.cvar_from_quantiles(qt, alpha).numpy()
    out["realised"] = realised
    return pd.DataFrame(out, index=index)


def backtest_run(
    run_dir: str | Path,
    split: str = "test",
    *,
    out_dir: str | Path | None = None,
    sma_fast: int = 20,
    sma_slow: int = 50,
    sma_allow_short: bool = False,
    trial: TrialSpec | None = None,
) -> BacktestArtifacts:
    """Backtest the newest good checkpoint of ``run_dir`` on ``split``; write the files in the
    module docstring into ``out_dir`` (default ``RUN_DIR/backtest_<split>``). ``trial``: record
    the judgement in its trial ledger; the verdict counts the ledger's trials on the data.

    The agent is deterministic and the evaluation env has no randomness, so one run dir gives
    one result; to report over seeds, backtest one run dir per seed and combine the
    ``metrics.json`` files with :func:`~riskppo.evaluation.metrics.aggregate_metrics`.
    """
    run_dir = Path(run_dir)
    ckpt, model = load_for_evaluation(run_dir)  # an older good one if the latest is bad
    try:
        result = backtest(
            model, split, sma_fast=sma_fast, sma_slow=sma_slow, sma_allow_short=sma_allow_short
        )
    finally:
        model.close()
    out = ensure_real_dir(Path(out_dir) if out_dir is not None else run_dir / f"backtest_{split}")
    metrics_path = write_text_atomic(out / "metrics.json", dumps_metrics(result.metrics_dict()))
    info = result.info() | {"run_dir": str(run_dir), "checkpoint": ckpt.name}
    write_text_atomic(out / "run_info.json", json.dumps(info, indent=2, allow_nan=False) + "\n")
    equity = result.equity_frame().to_csv(float_format="%.10g")
    equity_csv = write_text_atomic(out / "equity.csv", equity)
    write_text_atomic(out / "critic.csv", result.critic.to_csv(float_format="%.10g"))
    plots = save_plots(result, out)
    agent_r = result.frames["agent"]["log_return"]
    trials = judge_trials(trial, agent_r, result.bars_per_year, run_dir, result.config)
    block = statistics_block(
        result.frames,
        result.bars_per_year,
        fee=result.env_settings["fee"],
        n_trials=trial.n_trials if trial is not None else 1,
        trials=trials,
        overlay=result.env_settings.get("overlay") is not None,
        tables=result.tables,
    )
    write_text_atomic(out / "statistics.json", json.dumps(jsonable(block), indent=2) + "\n")
    report = write_report(result, out / "report.html", images=plots, info=info, statistics=block)
    return BacktestArtifacts(result, out, metrics_path, report, equity_csv, plots, ckpt, block)
