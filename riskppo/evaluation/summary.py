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
      mean return  487.3
      std          25.10
      CVaR 5%      412.0  (mean of the worst 5% of episode returns)
      min / max    412.0 / 500.0
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from riskppo.config import Config
from riskppo.envs.factory import trading_range
from riskppo.envs.registration import TRADING_ID, data_kwargs, data_label
from riskppo.safefs import write_text_atomic
from riskppo.train.rundir import latest_good_checkpoint, open_run

__all__ = ["evaluation_summary", "format_evaluation", "run_label", "write_evaluation"]


def run_label(cfg: Config) -> str:
    """What a run trains on: its env id and, for trading, the data actually used (the file of
    ``data.path``, else the bundled dataset), e.g. ``"riskppo/Trading-v0 on prices.csv"``."""
    if cfg.env.id != TRADING_ID:
        return cfg.env.id
    return f"{cfg.env.id} on {data_label(cfg.data.dataset, cfg.data.path, cfg.data.symbol)}"


def _period(cfg: Config, split: str) -> dict[str, str]:
    """First and last bar (ISO timestamps) of the ``split`` part of a trading run's data."""
    df, lo, hi = trading_range(part=split, **data_kwargs(cfg.data))
    return {"start": df.index[lo].isoformat(), "end": df.index[hi - 1].isoformat()}


def evaluation_summary(run_dir: Path, n_episodes: int = 10, split: str = "test") -> dict[str, Any]:
    """Evaluate the newest good checkpoint of ``run_dir`` over ``n_episodes`` episodes with the
    deterministic policy (trading: each episode runs the whole ``split`` period).

    Returns ``{run_dir, checkpoint, num_timesteps, env, split, period, episodes,
    deterministic, cvar_alpha, return: {mean, std, cvar, min, max}}``; returns are raw episode
    returns (sums of rewards), ``split`` and ``period`` are ``None`` for non-trading envs.
    """
    ckpt = latest_good_checkpoint(run_dir)  # an older good one if the latest is bad
    with open_run(run_dir, ckpt) as (cfg, model):
        stats = model.evaluate(n_episodes=n_episodes, deterministic=True, part=split)
        steps = int(model.num_timesteps)
    trading = cfg.env.id == TRADING_ID
    return {
        "run_dir": str(run_dir),
        "checkpoint": ckpt.name,
        "num_timesteps": steps,
        "env": run_label(cfg),
        "split": split if trading else None,
        "period": _period(cfg, split) if trading else None,
        "episodes": int(stats["n_episodes"]),
        "deterministic": True,
        "cvar_alpha": cfg.risk.cvar_alpha,
        "return": {key: stats[key] for key in ("mean", "std", "cvar", "min", "max")},
    }


def format_evaluation(ev: dict[str, Any]) -> str:
    """The evaluation as a labelled two-column table (plain text, one row per line)."""
    r, alpha = ev["return"], ev["cvar_alpha"]
    split = "— (not a trading env)"
    if ev["split"] is not None:
        start, end = ev["period"]["start"][:10], ev["period"]["end"][:10]
        split = f"{ev['split']}: {start} → {end} (each episode the whole period)"
    worst = f"(mean of the worst {alpha:.0%} of episode returns)"
    rows = [
        ("run", ev["run_dir"]),
        ("checkpoint", f"{ev['checkpoint']} ({ev['num_timesteps']:,} steps trained)"),
        ("split", split),
        ("episodes", f"{ev['episodes']}, deterministic policy"),
        ("mean return", f"{r['mean']:#.4g}"),
        ("std", f"{r['std']:#.4g}"),
        (f"CVaR {alpha:.0%}", f"{r['cvar']:#.4g}  {worst}"),
        ("min / max", f"{r['min']:#.4g} / {r['max']:#.4g}"),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join([f"riskppo eval: {ev['env']}"] + [f"  {k:<{width}}  {v}" for k, v in rows])


def write_evaluation(run_dir: Path, ev: dict[str, Any], table: str) -> tuple[Path, Path]:
    """Write ``ev`` (JSON) and ``table`` (text) into ``run_dir``; returns both paths."""
    stem = "evaluation" if ev["split"] is None else f"evaluation_{ev['split']}"
    json_path, txt_path = run_dir / f"{stem}.json", run_dir / f"{stem}.txt"
    write_text_atomic(json_path, json.dumps(ev, indent=2) + "\n")
    write_text_atomic(txt_path, table + "\n")
    return json_path, txt_path
