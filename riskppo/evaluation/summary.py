"""``riskppo eval RUN_DIR``: the evaluation of a run's latest checkpoint as a labelled table.

:func:`evaluation_summary` evaluates and returns a JSON-ready dict; :func:`format_evaluation`
renders it as the table that is printed; :func:`write_evaluation` writes both into the run
directory, as ``evaluation.json`` / ``evaluation.txt`` (trading runs:
``evaluation_<split>.json`` / ``.txt``, one pair per split)::

    riskppo eval: CartPole-v1
      run          runs/cartpole
      checkpoint   ckpt-000000100352 (100,352 steps trained)
      split        — (not a trading env)
      episodes     10, deterministic policy
      unit         episode return (sum of rewards)
      mean return  487.3
      std          25.10
      CVaR 5%      412.0  (mean of the worst 5% of episode returns)
      min / max    412.0 / 500.0

On the trading env each evaluation episode runs the whole split period from its first bar, so
with the deterministic policy every episode is the same one: one is run
(:func:`distinct_episodes`), and its return is the log return of equity over the period.
:func:`validation_summary` is what ``riskppo train`` prints at its end for a trading run: the
agent against vol-targeted buy-and-hold on the validation split, from one backtest pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from riskppo.agent import DistributionalPPO
from riskppo.config import Config
from riskppo.envs.registration import data_kwargs, data_label, env_kind
from riskppo.envs.trading.factory import trading_range
from riskppo.evaluation.backtest import BacktestResult, backtest
from riskppo.evaluation.backtest_result import SPLIT_NAMES
from riskppo.runs.rundir import latest_good_checkpoint, open_run
from riskppo.safefs import write_text_atomic

__all__ = [
    "distinct_episodes",
    "evaluation_summary",
    "format_evaluation",
    "format_validation",
    "return_unit",
    "run_label",
    "validation_summary",
    "write_evaluation",
]


def single_asset(cfg: Config) -> bool:
    """Whether ``cfg`` trains a single-asset bar env (the trading env): its data section names
    the asset, its splits are periods of it (:class:`~riskppo.envs.registration.EnvKind`)."""
    kind = env_kind(cfg.env.id)
    return kind is not None and kind.single_asset


def run_label(cfg: Config) -> str:
    """What a run trains on: its env id and, for trading, the data actually used (the file of
    ``data.path``, else the bundled dataset), e.g. ``"riskppo/Trading-v0 on prices.csv"``."""
    if not single_asset(cfg):
        return cfg.env.id
    return f"{cfg.env.id} on {data_label(cfg.data.dataset, cfg.data.path, cfg.data.symbol)}"


def distinct_episodes(cfg: Config, split: str, n_episodes: int) -> int:
    """Deterministic evaluation episodes worth running on ``split``: 1 where every episode is the
    same one — the trading env starting each at the period's first bar (``random_start`` false,
    the default outside the train split) — else ``n_episodes``."""
    if not single_asset(cfg) or cfg.env.kwargs.get("random_start", split == "train"):
        return n_episodes
    return 1


def return_unit(cfg: Config) -> str:
    """What an episode return is, in words: on the trading env the sum of the rewards, each the
    bar's net log return times ``reward_scale`` (so, at scale 1, the log return of equity)."""
    if not single_asset(cfg):
        return "episode return (sum of rewards)"
    scale = float(cfg.env.kwargs.get("reward_scale", 1.0))
    unit = "log return of equity over the episode, net of costs"
    return unit if scale == 1.0 else f"{scale:g} × {unit} (env.kwargs.reward_scale)"


def _period(cfg: Config, split: str) -> dict[str, str]:
    """First and last bar (ISO timestamps) of the ``split`` part of a trading run's data."""
    df, lo, hi = trading_range(part=split, **data_kwargs(cfg.data))
    return {"start": df.index[lo].isoformat(), "end": df.index[hi - 1].isoformat()}


def evaluation_summary(run_dir: Path, n_episodes: int = 10, split: str = "val") -> dict[str, Any]:
    """Evaluate the newest good checkpoint of ``run_dir`` over ``n_episodes`` episodes with the
    deterministic policy (trading: each episode runs the whole ``split`` period, and the one
    distinct episode is run once: :func:`distinct_episodes`).

    Returns ``{run_dir, checkpoint, num_timesteps, env, split, period, episodes, deterministic,
    same_episode, unit, cvar_alpha, return: {mean, std, cvar, min, max}}``; returns are raw
    episode returns (sums of rewards; ``unit`` says what they are), ``split`` and ``period`` are
    ``None`` for non-trading envs.
    """
    ckpt = latest_good_checkpoint(run_dir)  # an older good one if the latest is bad
    with open_run(run_dir, ckpt) as (cfg, model):
        n = distinct_episodes(cfg, split, n_episodes)
        stats = model.evaluate(n_episodes=n, deterministic=True, part=split)
        steps = int(model.num_timesteps)
    trading = single_asset(cfg)
    return {
        "run_dir": str(run_dir),
        "checkpoint": ckpt.name,
        "num_timesteps": steps,
        "env": run_label(cfg),
        "split": split if trading else None,
        "period": _period(cfg, split) if trading else None,
        "episodes": int(stats["n_episodes"]),
        "deterministic": True,
        "same_episode": trading and distinct_episodes(cfg, split, 2) == 1,
        "unit": return_unit(cfg),
        "cvar_alpha": cfg.risk.cvar_alpha,
        "return": {key: stats[key] for key in ("mean", "std", "cvar", "min", "max")},
    }


