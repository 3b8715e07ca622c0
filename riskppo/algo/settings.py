"""Objects the trainer derives from its config: the optimizer's keywords, the variance gradient
scaler, the entropy schedule and floor, and the CVaR resolution warning."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from gymnasium import spaces

from riskppo import core
from riskppo.config import Config
from riskppo.nn.distributions import max_entropy
from riskppo.optim import VarianceGradientScaler

# Lower bound of the learned entropy-floor coefficient: negligible next to unit-scale advantages.
ENT_FLOOR_COEF_MIN = 1e-4


def apply_num_threads(cfg: Config) -> None:
    """Set torch's intra-op thread count (process-wide) to ``cfg.num_threads``; ``None`` leaves
    it as it is. Results depend on it (the orthogonal initialisation's QR and every reduction are
    split by thread), so a model applies it before it builds anything and again before training.
    """
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)


def entropy_target(cfg: Config, action_space: spaces.Space) -> float | None:
    """The entropy floor in nats per sample: ``ppo.target_entropy``, or ``target_entropy_frac``
    × the action space's maximum entropy; ``None`` without a floor (R-ALG-10)."""
    p = cfg.ppo
    if p.target_entropy is not None:
        return p.target_entropy
    if p.target_entropy_frac is not None:
        return p.target_entropy_frac * max_entropy(action_space)
    return None


def warn_alpha_resolution(cfg: Config, n_levels: int) -> None:
    """R-RISK-1: CVaR_α of an N-quantile distribution cannot resolve tails finer than 1/N."""
    if cfg.critic.kind != "scalar" and cfg.risk.cvar_alpha < 1.0 / n_levels:
        warnings.warn(
            f"risk.cvar_alpha={cfg.risk.cvar_alpha} < 1/{n_levels}: the critic's {n_levels} "
            "quantiles cannot resolve a tail that small; the predicted CVaR is then the lowest "
            "quantile. Use more quantiles/atoms or a larger alpha.",
            stacklevel=3,
        )


def optimizer_kwargs(cfg: Config) -> dict[str, Any]:
    o = cfg.optim
    if o.optimizer in ("adam", "adamw"):
        # fused kernels: one call for all parameters instead of a per-tensor Python loop
        return {"eps": o.eps, "fused": True}
    if o.optimizer == "upgd":
        return {"beta_utility": o.beta_utility, "sigma": o.sigma, "seed": cfg.seed + 3}
    if o.optimizer == "adaptive_upgd":
        return {
            "beta_utility": o.beta_utility,
            "sigma": o.sigma,
            "seed": cfg.seed + 3,
            "eps": o.eps,
        }
    return {}


def build_vgs(cfg: Config, policy: torch.nn.Module) -> Any:
    v = cfg.optim.vgs
    if not v.enabled:
        return None
    return VarianceGradientScaler(
        list(policy.named_parameters()),
        beta=v.beta,
        alpha=v.alpha,
        warmup_steps=v.warmup_steps,
        min_scale=v.min_scale,
        mode=v.mode,
    )


def ent_schedule(cfg: Config) -> core.EntropyScheduleConfig:
    p = cfg.ppo
    return core.EntropyScheduleConfig(
        ent_coef=p.ent_coef,
        ent_coef_min=min(p.ent_coef_min, p.ent_coef),
        decay=p.ent_decay,
        decay_updates=p.ent_decay_updates,
        plateau_window=p.ent_plateau_window,
        plateau_tol=p.ent_plateau_tol,
        boost_threshold=p.ent_boost_threshold,
        boost_factor=p.ent_boost_factor,
    )


def floor_coef(cfg: Config, action_space: spaces.Space, state: core.EntropyFloorState) -> float:
    """The entropy floor's learned coefficient (0 without a target entropy)."""
    if entropy_target(cfg, action_space) is None:
        return 0.0
    return float(math.exp(state.log_coef))


def step_entropy_floor(
    cfg: Config,
    action_space: spaces.Space,
    state: core.EntropyFloorState,
    mean_entropy: float,
) -> core.EntropyFloorState:
    """One update of the learned entropy floor (R-ALG-10, SAC v2 §5); unchanged without one."""
    target = entropy_target(cfg, action_space)
    if target is None:
        return state
    _, new = core.entropy_floor_step(
        state,
        mean_entropy,
        target,
        lr=cfg.ppo.ent_floor_lr,
        coef_min=ENT_FLOOR_COEF_MIN,
        coef_max=cfg.ppo.ent_floor_coef_max,
    )
    return new
