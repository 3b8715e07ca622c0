"""The sections of the run configuration (design §1.1), one per concern.

:class:`riskppo.config.Config` nests them (``cfg.env``, ``cfg.ppo``, ...) and re-exports them, so
``from riskppo.config import PPOConfig`` keeps working. Every field has a type and an allowed
range; a bad value raises (as a :class:`~riskppo.config.ConfigError` from ``Config.build``) naming
the field, the value given and what is allowed.
"""

from __future__ import annotations

import os
import typing
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from riskppo.config_limits import (
    MAX_ATOMS,
    MAX_CVAR_WINDOW,
    MAX_HORIZON,
    MAX_LOG_STD,
    MAX_QUANTILES,
    MAX_SUPPORT,
)

__all__ = [
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

# The stocks of the bundled "sp500" dataset (skfolio's load_sp500_dataset), one dataset each.
SP500_SYMBOLS: tuple[str, ...] = (
    "AAPL", "AMD", "BAC", "BBY", "CVX", "GE", "HD", "JNJ", "JPM", "KO",
    "LLY", "MRK", "MSFT", "PEP", "PFE", "PG", "RRC", "UNH", "WMT", "XOM",
)  # fmt: skip


class _Section(BaseModel):
    # allow_inf_nan=False: no float field of any section may be NaN or ±inf.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        """Strict numbers: ``true``/``false`` are not 1/0 for an int or float field."""
        if isinstance(value, bool) and info.field_name is not None:
            ann = cls.model_fields[info.field_name].annotation
            allowed = {ann, *typing.get_args(ann)}
            if bool not in allowed and Any not in allowed and (int in allowed or float in allowed):
                raise ValueError(f"expected a number, not the boolean {value}")
        return value


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
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments passed to the env's constructor (gymnasium.make); "
        "for riskppo/Trading-v0 see the env.kwargs table at the end of docs/config.md",
    )
    normalize_obs: bool = Field(
        False,
        description="normalise observations with running mean and variance (SB3 "
        "VecNormalize, saved in checkpoints)",
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

    @model_validator(mode="after")
    def _check(self) -> CriticConfig:
        if self.v_max <= self.v_min:
            raise ValueError(f"v_max={self.v_max} must be > v_min={self.v_min}")
        return self


class RiskConfig(_Section):
    """CVaR monitor and constraint (R-RISK)."""

    cvar_alpha: float = Field(
        0.05,
        gt=0,
        le=1,
        description="tail level alpha of CVaR: the mean of the worst alpha share of returns "
        "(0.05 = worst 5%)",
    )
    cvar_limit: float | None = Field(
        None,
        description="constraint CVaR_alpha(R) >= cvar_limit, in raw reward units of an "
        "episode or cvar_horizon-step segment (trading: a sum of log returns, -0.04 = about -4%); "
        "None = monitor CVaR only (docs/risk.md)",
    )
    cvar_horizon: int | None = Field(
        None,
        ge=1,
        le=MAX_HORIZON,
        description="steps of the segment whose return R the CVaR is about; None = whole episodes",
    )
    lambda_update: Literal["dual", "pid"] = Field(
        "dual",
        description="dual: projected dual ascent with lambda_lr; pid: the PID Lagrangian of "
        "Stooke, Achiam & Abbeel 2020 with pid_kp/pid_ki/pid_kd (docs/risk.md)",
    )
    lambda_lr: float = Field(
        0.05,
        ge=0,
        description="dual: step size of the multiplier update per unit of normalised violation",
    )
    lambda_init: float = Field(0.0, ge=0, description="initial Lagrange multiplier lambda")
    lambda_max: float | None = Field(
        100.0, gt=0, description="upper bound of lambda; None = unbounded"
    )
    pid_kp: float = Field(0.5, ge=0, description="pid: proportional gain")
    pid_ki: float = Field(0.05, ge=0, description="pid: integral gain")
    pid_kd: float = Field(
        0.5, ge=0, description="pid: derivative gain (on increases of the violation only)"
    )
    pid_ema: float = Field(0.5, ge=0, lt=1, description="EMA of the violation for the P/D terms")
    pid_i_max: float | None = Field(
        19.0,
        gt=0,
        description="cap on the PID integral term ki*I, in units of lambda (anti wind-up): 19 is "
        "where the CVaR weight lambda/(1+lambda) reaches 0.95, so after a long violation lambda "
        "returns within about (pid_i_max - 1)/(pid_ki*|violation|) updates; None: lambda_max",
    )
    cvar_window: int = Field(
        500,
        ge=2,
        le=MAX_CVAR_WINDOW,
        description="recent finished segments (or episodes) whose empirical CVaR/VaR the "
        "multiplier update and ν read",
    )
    cvar_min_segments: int = Field(
        40, ge=1, description="finished segments needed before λ moves (until then λ holds)"
    )


class BCConfig(_Section):
    """Behaviour-cloning auxiliary loss (R-ALG-12): sources, weights and the ``decay_steps``
    schedule (linear to 0; None: constant) are described in :mod:`riskppo.train.bc`."""

    source: Literal["rollout", "file", "teacher"] = Field(
        "rollout",
        description="what the auxiliary loss clones: rollout (the agent's own actions, "
        "advantage-weighted), file (demonstrations in bc.path) or teacher (a strategy's action on "
        "the agent's observations, bc.teacher)",
    )
    bc_coef: float = Field(0.0, ge=0, description="weight of the behaviour-cloning loss; 0 = off")
    beta: float = Field(
        5.0,
        gt=0,
        description="AWR temperature: weight exp(min(A/beta, log max_weight)) of an "
        "advantage A (Peng et al. 2019)",
    )
    max_weight: float = Field(100.0, gt=1, description="cap of the AWR weight")
    decay_steps: int | None = Field(
        None, ge=1, description="env steps over which bc_coef decays linearly to 0; None = constant"
    )
    path: str | None = Field(
        None,
        description="source file: a demonstration file (.safetensors or .parquet, written "
        "by riskppo record)",
    )
    teacher: Literal["buy_and_hold", "vol_target_buy_and_hold", "sma_crossover"] | None = Field(
        None,
        description="source teacher: the trading env's baseline strategy to clone; None = "
        "one passed in Python (attach_bc)",
    )
    weighting: Literal["none", "return"] = Field(
        "none",
        description="demonstrations: none (weight 1) or return (AWR weight of their "
        "standardised return-to-go; files with returns only)",
    )

    @model_validator(mode="after")
    def _source_fields(self) -> BCConfig:
        if (self.source == "file") != (self.path is not None):
            raise ValueError("bc.path (a demonstration file) is needed exactly with source: file")
        if self.source != "rollout" and self.bc_coef == 0:
            raise ValueError(
                f"bc.source={self.source} with bc.bc_coef=0 clones nothing; set bc.bc_coef "
                "above 0 (e.g. bc.bc_coef=1) to learn from the demonstrations"
            )
        if self.teacher is not None and self.source != "teacher":
            raise ValueError("bc.teacher applies to source: teacher only")
        return self


class VGSConfig(_Section):
    """Variance gradient scaler (R-OPT-2)."""

    enabled: bool = Field(
        False,
        description="scale each parameter tensor's gradient down by its gradient "
        "noise-to-signal ratio before clipping",
    )
    mode: Literal["spatial_mean", "per_element"] = Field(
        "spatial_mean",
        description="spatial_mean: statistics of the tensor's mean gradient; per_element: "
        "per-element statistics (more memory)",
    )
    beta: float = Field(
        0.99, gt=0, lt=1, description="decay of the EMAs of the gradient statistics"
    )
    alpha: float = Field(
        1.0,
        gt=0,
        description="strength: factor = max(min_scale, 1/(1 + alpha * noise-to-signal ratio))",
    )
    warmup_steps: int = Field(
        100,
        ge=0,
        description="optimizer steps per tensor with factor 1 while the statistics accumulate",
    )
    min_scale: float = Field(
        0.1, gt=0, le=1, description="lowest factor a gradient is multiplied by"
    )


class OptimConfig(_Section):
    """Optimizer choice (R-OPT-1).

    ``upgd`` takes SGD-like steps (gradient × gate, no normalisation): it needs a far larger
    ``ppo.learning_rate`` than Adam (about 1.0 in benchmarks/plasticity.py, where 1e-2 did not
    learn). ``adaptive_upgd`` gates Adam-normalised steps and works at Adam-like rates.
    """

    optimizer: Literal["adam", "adamw", "sgd", "upgd", "adaptive_upgd"] = Field(
        "adam",
        description="adam, adamw, sgd, upgd or adaptive_upgd (utility-based perturbed "
        "gradient descent, Elsayed & Mahmood 2024)",
    )
    weight_decay: float = Field(
        0.0, ge=0, description="L2 / decoupled (adamw, upgd) weight decay per step"
    )
    eps: float = Field(
        1e-5, gt=0, description="epsilon of Adam's denominator (adam, adamw, adaptive_upgd)"
    )
    beta_utility: float = Field(
        0.999, gt=0, lt=1, description="upgd: decay of the utility trace of each weight"
    )
    sigma: float = Field(
        1e-3,
        ge=0,
        description="upgd: standard deviation of the Gaussian perturbation added to gated steps",
    )
    vgs: VGSConfig = Field(
        default_factory=VGSConfig, description="variance gradient scaler settings (optim.vgs.*)"
    )


class MonitorConfig(_Section):
    """Logging and alert thresholds (R-MON)."""

    tensorboard_log: str | None = Field(
        None,
        description="directory for TensorBoard event files; None = none (riskppo train "
        "writes them into the run directory)",
    )
    verbose: int = Field(
        0, ge=0, le=2, description="0: quiet, 1: a line per log_interval updates, 2: debug"
    )
    log_interval: int = Field(1, ge=1, description="updates between metric dumps")
    progress_bar: bool = Field(False, description="show a progress bar of env steps")
    adv_max_abs: float = Field(
        20.0,
        gt=0,
        description="alert warn/advantage_outliers when the largest |normalised advantage| "
        "exceeds it",
    )
    log_ratio_clamp_frac: float = Field(
        0.01,
        ge=0,
        le=1,
        description="alert warn/log_ratio_clamp when more than this share of log-ratios hit "
        "ppo.log_ratio_clip",
    )
    grad_norm_pre_clip: float = Field(
        1000.0,
        gt=0,
        description="alert warn/grad_norm_pre_clip when a clip group's (actor, critic, risk "
        "head) gradient norm before clipping exceeds it: an exploding gradient (healthy critics "
        "reach about 130 at the start of the default run)",
    )
    critics_grad_ratio_high: float = Field(
        100.0,
        gt=1,
        description="alert warn/critic_grad_imbalance when the twin critics' gradient-norm "
        "ratio exceeds it",
    )
    critics_grad_ratio_low: float = Field(
        0.01,
        gt=0,
        lt=1,
        description="alert warn/critic_grad_imbalance when the twin critics' gradient-norm "
        "ratio falls below it",
    )
    critic_grad_vanishing: float = Field(
        1e-8,
        ge=0,
        description="alert warn/critic_grad_vanishing when a critic's gradient norm falls below it",
    )
    entropy_discrete: float = Field(
        0.01,
        ge=0,
        description="alert warn/entropy_collapse when the mean entropy of a discrete policy "
        "falls below it (nats)",
    )
    entropy_continuous_per_dim: float = Field(
        -2.0,
        description="alert warn/entropy_collapse when a continuous policy's entropy per "
        "action dimension falls below it (nats)",
    )
    loss_max: float = Field(
        1000.0,
        gt=0,
        description="alert warn/loss_out_of_range when |loss|, |policy loss| or |value "
        "loss| exceeds it (or is NaN)",
    )
    bc_loss_ratio: float = Field(
        0.8,
        gt=0,
        description="alert warn/bc_loss_ratio when the behaviour-cloning term is more than "
        "this share of the loss",
    )
    entropy_floor_binding_updates: int = Field(
        50, ge=1, description="alert when the entropy floor binds this many updates in a row"
    )


class CheckpointConfig(_Section):
    """Periodic checkpoints during ``learn`` (R-REL-2).

    After each periodic checkpoint the envs are re-seeded (seed + update count) and reset, in
    the uninterrupted run and in a run resumed from that checkpoint alike, which makes the
    resumed run bit-identical on CPU (R-REL-4). ``riskppo train`` stopped by Ctrl-C or SIGTERM
    trains on to the next such checkpoint, saves it and exits (:mod:`riskppo.runner`).
    """

    every_updates: int | None = Field(
        None,
        ge=1,
        description="updates between checkpoints (and env resets); null: riskppo train uses "
        "10 (written into the run's config.yaml), learn() in Python saves and resets nothing",
    )
    keep_last: int = Field(3, ge=1, description="checkpoints kept in RUN_DIR/checkpoints")


TRADING_ID = "riskppo/Trading-v0"  # the trading env's Gymnasium id (riskppo.envs.registration)


class DataConfig(_Section):
    """Trading data source (R-TRADE-1)."""

    dataset: Literal["googl", "eurusd", "sp500"] | None = Field(
        "googl",
        description="bundled data for riskppo/Trading-v0: googl (GOOGL daily OHLCV "
        "2009-2018, from gym-anytrading), eurusd (EURUSD hourly OHLCV 2017, gym-anytrading), "
        "sp500 (daily closes of 20 US stocks, from skfolio; needs data.symbol); ignored when "
        "data.path is set",
    )
    path: str | None = Field(
        None,
        description="your own bars: a CSV (.csv, .csv.gz/.bz2/.zip/.xz, .txt) or Parquet "
        "(.parquet, .pq) file; wins over data.dataset (docs/data.md)",
    )
    symbol: str | None = Field(
        None,
        validate_default=True,
        description="dataset sp500 only (required there): the stock, one of "
        + ", ".join(SP500_SYMBOLS),
    )
    split: tuple[float, float, float] = Field(
        (0.7, 0.15, 0.15),
        description="fractions of the rows, in time order, for train, validation and test; "
        "three positive numbers summing to 1",
    )
    nan_policy: Literal["raise", "ffill"] = Field(
        "raise",
        description="data.path only: raise on a missing value, or forward-fill runs of at most "
        "ffill_limit bars",
    )
    ffill_limit: int = Field(5, ge=0, description="longest NaN run nan_policy='ffill' fills")
    sort: bool = Field(False, description="data.path only: sort rows by time (unsorted raises)")
    timestamp_format: str | None = Field(
        None,
        description="data.path only: strftime format of the time column ('%d/%m/%Y'), or an "
        "epoch unit (s, ms, us, ns); default: ISO 8601 and the common formats are tried",
    )
    dayfirst: bool | None = Field(
        None,
        description="data.path only: read 01/02/2017 as 1 February (true) or 2 January (false); "
        "default: the order under which the timestamps increase",
    )
    bars: tuple[int, int, int, int] | None = Field(
        None,
        description="[start, train_end, val_end, end] row positions (0-based, ends exclusive) "
        "instead of split: train on rows start..train_end-1, validate on train_end..val_end-1 "
        "(none when equal), test on val_end..end-1; rows from end on are never read "
        "(walk-forward segments)",
    )

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if abs(sum(self.split) - 1.0) > 1e-9 or min(self.split) <= 0:
            raise ValueError(f"split={self.split} must be three positive fractions summing to 1")
        if self.bars is not None:
            start, train_end, val_end, end = self.bars
            if not 0 <= start < train_end <= val_end < end:
                raise ValueError(
                    f"bars={list(self.bars)} must be [start, train_end, val_end, end] with "
                    "0 <= start < train_end <= val_end < end"
                )
        return self

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, path: str | None) -> str | None:
        """A relative path is relative to the working directory when the config is made and
        kept absolute, so a run directory's ``config.yaml`` finds the data from anywhere."""
        if path is None:
            return None
        if not path.strip():
            raise ValueError("empty; give the path of a CSV or Parquet file, or null")
        return os.path.abspath(os.path.expanduser(path))

    @field_validator("symbol")
    @classmethod
    def _check_symbol(cls, symbol: str | None, info: ValidationInfo) -> str | None:
        """Required (and one of :data:`SP500_SYMBOLS`, any case) for dataset sp500 without a
        path; refused for the other datasets."""
        dataset = info.data.get("dataset")
        if dataset != "sp500":
            if symbol is not None:
                raise ValueError(f"applies to data.dataset=sp500 only, not {dataset!r}; remove it")
            return None
        valid = ", ".join(SP500_SYMBOLS)
        if symbol is None:
            if info.data.get("path") is None:
                raise ValueError(f"required with data.dataset=sp500: one of {valid}")
            return None
        if symbol.upper() not in SP500_SYMBOLS:
            raise ValueError(f"not a stock of data.dataset=sp500; valid symbols: {valid}")
        return symbol.upper()


