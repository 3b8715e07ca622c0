"""Objects the trainer derives from its config: SB3-style keywords, the optimizer's keywords,
the variance gradient scaler, the entropy schedule and floor, and the CVaR resolution warning."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces

from riskppo import core
from riskppo.algo.sb3_compat import KEYWORDS, policy_and_env, policy_fields, unknown_keyword
from riskppo.config import Config, ConfigError, set_by_path
from riskppo.nn.distributions import max_entropy
from riskppo.optim import VarianceGradientScaler


def config_and_env(
    args: tuple[Any, ...],
    env: Any,
    config: Config | dict[str, Any] | str | Path | None,
    kwargs: dict[str, Any],
    default_env: bool,
) -> tuple[Config, Any]:
    """The model's config and env from RecurrentPPO-style ``(policy, env)`` arguments and
    keywords (``kwargs`` loses its ``policy``); ``default_env``: no env given means the
    config's ``env.id``, and an env id also sets it."""
    env, section = policy_and_env(args, env, kwargs.pop("policy", None))
    if section is not None:  # policy={...}: the config's policy section
        kwargs["policy"] = section
    cfg = config_from_keywords(config, **kwargs)
    if env is None and default_env:
        env = cfg.env.id
    if isinstance(env, str):
        cfg = config_from_keywords(cfg, id=env)
    return cfg, env


def config_from_keywords(
    config: Config | dict[str, Any] | str | Path | None, **kwargs: Any
) -> Config:
    """Merge SB3-style keyword arguments into a config (validated, ``ConfigError`` on misuse).

    ``config`` is a :class:`Config`, a nested dict or the path of a YAML file. A keyword is a
    config field (``learning_rate`` → ``ppo.learning_rate``; it must name one field), an SB3 name
    of :data:`~riskppo.algo.sb3_compat.KEYWORDS`, or ``policy_kwargs`` (``policy.*`` fields).
    """
    if isinstance(config, str | Path):
        config = Config.from_yaml(config)
    base = config.to_dict() if isinstance(config, Config) else dict(config or {})
    for key, value in policy_fields(kwargs.pop("policy_kwargs", {})).items():
        set_by_path(base, f"policy.{key}", value)
    for key, value in kwargs.items():
        set_by_path(base, _keyword_path(key), value)
    return Config.build(base)


def _keyword_path(key: str) -> str:
    """The config path a constructor keyword sets (``ConfigError`` if none or ambiguous)."""
    if key in KEYWORDS:
        return KEYWORDS[key]
    if key in Config.model_fields:
        return key
    sections = {name: f.annotation for name, f in Config.model_fields.items()}
    owners = [
        s
        for s, ann in sections.items()
        if isinstance(ann, type) and key in getattr(ann, "model_fields", {})
    ]
    if len(owners) > 1:
        raise ConfigError(
            f"keyword argument {key!r} is ambiguous ({owners}): pass config={{section: {{...}}}}"
        )
    if not owners:
        names = [*KEYWORDS, *Config.model_fields]
        for ann in sections.values():
            names += list(getattr(ann, "model_fields", {}))
        raise unknown_keyword(key, names)
    return f"{owners[0]}.{key}"


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
