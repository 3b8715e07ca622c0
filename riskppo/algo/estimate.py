"""Estimate step: critic pass over the rollout, GAE with time-limit bootstrap, return scaling.

Order (R-ALG-6/7/8): values from the critics (twin → min of means, raw units) → GAE →
update return statistics with this rollout's returns → normalise targets with the *updated*
statistics → normalise advantages once for the whole rollout → cut into chunks for training.

Pure: no weights change here. With PopArt the critics' output layers must follow the new
statistics; :attr:`Estimates.rescales` says which, and the training loop applies them
(:func:`riskppo.algo.returns.apply_rescale`) as an explicit step before the update.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from riskppo import core
from riskppo.algo.buffer import ChunkBatch, Rollout, cat_states, chunk_critic, to_chunks
from riskppo.algo.constraints import Constraint, ConstraintInput, ConstraintStep
from riskppo.algo.returns import (
    Rescale,
    ReturnScaling,
    RewardMoments,
    rescales_outputs,
    update_reward_moments,
    update_scaling,
)
from riskppo.algo.terms import rollout_inputs
from riskppo.config import Config
from riskppo.nn.critics import Critic
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.nn.recurrent import LSTMState


@dataclass
class Estimates:
    """Outputs of the estimate step (raw units unless said)."""

    data: ChunkBatch  # training chunks
    values: Tensor  # [T, N] raw V(s_t), twin min of means
    returns: Tensor  # [T, N] raw λ-returns
    advantages: Tensor  # [T, N] raw advantages
    critic_out: Tensor  # [C, T, N, K] critic outputs (normalised units at rollout time)
    # the scaling ``critic_out`` was produced under (before this rollout's statistics update):
    # ``out_scaling.to_raw(critic_out)`` are its raw-unit predictions
    out_scaling: ReturnScaling
    vf_state: tuple[LSTMState, ...]  # critic state after the last step
    adv_stats: core.AdvantageStats
    scaling: ReturnScaling  # updated statistics
    uncapped_scale: float
    explained_variance: float
    moments: RewardMoments  # the rewards' moments, this rollout's included
    constraint: ConstraintStep[Any] | None = None  # the constraint's part (when there is one)
    # PopArt rescales of output layers that the loop must apply before the update (R-ALG-8)
    rescales: tuple[Rescale, ...] = ()


def critic_values(
    policy: RecurrentActorCritic,
    critic: Critic,
    scaling: ReturnScaling,
    rollout: Rollout,
    chunk_len: int,
) -> tuple[Tensor, Tensor, Tensor, tuple[LSTMState, ...], list[tuple[LSTMState, ...]]]:
    """Run the critics over the rollout: ``(outputs, values, next_values, final_state, chunks)``.

    ``next_values[t]`` is the value of the observation that followed step ``t``; for a truncated
    step it is the value of the true final observation evaluated with that env's post-step
    critic state — the state after processing step ``t`` — never the reset state (R-ALG-6).
    """
    T = rollout.obs.shape[0]
    trunc_next = {int(t) + 1 for t in rollout.final_index[:, 0]}
    chunk_starts = set(range(0, T, chunk_len))
    with torch.inference_mode():
        out, final, captured = policy.critic_sequence(
            rollout.obs,
            rollout.episode_starts,
            rollout.start_state,
            actor_latent=rollout.actor_latent,
            capture=sorted(chunk_starts | trunc_next),
        )
        values = scaling.to_raw(_twin_min(critic, policy, out))  # twin: min of means (R-ALG-4)
        next_values = torch.empty_like(values)
        next_values[:-1] = values[1:]
        last_out, _ = policy.critic_step(
            rollout.last_obs,
            RecurrentState(rollout.last_pi_state, final),
            rollout.last_episode_start,
        )
        next_values[-1] = scaling.to_raw(_twin_min(critic, policy, last_out))
        if rollout.final_pi_state is not None:
            t_idx, env_idx = rollout.final_index[:, 0], rollout.final_index[:, 1]
            states = tuple(
                cat_states(
                    [
                        captured[int(t) + 1][k].select(slice(int(i), int(i) + 1))
                        for t, i in zip(t_idx, env_idx)
                    ]
                )
                for k in range(len(final))
            )
            no_reset = torch.zeros(len(t_idx), device=values.device)
            post = RecurrentState(rollout.final_pi_state, states)  # post-step states (R-ALG-6)
            f_out, _ = policy.critic_step(rollout.final_obs, post, no_reset)
            next_values[t_idx, env_idx] = scaling.to_raw(_twin_min(critic, policy, f_out))
    chunks = [captured[t] for t in sorted(chunk_starts)]
    return out, values, next_values, final, chunks


def _twin_min(critic: Critic, policy: RecurrentActorCritic, out: Tensor) -> Tensor:
    """Min over the main critics of their means (normalised units), risk head excluded."""
    return critic.mean(policy.value_outputs(out)).min(dim=0).values


def estimate(
    cfg: Config,
    policy: RecurrentActorCritic,
    critic: Critic,
    scaling: ReturnScaling,
    rollout: Rollout,
    constraint: Constraint[Any] | None = None,
    constraint_state: Any = None,
    moments: RewardMoments | None = None,
) -> Estimates:
    """Turn a rollout into training chunks (see module docstring for the order of operations).

    ``moments``: the rewards' moments remembered from earlier rollouts (the Sharpe utility's,
    :class:`~riskppo.algo.returns.RewardMoments`; None: none yet), updated with this one's first.

    With a ``constraint`` (:mod:`riskppo.algo.constraints`) and its state, the constraint's
    part of the rollout: the advantages the policy loss sees combine the return's and the
    constraint's (``(A + λ·Â_c)/(1+λ)``, R-RISK-4), and its loss terms get their inputs.
    """
    p = cfg.ppo
    out, values, next_values, final, vf_chunks = critic_values(
        policy, critic, scaling, rollout, p.chunk_len
    )
    adv, returns = core.gae(
        rollout.rewards, values, next_values, rollout.terminated, rollout.truncated, p.gamma,
        p.gae_lambda,
    )  # fmt: skip
    old_pred = critic.old_prediction(policy.value_outputs(out))
    popart = cfg.critic.popart and critic.supports_popart and rescales_outputs(cfg, scaling)
    new_scaling, uncapped = update_scaling(cfg, scaling, returns)
    rescales = [Rescale("critics", scaling, new_scaling)] if popart else []
    if popart:  # the outputs will be rescaled: their old predictions must follow (R-ALG-5/8)
        old_pred = new_scaling.to_norm(scaling.to_raw(old_pred))
    adv_norm, adv_stats = _normalized(adv, cfg)
    step, aux = None, {}
    if constraint is not None:
        dones = rollout.terminated | rollout.truncated
        x = ConstraintInput(rollout.rewards, dones, lambda: policy.risk_output(out))
        step = constraint.after_rollout(constraint_state, x)
        rescales.extend(step.rescales)
        adv_norm = constraint.advantage(adv_norm, step, p.per_env_advantage)
        aux.update(step.batch)
    terms = constraint.loss_terms() if constraint is not None else ()
    moments = update_reward_moments(moments or RewardMoments(), rollout.rewards, p.sharpe_rate)
    aux.update(rollout_inputs(cfg, rollout, _return_scale(constraint, step), moments, terms))
    vf_states = tuple(cat_states([c[k] for c in vf_chunks]) for k in range(len(final)))
    states = RecurrentState(cat_states(rollout.pi_chunk_states), vf_states)
    targets = new_scaling.to_norm(returns)
    data = _chunks(rollout, cfg, states, adv_norm, adv, targets, old_pred, aux)
    return Estimates(
        data=data,
        values=values,
        returns=returns,
        advantages=adv,
        critic_out=out,
        out_scaling=scaling,
        vf_state=final,
        adv_stats=adv_stats,
        scaling=new_scaling,
        uncapped_scale=uncapped,
        explained_variance=_explained_variance(returns, values),
        moments=moments,
        constraint=step,
        rescales=tuple(rescales),
    )


def _return_scale(
    constraint: Constraint[Any] | None, step: ConstraintStep[Any] | None
) -> Callable[[Tensor], Tensor]:
    """What the constraint does to a return signal (the identity without one)."""
    if constraint is None or step is None:
        return lambda x: x
    return lambda x: constraint.scale_return(x, step)


def _explained_variance(returns: Tensor, values: Tensor) -> float:
    """``1 − Var(returns − values) / Var(returns)`` over the rollout; NaN where the returns do not
    vary."""
    var_ret = returns.var()
    return float(1 - (returns - values).var() / var_ret) if var_ret > 0 else float("nan")


def _normalized(adv: Tensor, cfg: Config) -> tuple[Tensor, core.AdvantageStats]:
    """Advantages normalised once for the whole rollout (R-ALG-7), or as they are."""
    p = cfg.ppo
    if p.normalize_advantage:
        return core.normalize_advantages(adv, per_env=p.per_env_advantage)
    stats = core.AdvantageStats(float(adv.mean()), float(adv.std()), float(adv.abs().max()), False)
    return adv, stats


def _chunks(
    rollout: Rollout,
    cfg: Config,
    states: RecurrentState,
    adv_norm: Tensor,
    adv: Tensor,
    targets: Tensor,
    old_pred: Tensor,
    aux: dict[str, Tensor],
) -> ChunkBatch:
    """The training chunks ``[L, n_chunks·N, ...]`` (:mod:`riskppo.algo.buffer`) entering
    with ``states``."""
    L = cfg.ppo.chunk_len
    return ChunkBatch(
        obs=to_chunks(rollout.obs, L),
        actions=to_chunks(rollout.actions, L),
        old_log_probs=to_chunks(rollout.log_probs, L),
        advantages=to_chunks(adv_norm, L),
        targets=to_chunks(targets, L),
        old_critic=chunk_critic(old_pred, L),
        episode_starts=to_chunks(rollout.episode_starts, L),
        state=states,
        raw_advantages=to_chunks(adv, L),
        aux={k: to_chunks(v, L) for k, v in aux.items()},
    )
