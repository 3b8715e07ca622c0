"""The sections of the run configuration (design §1.1), one per concern.

:class:`riskppo.config.Config` nests them (``cfg.env``, ``cfg.ppo``, ...) and re-exports them, so
``from riskppo.config import PPOConfig`` keeps working. Every field has a type and an allowed
range; a bad value raises (as a :class:`~riskppo.config.ConfigError` from ``Config.build``) naming
the field, the value given and what is allowed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from riskppo.config.base import _Section
from riskppo.config.data import (
    SP500_SYMBOLS,
    TRADING_ID,
    TUNABLE,
    AdversarialConfig,
    DataConfig,
    HyperparamSpec,
    PBTConfig,
)
from riskppo.config.limits import (
    MAX_ATOMS,
    MAX_LOG_STD,
    MAX_QUANTILES,
    MAX_SUPPORT,
)
from riskppo.config.training import (
    BCConfig,
    CheckpointConfig,
    MonitorConfig,
    OptimConfig,
    RiskConfig,
    VGSConfig,
)

__all__ = [
    "SP500_SYMBOLS",
    "TRADING_ID",
    "TUNABLE",
    "AdversarialConfig",
    "BCConfig",
    "CheckpointConfig",
    "CriticConfig",
    "DataConfig",
    "EnvConfig",
    "HyperparamSpec",
    "MonitorConfig",
    "OptimConfig",
    "PBTConfig",
    "PPOConfig",
    "PolicyConfig",
    "RiskConfig",
    "VGSConfig",
]


class EnvConfig(_Section):
    """Which environment to train on and how it is vectorised."""

    id: str = Field(
        "CartPole-v1",
        description="Gymnasium env id: a registered id (CartPole-v1), riskppo/Trading-v0 "
        "for the trading env (data from the data section, keyword arguments from env.kwargs), or "
        "'module:Name-v0' to import the module that registers it",
    )
    n_envs: int = Field(
        8,
        ge=1,
        le=4096,
        description="environments stepped in parallel; a rollout has ppo.n_steps x n_envs steps",
    )
    vec_env: Literal["dummy", "subproc"] = Field(
        "dummy",
        description="dummy: all envs in this process, stepped in turn; subproc: one process "
        "per env",
    )
    vectorized: bool = Field(
        True,
        description="with n_envs > 1 and vec_env dummy: step all envs as one batched env where "
        "the env has one (the trading env's array step; a Gymnasium vector_entry_point that "
        "can reset single envs), with the same results; false: n_envs separate envs in turn",
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments passed to the env's constructor (gymnasium.make); "
        "for riskppo/Trading-v0 see the env.kwargs table at the end of docs/config.md",
    )
    normalize_obs: bool = Field(
        False,
        description="normalise observations with running mean and variance (SB3 "
        "VecNormalize, saved in checkpoints; predict then expects normalised observations, as "
        "SB3's); false: the env's raw observations",
    )
    clip_obs: float = Field(
        10.0,
        gt=0,
        description="with normalize_obs: normalised observations are clipped to +-clip_obs "
        "(in standard deviations)",
    )
    nonfinite_policy: Literal["raise", "skip"] = Field(
        "raise",
        description="a NaN or infinite reward or observation from an env: raise stops "
        "training naming the env, step and field; skip replaces it with 0 and logs it",
    )
    step_timeout: float | None = Field(
        None,
        gt=0,
        description="seconds an env may take for one step() before training stops with an "
        "error naming it; vec_env 'subproc' only; None = wait forever",
    )

    @field_validator("kwargs")
    @classmethod
    def _keyword_names(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Keys are passed as keyword arguments to the env: each must be a Python name."""
        for key in kwargs:
            if not key.isidentifier():
                raise ValueError(f"every key must be a keyword argument name, got {key!r:.80}")
        return kwargs

    @model_validator(mode="after")
    def _timeout_needs_subproc(self) -> EnvConfig:
        if self.step_timeout is not None and self.vec_env != "subproc":
            raise ValueError("env.step_timeout needs env.vec_env: subproc (or set it to null)")
        return self


