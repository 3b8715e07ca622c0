"""One training iteration as the algorithm reads (design §2, §11)::

    collect → estimate → rescale (PopArt) → update → schedules

:func:`train_iteration` takes the :class:`Learner` (what is trained: weights, optimizer, env)
and a :class:`~riskppo.algo.state.TrainingState`, and returns the next state and the
iteration's :class:`~riskppo.algo.log.UpdateLog`. Weights and optimizer change in place;
everything else that changes is in the returned state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from riskppo import core
from riskppo.adversarial.regularizer import sa_eps
from riskppo.algo.bc import BCSource, bc_inputs
from riskppo.algo.buffer import Rollout
from riskppo.algo.collect import CollectorState, RolloutHooks, collect_rollout
from riskppo.algo.constraints import Constraint, constraint_for
from riskppo.algo.estimate import Estimates, estimate
from riskppo.algo.log import (
    EntropyFloorLog,
    EstimateLog,
    LossStats,
    LSTMLog,
    RiskLog,
    UpdateLog,
)
from riskppo.algo.returns import Rescale, apply_rescale
from riskppo.algo.settings import ent_schedule, entropy_target, floor_coef, step_entropy_floor
from riskppo.algo.state import EntropyControl, TrainingState
from riskppo.algo.update import LossFn, UpdateContext, UpdateMetrics, ppo_update
from riskppo.config import Config
from riskppo.envs.vec.tensors import obs_tensor
from riskppo.nn.critics import Critic
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState

__all__ = ["Learner", "learning_rate", "reset_carry", "train_iteration"]


@dataclass(frozen=True)
class Learner:
    """What one iteration trains: fixed for a ``learn`` call (the config may change between
    calls, e.g. a PBT explore)."""

    cfg: Config
    policy: RecurrentActorCritic
    critic: Critic
    optimizer: torch.optim.Optimizer
    vgs: Any | None  # riskppo.optim.VarianceGradientScaler
    env: VecEnv
    bc: BCSource | None = None  # demonstrations for the BC term (bc.source: file | teacher)
    # the minibatch loss when ``compile: true`` (the model's
    # :class:`~riskppo.algo.compiled.CompiledLoss`, so it compiles once); None: the eager one
    loss_fn: LossFn | None = None
    hooks: RolloutHooks | None = None  # called during collection (e.g. SB3 callbacks)

    @property
    def constraint(self) -> Constraint[Any] | None:
        """The constraint the config turns on (:mod:`riskppo.algo.constraints`), if any."""
        return constraint_for(self.cfg)


def learning_rate(cfg: Config, state: TrainingState) -> float:
    """The learning rate of the next update: constant, or linear to 0 at ``schedule_total``."""
    p, c = cfg.ppo, state.counters
    if p.lr_schedule == "linear":
        return p.learning_rate * max(1.0 - c.num_timesteps / max(c.schedule_total, 1), 0.0)
    return p.learning_rate


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """``lr`` into every param group (R-PBT-1)."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def reset_carry(learner: Learner, state: TrainingState) -> TrainingState:
    """Reset every env with seeds derived from (seed, update count) and zero the LSTMs; the
    reset ends every open segment of the constraint (R-REL-4)."""
    env, policy = learner.env, learner.policy
    env.seed(learner.cfg.seed + state.counters.n_updates)
    obs = obs_tensor(env.reset(), next(policy.parameters()).device)
    n = obs.shape[0]
    carry = CollectorState(
        obs, torch.ones(n, dtype=torch.bool, device=obs.device), policy.initial_state(n, obs.device)
    )
    constraint = learner.constraint
    risk = state.risk
    if constraint is not None and risk is not None:
        risk = constraint.end_segments(risk)
    return state.replace(carry=carry, risk=risk)


def current_sa_eps(cfg: Config, n_updates: int) -> float:
    """ε of the SA-PPO regulariser at update ``n_updates`` (0 when it is off)."""
    a = cfg.adversarial
    return sa_eps(a.eps, a.eps_warmup_updates, n_updates) if a.kappa > 0 else 0.0


def apply_rescales(policy: RecurrentActorCritic, rescales: tuple[Rescale, ...]) -> None:
    """The PopArt step (R-ALG-8): output layers follow the updated return statistics."""
    for r in rescales:
        layers = policy.critic_out_layers if r.target == "critics" else [policy.risk_out_layer]
        apply_rescale(layers, r)