class AdversarialConfig(_Section):
    """State-adversarial regulariser (SA-PPO, Zhang et al. 2020; R-ADV).

    Adds ``kappa * max_{|ŝ-s|_inf <= eps} KL(π(·|s) ‖ π(·|ŝ))`` to the policy loss, the max
    approximated by ``pgd_steps`` signed-gradient steps in *normalised* observation space. ε ramps
    linearly from 0 to ``eps`` over ``eps_warmup_updates`` updates. ``kappa = 0`` switches it off.
    """

    kappa: float = Field(0.0, ge=0, description="weight of the SA-PPO regulariser; 0 = off")
    eps: float = Field(
        0.05,
        ge=0,
        description="radius of the L-infinity ball of observation perturbations, in "
        "normalised observation units",
    )
    eps_warmup_updates: int = Field(
        0,
        ge=0,
        description="updates over which eps ramps linearly from 0; 0 = full eps from the start",
    )
    pgd_steps: int = Field(
        3, ge=1, description="signed-gradient steps that search for the worst perturbation"
    )
    pgd_step_size: float | None = Field(
        None, gt=0, description="PGD step as a fraction of eps; None = 2.5/pgd_steps"
    )


# Hyperparameters PBT may tune (R-PBT-1): dotted config paths.
TUNABLE = (
    "ppo.learning_rate",
    "ppo.ent_coef",
    "ppo.clip_range",
    "ppo.vf_coef",
    "ppo.gae_lambda",
    "risk.cvar_limit",
    "risk.lambda_lr",
    "adversarial.kappa",
    "adversarial.eps",
)