class PPOConfig(_Section):
    """PPO hyper-parameters; names follow SB3 ``RecurrentPPO`` where the concept is the same."""

    learning_rate: float = Field(
        3e-4, gt=0, le=1.0, description="optimizer step size (Adam's lr for the default optimizer)"
    )
    lr_schedule: Literal["constant", "linear"] = Field(
        "constant",
        description="constant, or linear: decays from learning_rate to 0 over total_timesteps",
    )
    n_steps: int = Field(
        128,
        ge=1,
        description="steps per env in one rollout; the rollout has n_steps x env.n_envs "
        "transitions",
    )
    batch_size: int = Field(256, ge=1, description="transitions per minibatch")
    bptt_len: int | None = Field(
        None,
        ge=1,
        description="chunk length for truncated BPTT (the LSTM still sees the whole history "
        "through the stored chunk initial states); None = auto: the largest length <= 16 that "
        "divides n_steps and batch_size; set it to n_steps for whole env sequences",
    )

    @property
    def chunk_len(self) -> int:
        """The BPTT chunk length in use (``bptt_len``, or the automatic choice)."""
        if self.bptt_len is not None:
            return self.bptt_len
        return max(d for d in range(1, 17) if self.n_steps % d == 0 and self.batch_size % d == 0)

    n_epochs: int = Field(4, ge=1, description="passes over the rollout per update")
    gamma: float = Field(0.99, ge=0, le=1, description="discount factor per step")
    gae_lambda: float = Field(
        0.95,
        ge=0,
        le=1,
        description="lambda of generalised advantage estimation (Schulman et al. 2016): 0 = "
        "one-step TD, 1 = Monte-Carlo",
    )
    clip_range: float = Field(
        0.2,
        gt=0,
        le=1,
        description="PPO ratio clip epsilon: the policy ratio is clipped to [1-clip_range, "
        "1+clip_range] (Schulman et al. 2017)",
    )
    clip_range_vf: float | None = Field(
        None,
        gt=0,
        description="value clipping: how far (normalised return units) the critic may move "
        "from its old prediction per update; None = no value clipping (docs/clipping.md)",
    )
    vf_clip_mode: Literal["none", "mean_only", "mean_and_variance", "per_quantile"] = Field(
        "none",
        description="what clip_range_vf bounds for a distributional critic: none, mean_only "
        "(shift), mean_and_variance (shift and scale), per_quantile (each quantile; critic.kind "
        "quantile only); docs/clipping.md",
    )
    log_ratio_clip: float = Field(
        20.0,
        gt=0,
        description="finite log policy ratios are clamped to +-log_ratio_clip before exp, "
        "so the ratio cannot overflow",
    )
    normalize_advantage: bool = Field(
        True, description="standardise advantages once per rollout (mean 0, std 1)"
    )
    per_env_advantage: bool = Field(
        False, description="with normalize_advantage: standardise each env's advantages separately"
    )
    ent_coef: float = Field(
        0.0, ge=0, description="entropy bonus coefficient (the schedule's start value)"
    )
    pathwise_coef: float = Field(
        0.0,
        ge=0,
        description="weight of the pathwise term: where the env reports its reward's slope in "
        "the action (info reward_slope: the trading env always, the portfolio env with "
        "env.kwargs.reward_slopes: true, one per asset) each action mean also follows "
        "d(return)/d(action), scaled to unit RMS per rollout; 0 = off. Finds planted edges the "
        "score function misses, and over-fits the training bars as readily "
        "(docs/learnability.md)",
    )
    pathwise_utility: Literal["return", "sharpe"] = Field(
        "return",
        description="what the pathwise term climbs: return (the mean reward: an edge taken "
        "all-or-nothing) or sharpe (the rollout's Sharpe ratio: each slope weighted by "
        "1 - (A/B) r, A and B the mean and mean square of the rewards, so a small edge moves "
        "the position in proportion; Moody & Saffell 2001)",
    )
    sharpe_rate: float = Field(
        0.1,
        gt=0,
        le=1,
        description="with pathwise_utility: sharpe, the rate at which A and B follow each "
        "rollout's mean and mean square (exponential moving averages, one step per rollout); "
        "1 = each rollout's own, which swing widely where the edge is small against the "
        "volatility. Chosen on the planted suite's validation files (docs/learnability.md)",
    )
    ent_coef_min: float = Field(
        0.0,
        ge=0,
        description="floor of the decayed entropy coefficient (<= ent_coef when ent_decay is set)",
    )
    ent_decay: Literal["none", "linear", "exponential"] = Field(
        "none",
        description="entropy coefficient decay after its plateau gate: none, linear or "
        "exponential, reaching ent_coef_min after ent_decay_updates updates",
    )
    ent_decay_updates: int = Field(
        100, ge=1, description="updates over which the entropy coefficient decays to ent_coef_min"
    )
    ent_plateau_window: int = Field(
        10,
        ge=2,
        description="updates of mean entropy whose least-squares slope gates the decay "
        "(decay starts once the slope is flat)",
    )
    ent_plateau_tol: float = Field(
        1e-3, ge=0, description="|slope| of mean entropy (nats per update) that counts as a plateau"
    )
    ent_boost_threshold: float | None = Field(
        None,
        ge=0,
        description="when the mean entropy (nats) falls below it, the entropy coefficient "
        "is multiplied by ent_boost_factor; None = no boost",
    )
    ent_boost_factor: float = Field(
        2.0,
        ge=1,
        description="multiplier of the entropy coefficient while entropy is below "
        "ent_boost_threshold",
    )
    target_entropy: float | None = Field(
        None,
        allow_inf_nan=False,
        description="entropy floor in nats per sample (absolute); None = no floor",
    )
    target_entropy_frac: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="entropy floor as a fraction of the action space's maximum entropy",
    )
    ent_floor_lr: float = Field(1.0, gt=0, description="step on log c per nat of entropy gap")
    ent_floor_coef_max: float = Field(
        0.5, gt=0, description="upper bound of the learned entropy-floor coefficient"
    )
    vf_coef: float = Field(
        0.5, ge=0, description="weight of the value (critic) loss in the total loss"
    )
    max_grad_norm: float = Field(
        0.5,
        gt=0,
        description="gradients are clipped to this L2 norm (over all parameters, or per "
        "group: ppo.grad_clip) after any gradient scaler (docs/clipping.md)",
    )
    grad_clip: Literal["per_group", "global"] = Field(
        "global",
        description="global: one L2 norm over all parameters, as in SB3; per_group: the actor, "
        "the critics and the risk head are each clipped to max_grad_norm on their own, so a "
        "large critic gradient no longer shrinks the actor's (docs/clipping.md)",
    )
    target_kl: float | None = Field(
        None,
        gt=0,
        description="stop an update's epoch loop before the step whose minibatch's "
        "approximate KL to the rollout policy exceeds it; None = never",
    )
    grad_accum_steps: int = Field(
        1,
        ge=1,
        description="micro-batches per optimizer step (each minibatch is split into this "
        "many; must divide its sequence count)",
    )
    max_nonfinite_updates: int = Field(
        5,
        ge=1,
        description="consecutive updates skipped for a non-finite loss or gradient before "
        "training stops with an error",
    )

    @model_validator(mode="after")
    def _check(self) -> PPOConfig:
        if self.target_entropy is not None and self.target_entropy_frac is not None:
            raise ValueError("set target_entropy or target_entropy_frac, not both")
        if self.ent_coef_min > self.ent_coef and self.ent_decay != "none":
            raise ValueError(
                f"ent_coef_min={self.ent_coef_min} must be <= ent_coef={self.ent_coef}"
            )
        return self