def train_iteration(learner: Learner, state: TrainingState) -> tuple[TrainingState, UpdateLog]:
    """collect → estimate → rescale → update → schedules, from ``state`` (which must have a
    carry: :func:`reset_carry`). Each stage takes the learner and the state and returns the
    next state and what the next stage reads (PureJaxRL's runner state)."""
    assert state.carry is not None
    lr = learning_rate(learner.cfg, state)
    set_learning_rate(learner.optimizer, lr)
    state, rollout = collect_stage(learner, state)
    state, est = estimate_stage(learner, state, rollout)
    state, metrics = update_stage(learner, state, est)
    log = update_log(learner, state, est, metrics, lr, rollout)
    return state.replace(entropy=step_entropy(learner, state.entropy, metrics)), log


def collect_stage(learner: Learner, state: TrainingState) -> tuple[TrainingState, Rollout]:
    """The rollout of ``cfg.ppo.n_steps`` steps from the state's carry; the state gets the
    carry after it and the episodes that ended in it."""
    assert state.carry is not None
    rollout, carry, episodes = collect_rollout(
        learner.policy,
        learner.env,
        state.carry,
        learner.cfg.ppo.n_steps,
        learner.cfg.ppo.chunk_len,
        state.rng.sample,
        learner.hooks,
    )
    return state.replace(carry=carry, episodes=state.episodes.extend(episodes)), rollout


def estimate_stage(
    learner: Learner, state: TrainingState, rollout: Rollout
) -> tuple[TrainingState, Estimates]:
    """Values, advantages and the constraint's part of ``rollout``, then the PopArt rescale of
    the output layers; the state gets the return statistics, the rewards' moments, the
    constraint's state and the critic's LSTM state after the rollout."""
    assert state.carry is not None
    est = estimate(
        learner.cfg, learner.policy, learner.critic, state.scaling, rollout,
        learner.constraint if state.risk is not None else None, state.risk, state.rewards,
    )  # fmt: skip
    apply_rescales(learner.policy, est.rescales)
    carry = dataclasses.replace(
        state.carry, state=RecurrentState(state.carry.state.pi, est.vf_state)
    )
    risk = est.constraint.state if est.constraint is not None else None
    return state.replace(scaling=est.scaling, rewards=est.moments, risk=risk, carry=carry), est


def update_stage(
    learner: Learner, state: TrainingState, est: Estimates
) -> tuple[TrainingState, UpdateMetrics]:
    """The PPO epochs over the estimated batch (weights and optimizer change in place); the
    state gets the counters after them."""
    cfg, c, ent = learner.cfg, state.counters, state.entropy
    ctx = UpdateContext(
        cfg,
        learner.policy,
        learner.critic,
        learner.optimizer,
        state.rng.shuffle,
        ent.coef + floor_coef(cfg, learner.env.action_space, ent.floor),
        learner.vgs,
        sa_eps=current_sa_eps(cfg, c.n_updates),
        bc=bc_inputs(cfg, learner.policy, learner.bc, c.num_timesteps),
        consecutive_skips=c.nonfinite_skips,
        loss_fn=learner.loss_fn,
    )
    metrics = ppo_update(ctx, est.data)
    counters = dataclasses.replace(
        c,
        num_timesteps=c.num_timesteps + cfg.ppo.n_steps * learner.env.num_envs,
        n_updates=c.n_updates + 1,
        nonfinite_skips=metrics.consecutive_skips,
    )
    return state.replace(counters=counters), metrics


def step_entropy(learner: Learner, ent: EntropyControl, metrics: UpdateMetrics) -> EntropyControl:
    """The entropy coefficient schedule and the learned floor after an update (R-ALG-10)."""
    if not metrics.means:
        return ent
    cfg, mean_entropy = learner.cfg, metrics.means["entropy"]
    coef, schedule = core.entropy_coef_step(ent_schedule(cfg), ent.schedule, mean_entropy)
    floor = step_entropy_floor(cfg, learner.env.action_space, ent.floor, mean_entropy)
    return dataclasses.replace(ent, coef=coef, schedule=schedule, floor=floor)