class HyperparamSpec(_Section):
    """Bounds of one tuned hyperparameter. ``log``: resampled log-uniformly (needs low > 0)."""

    low: float = Field(description="lower bound of the tuned value")
    high: float = Field(description="upper bound of the tuned value (> low)")
    log: bool = Field(True, description="resample log-uniformly (needs low > 0); false: uniformly")

    @model_validator(mode="after")
    def _check(self) -> HyperparamSpec:
        if self.high <= self.low:
            raise ValueError(f"high={self.high} must be > low={self.low}")
        if self.log and self.low <= 0:
            raise ValueError(f"log=true needs low > 0 (got low={self.low}); set log: false")
        return self


def _default_pbt_space() -> dict[str, HyperparamSpec]:
    return {
        "ppo.learning_rate": HyperparamSpec(low=1e-5, high=3e-3),
        "ppo.ent_coef": HyperparamSpec(low=1e-4, high=5e-2),
    }


class PBTConfig(_Section):
    """Population-based training (R-PBT; Jaderberg et al. 2017), used by ``riskppo pbt``.

    Every ``ready_updates`` updates each member is evaluated (``metric``); the bottom
    ``quantile`` of the population copies a member of the top ``quantile`` (exploit) and perturbs
    its hyperparameters (explore: × one of ``perturb_factors``, or with ``resample_prob`` a fresh
    draw), always within the declared bounds. ``quantile: 0`` never exploits — the same budget
    as independent runs, the baseline PBT is compared with.

    Trading (R-PBT-4): a member is *feasible* when its validation horizon-CVaR meets the CVaR
    limit (``selection_cvar_limit``) and it is in the market on at least ``min_market_share`` of
    the validation bars; feasible members score ``metric``, the others rank below every feasible
    member, ordered by violation (see :func:`riskppo.pbt.member.constrained_score`).
    """

    backend: Literal["local", "ray"] = Field(
        "local",
        description="local: worker processes on this machine; ray: Ray Tune (pip install "
        "riskppo[ray])",
    )
    population: int = Field(4, ge=2, description="members trained together")
    ready_updates: int = Field(
        5, ge=1, description="updates each member trains between two evaluations (one round)"
    )
    quantile: float = Field(
        0.25,
        ge=0,
        le=0.5,
        description="share of the population that exploits (bottom) and is copied (top) "
        "each round; 0 = never exploit (independent runs)",
    )
    resample_prob: float = Field(
        0.25,
        ge=0,
        le=1,
        description="chance that explore draws a hyperparameter afresh from its bounds "
        "instead of multiplying it by a perturb factor",
    )
    perturb_factors: tuple[float, float] = Field(
        (0.8, 1.2),
        description="the two factors explore multiplies a hyperparameter by (one chosen at "
        "random), clipped to its bounds",
    )
    optimizer_strategy: Literal["copy", "reset"] = Field(
        "copy", description="exploit: copy the source's optimizer state, or reset it"
    )
    metric: Literal[
        "auto", "mean_return", "cvar", "sharpe", "sortino", "calmar", "cvar_95", "annual_return"
    ] = Field(
        "auto",
        description="auto: validation-period Sharpe for trading, mean evaluation return otherwise",
    )
    min_market_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="trading: a member is feasible only if in the market on at least this share "
        "of validation bars; flat or infeasible members rank below every feasible one",
    )
    selection_cvar_limit: float | None = Field(
        None,
        description="trading: the limit on the validation horizon-CVaR members are selected "
        "against; None = the risk.cvar_limit PBT starts from (fixed for the whole population, "
        "also when risk.cvar_limit is tuned); no limit if that is None too",
    )
    eval_episodes: int = Field(
        10, ge=1, description="episodes a member is evaluated on each round (non-trading envs)"
    )
    workers: int | None = Field(None, ge=1, description="parallel members; None = min(pop, cores)")
    max_failures: int = Field(
        2,
        ge=0,
        description="failed intervals a member may restart from: local backend, a "
        "member whose worker dies or raises scores -inf that round and restarts from its last "
        "recorded checkpoint; after max_failures + 1 failures it is frozen and the rest go on "
        "(0: frozen at its first failure). Ray backend: restarts of a failed trial",
    )
    hyperparams: dict[str, HyperparamSpec] = Field(
        default_factory=_default_pbt_space,
        description="the tuned hyperparameters: dotted config key -> {low, high, log}; keys "
        "from the tunable list below",
    )

    @model_validator(mode="after")
    def _check(self) -> PBTConfig:
        unknown = sorted(set(self.hyperparams) - set(TUNABLE))
        if unknown:
            raise ValueError(f"cannot tune {unknown}; tunable: {list(TUNABLE)}")
        if not self.hyperparams:
            raise ValueError("hyperparams must name at least one tunable hyperparameter")
        if min(self.perturb_factors) <= 0:
            raise ValueError(f"perturb_factors={self.perturb_factors} must be positive")
        return self
