"""Typed metrics of one training iteration (R-MON).

:class:`UpdateLog` is what :func:`riskppo.algo.loop.train_iteration` reports; its
:meth:`UpdateLog.scalars` yields the logged ``namespace/name`` scalars (TensorBoard,
``metrics.jsonl``) and :mod:`riskppo.monitor.alerts` reads its fields. Nothing here logs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = [
    "CLIP_NORM",
    "EntropyFloorLog",
    "EstimateLog",
    "LSTMLog",
    "LossStats",
    "RiskLog",
    "UpdateLog",
]

_GRAD_NORM = "_grad_norm"
CLIP_NORM = "_pre_clip_norm"
"""Suffix of a clip group's pre-clip gradient norm (``actor_pre_clip_norm``, …) in the update's
means (:func:`riskppo.algo.update.clip_groups`)."""


_DICTS = {"grad_norms", "clip_norms", "optional"}  # LossStats' fields that hold several scalars


@dataclass(frozen=True)
class LossStats:
    """Means over the minibatches one update applied (:func:`riskppo.algo.update.ppo_update`)."""

    loss: float
    policy_loss: float
    value_loss: float
    entropy: float
    clip_fraction: float
    log_ratio_clamp_frac: float
    large_log_ratio_count: float
    approx_kl_k1: float
    approx_kl_k3: float
    vf_clip_fraction: float
    grad_norm_pre_clip: float
    grad_norm_post_clip: float
    # L2 gradient norm per parameter group: lstm_actor, lstm_critic, critic1, critic2, risk_head…
    grad_norms: dict[str, float] = field(default_factory=dict)
    # pre-clip L2 gradient norm per clip group: actor, critic, risk_head
    clip_norms: dict[str, float] = field(default_factory=dict)
    # terms that are on only in some configurations (SA-PPO, behaviour cloning, …)
    optional: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_means(cls, means: dict[str, float]) -> LossStats:
        names = {f.name for f in dataclasses.fields(cls)} - _DICTS
        missing = names - set(means)
        if missing:
            raise KeyError(f"update metrics lack {sorted(missing)}")
        rest = {k: v for k, v in means.items() if k not in names}
        grads = {k.removesuffix(_GRAD_NORM): v for k, v in rest.items() if k.endswith(_GRAD_NORM)}
        clip = {k.removesuffix(CLIP_NORM): v for k, v in rest.items() if k.endswith(CLIP_NORM)}
        optional = {
            k: v
            for k, v in rest.items()
            if not k.endswith(_GRAD_NORM) and not k.endswith(CLIP_NORM)
        }
        return cls(**{k: means[k] for k in names}, grad_norms=grads, clip_norms=clip,
                   optional=optional)  # fmt: skip

    def critic_grad_norms(self) -> dict[str, float]:
        """The value critics' heads (``critic1``, ``critic2``, …); the risk head is left out: its
        gradient is legitimately 0 in a minibatch where no segment finished."""
        return {
            k: v for k, v in self.grad_norms.items() if k.startswith("critic") and k[6:].isdigit()
        }

    def scalars(self) -> Iterator[tuple[str, float]]:
        for f in dataclasses.fields(self):
            if f.name not in _DICTS:
                yield f.name, getattr(self, f.name)
        for k, v in self.grad_norms.items():
            yield k + _GRAD_NORM, v
        for k, v in self.clip_norms.items():
            yield k + CLIP_NORM, v
        yield from self.optional.items()


@dataclass(frozen=True)
class EstimateLog:
    """What the estimate step saw: value fit, advantage statistics, return scaling."""

    explained_variance: float
    adv_mean: float
    adv_std: float
    adv_max_abs: float
    value_target_scale: float
    ret_mean: float
    ret_std: float
    uncapped_scale: float  # value-target scale before the cap (excessive_return_scaling)


@dataclass(frozen=True)
class LSTMLog:
    """Hidden-state statistics of one LSTM layer after the rollout."""

    name: str  # actor, critic, critic1, …
    layer: int
    norm: float
    mean: float
    std: float


@dataclass(frozen=True)
class EntropyFloorLog:
    """The learned entropy floor (R-ALG-10)."""

    target: float
    coef: float
    below: int  # consecutive updates with the mean entropy below the target


@dataclass(frozen=True)
class RiskLog:
    """R-RISK-1: predicted and empirical CVaR, and the constraint's own metrics."""

    cvar_pred: float
    constraint: dict[str, float]  # risk/… metrics of the multiplier step (riskppo.algo.constraints)
    cvar_empirical: float | None
    var_empirical: float | None