class PolicyConfig(_Section):
    """Recurrent actor-critic architecture (R-ALG-1)."""

    lstm_hidden_size: int = Field(64, ge=1, description="units of each LSTM layer")
    n_lstm_layers: int = Field(1, ge=1, description="stacked LSTM layers per LSTM")
    lstm_sharing: Literal["none", "critics", "all"] = Field(
        "critics",
        description="critics (default): an actor LSTM and one critic LSTM feeding the twin critic "
        "heads (and the risk head); none: one LSTM per critic; all: a single LSTM feeds actor "
        "and critics",
    )
    net_arch: list[int] = Field(
        default_factory=lambda: [64],
        description="widths of the hidden layers of the MLPs after the LSTM (actor and each "
        "critic head), e.g. [64] or [64, 64]",
    )
    activation: Literal["tanh", "relu", "gelu"] = Field(
        "tanh", description="activation function of the MLP layers"
    )
    memory: bool = Field(
        True,
        description="false: the LSTMs start from a zero state at every step, so the actor and "
        "the critics are feed-forward functions of the current observation (a trading agent "
        "then cannot tell the bars of its training period apart by their history: "
        "docs/learnability.md)",
    )
    log_std_init: float = Field(
        0.0,
        ge=-MAX_LOG_STD,
        le=MAX_LOG_STD,
        description="initial log standard deviation of a Box (Gaussian) action distribution",
    )
    state_dependent_std: bool = Field(
        False,
        description="Box actions: the standard deviation is an output of the actor instead "
        "of a free parameter",
    )
    ortho_init: bool = Field(
        True,
        description="orthogonal initialisation of the weights (as in SB3); false keeps "
        "torch's default initialisation",
    )

    @field_validator("net_arch")
    @classmethod
    def _widths(cls, widths: list[int]) -> list[int]:
        if any(width < 1 for width in widths):
            raise ValueError("every width must be ≥ 1")
        return widths