def update_log(
    learner: Learner,
    state: TrainingState,
    est: Estimates,
    m: UpdateMetrics,
    lr: float,
    rollout: Rollout,
) -> UpdateLog:
    """The iteration's numbers (nothing is logged here)."""
    cfg, space = learner.cfg, learner.env.action_space
    losses = LossStats.from_means(m.means) if m.means else None
    discrete = not isinstance(space, spaces.Box)
    per_dim = None
    if losses is not None and isinstance(space, spaces.Box):
        per_dim = losses.entropy / int(np.prod(space.shape))
    target = entropy_target(cfg, space)
    floor = None
    if target is not None:
        ent = state.entropy
        floor = EntropyFloorLog(target, floor_coef(cfg, space, ent.floor), ent.floor.below)
    costs = rollout.costs_fraction
    finite = costs[torch.isfinite(costs)]
    ep = state.episodes
    return UpdateLog(
        num_timesteps=state.counters.num_timesteps,
        n_updates=state.counters.n_updates,
        losses=losses,
        n_skipped_nonfinite_ratio=m.n_skipped_nonfinite_ratio,
        n_skipped_nonfinite_loss=m.n_skipped_nonfinite_loss,
        learning_rate=lr,
        ent_coef=state.entropy.coef,
        entropy_per_dim=per_dim,
        discrete=discrete,
        estimate=estimate_log(est),
        lstm=lstm_log(learner.policy, state.carry.state if state.carry else None),
        entropy_floor=floor,
        sa_eps=current_sa_eps(cfg, state.counters.n_updates - 1)
        if cfg.adversarial.kappa > 0
        else None,
        risk=risk_log(learner, est, state),
        ep_rew_mean=float(np.mean(ep.returns)) if ep.returns else None,
        ep_len_mean=float(np.mean(ep.lengths)) if ep.lengths else None,
        costs_fraction=float(finite.mean()) if finite.numel() else None,
        costs_nonfinite=rollout.costs_nonfinite,
        vgs_factors=dict(learner.vgs.last_factors) if learner.vgs is not None else {},
    )


def estimate_log(est: Estimates) -> EstimateLog:
    a, s = est.adv_stats, est.scaling
    return EstimateLog(
        explained_variance=est.explained_variance,
        adv_mean=a.mean,
        adv_std=a.std,
        adv_max_abs=a.max_abs,
        value_target_scale=s.scale,
        ret_mean=s.mean,
        ret_std=float(s.moments.var.sqrt()),
        uncapped_scale=est.uncapped_scale,
    )


def lstm_log(policy: RecurrentActorCritic, state: RecurrentState | None) -> tuple[LSTMLog, ...]:
    """Per-layer hidden-state norm, mean and std of every LSTM after the rollout (R-MON)."""
    if state is None:
        return ()
    hs = {"actor": state.pi.h}
    names = [n for n in policy.lstm_modules() if n != "actor"]
    hs.update({name: s.h for name, s in zip(names, state.vf)})
    return tuple(
        LSTMLog(
            name,
            layer,
            float(h[layer].norm(dim=-1).mean()),
            float(h[layer].mean()),
            float(h[layer].std()),
        )
        for name, h in hs.items()
        for layer in range(h.shape[0])
    )


def risk_log(learner: Learner, est: Estimates, state: TrainingState) -> RiskLog:
    """R-RISK-1: the critic-predicted CVaR per state and the empirical CVaR of episode returns.

    The rollout-time outputs are de-normalised with the scaling they were produced under
    (``est.out_scaling``), not the one this rollout's statistics update made."""
    cfg, critic, policy = learner.cfg, learner.critic, learner.policy
    alpha = cfg.risk.cvar_alpha
    taus = core.quantile_midpoints(max(critic.n_out, 32), device=est.critic_out.device)
    per_critic = [
        core.cvar_from_quantiles(est.out_scaling.to_raw(critic.quantiles(o, taus)), alpha)
        for o in policy.value_outputs(est.critic_out)
    ]  # each critic's CVaR per state, then the pessimistic one (twin critics)
    cvar_states = torch.stack(per_critic).min(dim=0).values
    cvar = var = None
    returns = state.episodes.returns
    if len(returns) >= 2:
        c, v = core.empirical_cvar(torch.tensor(list(returns)), alpha)
        cvar, var = float(c), float(v)
    constraint = dict(est.constraint.metrics) if est.constraint is not None else {}
    return RiskLog(float(cvar_states.mean()), constraint, cvar, var)