def format_evaluation(ev: dict[str, Any]) -> str:
    """The evaluation as a labelled two-column table (plain text, one row per line)."""
    r, alpha = ev["return"], ev["cvar_alpha"]
    split = "— (not a trading env)"
    if ev["split"] is not None:
        start, end = ev["period"]["start"][:10], ev["period"]["end"][:10]
        how = (
            "one episode over the whole period: with the deterministic policy every episode "
            "is this one"
            if ev.get("same_episode")
            else "episodes start at random bars (env.kwargs.random_start)"
        )
        split = f"{ev['split']}: {start} → {end} ({how})"
    worst = f"(mean of the worst {alpha:.0%} of episode returns)"
    rows = [
        ("run", ev["run_dir"]),
        ("checkpoint", f"{ev['checkpoint']} ({ev['num_timesteps']:,} steps trained)"),
        ("split", split),
        ("episodes", f"{ev['episodes']}, deterministic policy"),
        ("unit", ev.get("unit", "episode return (sum of rewards)")),
        ("mean return", f"{r['mean']:#.4g}"),
        ("std", f"{r['std']:#.4g}"),
        (f"CVaR {alpha:.0%}", f"{r['cvar']:#.4g}  {worst}"),
        ("min / max", f"{r['min']:#.4g} / {r['max']:#.4g}"),
    ]
    width = max(len(label) for label, _ in rows)
    head = f"riskppo eval: {ev['env']}"
    if ev["split"] is not None:  # which part of the data, in the title too
        head += f", {SPLIT_NAMES[ev['split']]} split (--split {ev['split']})"
    return "\n".join([head] + [f"  {k:<{width}}  {v}" for k, v in rows])


def write_evaluation(run_dir: Path, ev: dict[str, Any], table: str) -> tuple[Path, Path]:
    """Write ``ev`` (JSON) and ``table`` (text) into ``run_dir``; returns both paths."""
    stem = "evaluation" if ev["split"] is None else f"evaluation_{ev['split']}"
    json_path, txt_path = run_dir / f"{stem}.json", run_dir / f"{stem}.txt"
    write_text_atomic(json_path, json.dumps(ev, indent=2) + "\n")
    write_text_atomic(txt_path, table + "\n")
    return json_path, txt_path


def validation_summary(model: DistributionalPPO, split: str = "val") -> str:
    """A few lines on how ``model`` (trained on the trading env) did on ``split``, from one
    deterministic backtest pass (:func:`~riskppo.evaluation.backtest.backtest`): return, Sharpe
    and horizon CVaR against vol-targeted buy-and-hold, the CVaR limit, and the share of bars in
    the market. All figures net of costs."""
    return format_validation(backtest(model, split))


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.2%}"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def format_validation(r: BacktestResult) -> str:
    """:func:`validation_summary`'s lines for the backtest ``r``."""
    a, b = r.metrics["agent"], r.metrics["vol_target_buy_and_hold"]
    name = SPLIT_NAMES[r.part]
    limit = a.cvar_limit
    verdict = (
        ""
        if limit is None
        else f"; limit {limit:+.2%}: " + ("met" if a.cvar_limit_met else "violated")
    )
    share = "n/a" if a.market_share is None else f"{a.market_share:.0%}"
    rows = [
        ("total return", _pct(a.total_return), _pct(b.total_return)),
        ("Sharpe (annualised)", _num(a.sharpe), _num(b.sharpe)),
        (
            f"CVaR {a.cvar_alpha:.0%} of {a.cvar_horizon_bars}-bar log returns",
            _pct(a.cvar_horizon) + verdict,
            _pct(b.cvar_horizon),
        ),
        ("in the market (share of bars)", share, "—"),
    ]
    width, mid = max(len(k) for k, _, _ in rows), max(len(x) for _, x, _ in rows)
    head = (
        f"riskppo: {name} split of {r.dataset}, {r.start:%Y-%m-%d} → {r.end:%Y-%m-%d} "
        f"({a.n_bars} bars, deterministic policy, net of costs)"
    )
    lines = [head, f"  {'':<{width}}  {'agent':<{mid}} | vol-targeted buy-and-hold"]
    lines += [f"  {k:<{width}}  {x:<{mid}} | {y}" for k, x, y in rows]
    return "\n".join(lines)