class CriticConfig(_Section):
    """Distributional critic (R-ALG-3/4) and return scaling (R-ALG-8)."""

    kind: Literal["quantile", "categorical", "scalar"] = Field(
        "quantile",
        description="quantile (QR-DQN-style quantiles, Dabney et al. 2018), categorical "
        "(C51 atoms, Bellemare et al. 2017) or scalar (one value, no distribution)",
    )
    twin: bool = Field(
        True,
        description="two independent critic heads; the value used is their minimum "
        "(Fujimoto et al. 2018)",
    )
    n_quantiles: int = Field(
        32, ge=1, le=MAX_QUANTILES, description="quantiles per critic (kind quantile)"
    )
    n_atoms: int = Field(
        51, ge=2, le=MAX_ATOMS, description="atoms of the categorical support (kind categorical)"
    )
    v_min: float = Field(
        -1.0,
        ge=-MAX_SUPPORT,
        le=MAX_SUPPORT,
        description="lowest atom of the categorical support, in normalised return units",
    )
    v_max: float = Field(
        1.0,
        ge=-MAX_SUPPORT,
        le=MAX_SUPPORT,
        description="highest atom of the categorical support, in normalised return units (> v_min)",
    )
    kappa: float = Field(
        0.02,
        ge=0,
        description="quantile Huber threshold in *normalised* return units, where targets have "
        "std ≈ 1/ret_clip: κ must be small against that, or the quantiles shrink towards the "
        "mean (expectile-like); 0 = pure quantile loss",
    )
    ret_clip: float = Field(5.0, gt=0, description="normalised targets: (G-mean)/(ret_clip*std)")
    std_floor: float = Field(
        1e-2,
        gt=0,
        description="lower bound (raw return units) on the return std used to normalise "
        "value targets",
    )
    scale_cap: float = Field(
        100.0,
        gt=0,
        description="upper bound on the value-target scale 1/(ret_clip*std); above it "
        "warn/excessive_return_scaling is raised",
    )
    popart: bool = Field(
        True,
        description="PopArt (van Hasselt et al. 2016): when the return statistics change, "
        "rescale the critic's last layer so its predictions in raw units are preserved",
    )
    popart_first: Literal["preserve", "fresh"] = Field(
        "preserve",
        description="the first statistics update, from the placeholder scale 1/ret_clip: "
        "preserve rescales the untrained outputs like any later update (they keep a raw "
        "spread of about ret_clip, far too wide for returns of 0.01); fresh leaves them, so "
        "critics and risk head start on the data's scale (docs/portfolio.md)",
    )

    @model_validator(mode="after")
    def _check(self) -> CriticConfig:
        if self.v_max <= self.v_min:
            raise ValueError(f"v_max={self.v_max} must be > v_min={self.v_min}")
        return self
