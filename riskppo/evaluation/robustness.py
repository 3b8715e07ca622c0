"""Robustness evaluation (R-ADV): return (and, for trading, Sharpe/CVaR) under each attack at
several ε, as a table (``robustness.json``) and a plot (``robustness.png``).

``riskppo eval RUN_DIR --attack pgd,random,critic --eps 0.01,0.05,0.1``
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from riskppo import core
from riskppo.adversarial.attacks import ATTACKS, StepInput, get_attack
from riskppo.agent import DistributionalPPO
from riskppo.config import ConfigError
from riskppo.envs.episodes import run_episodes
from riskppo.envs.registration import env_kind
from riskppo.envs.vec.tensors import env_actions, obs_tensor
from riskppo.evaluation.backtest import backtest
from riskppo.evaluation.plots import figure_png, new_figure
from riskppo.nn.outputs import check_finite_outputs
from riskppo.nn.policy import RecurrentState
from riskppo.nn.predict_args import check_state, episode_starts
from riskppo.safefs import ensure_real_dir, write_bytes_atomic, write_text_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TRADING_KEYS = ("sharpe", "cvar_95", "max_drawdown", "annual_return")


class AttackedAgent:
    """``model`` acting on attacked observations; ``predict`` has the model's signature.

    Each step: the attack sees the clean (normalised) observation and the states entering the
    step, returns ``δ`` with ``|δ|_∞ ≤ eps``; the actor acts on ``obs + δ`` and the actor and
    critic states advance on what the agent saw.
    """

    def __init__(
        self, model: DistributionalPPO, attack: str, eps: float, steps: int = 10, seed: int = 0
    ) -> None:
        self.model = model
        self.attack = get_attack(attack)
        self.eps = eps
        self.steps = steps
        self.generator = torch.Generator().manual_seed(seed)

    def predict(
        self,
        observation: Any,
        state: RecurrentState | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, RecurrentState]:
        m = self.model
        policy = m.policy
        obs = obs_tensor(np.asarray(observation, dtype=np.float32), m.device)
        n = obs.shape[0]
        state = state if state is not None else policy.initial_state(n, m.device)
        where = "AttackedAgent.predict"
        state = check_state(policy, state, n, where, f"observation has {n} row(s)")
        starts = episode_starts(episode_start, (n,), m.device, where)
        inp = StepInput(policy, m.critic, obs, state, starts)
        delta = self.attack(inp, self.eps, self.steps, self.generator)
        seen = obs + delta
        with torch.no_grad():
            step = policy.act(
                seen, state.pi, starts, deterministic=deterministic, generator=m.state.rng.sample
            )
            _, vf = policy.critic_step(seen, state, starts, step.critic_input)
        check_finite_outputs(m.loaded_from, action_distribution=step.log_prob)
        return env_actions(step.actions, m.action_space), RecurrentState(step.pi_state, vf)


def evaluate_attack(
    model: DistributionalPPO,
    attack: str,
    eps: float,
    *,
    n_episodes: int = 10,
    steps: int = 10,
    part: str = "test",
) -> dict[str, Any]:
    """One row: return statistics under ``attack`` at ``eps`` (``eps=0``: clean)."""
    agent: Any = model if eps == 0 else AttackedAgent(model, attack, eps, steps, model.config.seed)
    row: dict[str, Any] = {"attack": attack if eps > 0 else "none", "eps": eps}
    kind = env_kind(model.config.env.id)
    if kind is not None and kind.single_asset:  # the single asset's backtest metrics
        metrics = backtest(model, part, agent=agent).metrics_dict()["agent"]
        row.update({k: metrics[k] for k in TRADING_KEYS})
    venv = model.make_eval_env(part=part, n_envs=min(n_episodes, 4))
    try:
        returns = torch.tensor(run_episodes(agent, venv, n_episodes, True), dtype=torch.float64)
    finally:
        venv.close()
    cvar, _ = core.empirical_cvar(returns, model.config.risk.cvar_alpha)
    row.update(
        mean=float(returns.mean()),
        std=float(returns.std()) if len(returns) > 1 else 0.0,
        cvar=float(cvar),
        n_episodes=len(returns),
    )
    return row


def check_attack_args(attacks: Sequence[str], eps_values: Sequence[float]) -> None:
    """Raise :class:`ConfigError` naming unknown attacks or ε radii that are not positive."""
    unknown = [a for a in attacks if a not in ATTACKS]
    if unknown or not attacks:
        raise ConfigError(f"--attack: unknown attack(s) {unknown}; choose from {sorted(ATTACKS)}")
    bad = [e for e in eps_values if not (e > 0 and math.isfinite(e))]
    if bad or not eps_values:
        raise ConfigError(f"--eps: radii must be positive finite numbers, got {list(eps_values)}")


def robustness_table(
    model: DistributionalPPO,
    attacks: Sequence[str],
    eps_values: Sequence[float],
    *,
    n_episodes: int = 10,
    steps: int = 10,
    part: str = "test",
) -> list[dict[str, Any]]:
    """The clean row, then one row per (attack, ε)."""
    check_attack_args(attacks, eps_values)  # before any evaluation runs
    kw = {"n_episodes": n_episodes, "steps": steps, "part": part}
    rows = [evaluate_attack(model, "none", 0.0, **kw)]  # type: ignore[arg-type]
    for name in attacks:
        rows += [evaluate_attack(model, name, e, **kw) for e in eps_values]  # type: ignore[arg-type]
    return rows


def robustness_figure(rows: list[dict[str, Any]], title: str = "") -> Figure:
    """Mean return (± std) vs ε per attack; with trading rows a second panel for Sharpe."""
    trading = "sharpe" in rows[0]
    fig = new_figure(10 if trading else 6, 4, dpi=None)
    axes = fig.subplots(1, 2 if trading else 1, squeeze=False)[0]
    clean = rows[0]
    for i, name in enumerate(sorted({r["attack"] for r in rows} - {"none"})):
        sel = [clean, *(r for r in rows if r["attack"] == name)]
        eps = [r["eps"] for r in sel]
        mean = np.array([r["mean"] for r in sel])
        std = np.array([r["std"] for r in sel])
        axes[0].plot(eps, mean, marker="o", color=f"C{i}", label=name)
        axes[0].fill_between(eps, mean - std, mean + std, color=f"C{i}", alpha=0.15)
        if trading:
            sharpe = [np.nan if r["sharpe"] is None else r["sharpe"] for r in sel]
            axes[1].plot(eps, sharpe, marker="o", color=f"C{i}", label=name)
    axes[0].set_xlabel("ε (L∞, normalised observations)")
    axes[0].set_ylabel("episode return")
    axes[0].legend()
    if trading:
        axes[1].set_xlabel("ε (L∞, normalised observations)")
        axes[1].set_ylabel("Sharpe ratio (test period)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title or "return under observation attacks")
    return fig


def format_rows(rows: list[dict[str, Any]]) -> str:
    keys = ["attack", "eps", "mean", "std", "cvar", *(k for k in TRADING_KEYS if k in rows[0])]
    lines = [" | ".join(f"{k:>13}" for k in keys)]
    for r in rows:
        cells = []
        for k in keys:
            v = r[k]
            cells.append(f"{v:>13.4g}" if isinstance(v, float) else f"{v!s:>13}")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def write_robustness(rows: list[dict[str, Any]], out_dir: Path, title: str = "") -> Path:
    ensure_real_dir(out_dir)
    write_text_atomic(out_dir / "robustness.json", json.dumps(rows, indent=2))
    return write_bytes_atomic(
        out_dir / "robustness.png", figure_png(robustness_figure(rows, title))
    )