@dataclass(frozen=True)
class UpdateLog:
    """One iteration: collect → estimate → update, as numbers."""

    num_timesteps: int
    n_updates: int
    losses: LossStats | None  # None when no minibatch was applied
    n_skipped_nonfinite_ratio: int
    n_skipped_nonfinite_loss: int
    learning_rate: float
    ent_coef: float
    entropy_per_dim: float | None  # continuous actions: mean entropy per action dimension
    discrete: bool
    estimate: EstimateLog
    lstm: tuple[LSTMLog, ...] = ()
    entropy_floor: EntropyFloorLog | None = None
    sa_eps: float | None = None
    risk: RiskLog | None = None
    ep_rew_mean: float | None = None
    ep_len_mean: float | None = None
    costs_fraction: float | None = None  # mean of the finite info["reward_costs_fraction"]
    costs_nonfinite: int = 0  # entries reported but not finite (absent ones are not counted)
    vgs_factors: dict[str, float] = field(default_factory=dict)

    def critics_grad_ratio(self) -> float | None:
        """Gradient norm of critic 1 over critic 2 (twin critics), else None."""
        norms = self.losses.critic_grad_norms() if self.losses else {}
        if "critic1" not in norms or "critic2" not in norms:
            return None
        return norms["critic1"] / max(norms["critic2"], 1e-12)

    def scalars(self) -> Iterator[tuple[str, float]]:
        """Every logged scalar as ``(name, value)``."""
        if self.losses is not None:
            yield from ((f"train/{k}", v) for k, v in self.losses.scalars())
        yield from self._train_scalars()
        yield "time/total_timesteps", self.num_timesteps
        yield "error/log_ratio_nonfinite", self.n_skipped_nonfinite_ratio
        yield "error/nonfinite_loss_or_grad", self.n_skipped_nonfinite_loss
        for s in self.lstm:
            for stat in ("norm", "mean", "std"):
                yield f"lstm/{s.name}_layer{s.layer}_{stat}", getattr(s, stat)
        if self.risk is not None:
            yield "risk/cvar_pred", self.risk.cvar_pred
            yield from self.risk.constraint.items()
            if self.risk.cvar_empirical is not None:
                yield "risk/cvar_empirical", self.risk.cvar_empirical
            if self.risk.var_empirical is not None:
                yield "risk/var_empirical", self.risk.var_empirical
        yield from self._rollout_scalars()

    def _train_scalars(self) -> Iterator[tuple[str, float]]:
        yield "train/ent_coef", self.ent_coef
        if self.entropy_floor is not None:
            yield "train/target_entropy", self.entropy_floor.target
            yield "train/ent_floor_coef", self.entropy_floor.coef
        if self.sa_eps is not None:
            yield "train/sa_eps", self.sa_eps
        yield "train/learning_rate", self.learning_rate
        e = self.estimate
        yield "train/explained_variance", e.explained_variance
        yield "train/advantages_norm_mean", e.adv_mean
        yield "train/advantages_norm_std", e.adv_std
        yield "train/advantages_norm_max_abs", e.adv_max_abs
        yield "train/value_target_scale", e.value_target_scale
        yield "train/ret_mean", e.ret_mean
        yield "train/ret_std", e.ret_std
        yield "train/n_updates", self.n_updates
        ratio = self.critics_grad_ratio()
        if ratio is not None:
            yield "train/critics_grad_ratio", ratio
        for name, f in self.vgs_factors.items():
            yield f"train/vgs_scale/{name}", f

    def _rollout_scalars(self) -> Iterator[tuple[str, float]]:
        if self.ep_rew_mean is not None:
            yield "rollout/ep_rew_mean", self.ep_rew_mean
        if self.ep_len_mean is not None:
            yield "rollout/ep_len_mean", self.ep_len_mean
        if self.costs_fraction is not None:
            yield "rollout/reward_costs_fraction", self.costs_fraction
        if self.costs_nonfinite:
            yield "warn/reward_costs_fraction_nonfinite", self.costs_nonfinite
