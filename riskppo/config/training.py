"""Configuration sections of the learning machinery: the risk constraint, behaviour cloning,
the optimizer and its gradient scaler, monitoring and checkpoints (re-exported by
:mod:`riskppo.config.sections`)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from riskppo.config.base import _Section
from riskppo.config.limits import (
    MAX_CVAR_WINDOW,
    MAX_HORIZON,
)


class RiskConfig(_Section):
    """CVaR monitor and the risk constraint (R-RISK): CVaR (``cvar_limit``) or standard
    deviation (``std_limit``) of segment returns."""

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
    cvar_margin: float = Field(
        1.0,
        ge=1.0,
        le=10.0,
        allow_inf_nan=False,
        description="the constraint keeps CVaR_alpha(R) >= cvar_limit / cvar_margin in "
        "training, a margin for periods riskier than the training history (1 = none); reports "
        "and the overlay keep cvar_limit itself (docs/risk.md)",
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
    dual_lambda_max: float | None = Field(
        19.0,
        gt=0,
        description="dual: cap on lambda (anti wind-up, as pid_i_max for pid): 19 is where the "
        "CVaR weight lambda/(1+lambda) reaches 0.95, so after a long violation lambda returns "
        "within about dual_lambda_max/(lambda_lr*|violation|) updates; None: lambda_max",
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
    std_limit: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="constraint std(R) <= std_limit on the returns R of the same episodes or "
        "cvar_horizon-step segments, in raw reward units, with the multiplier settings above "
        "(cvar_window, cvar_min_segments included); None = off; not with cvar_limit (docs/risk.md)",
    )


class BCConfig(_Section):
    """Behaviour-cloning auxiliary loss (R-ALG-12): sources, weights and the ``decay_steps``
    schedule (linear to 0; None: constant) are described in :mod:`riskppo.algo.bc`."""

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
    trains on to the next such checkpoint, saves it and exits (:mod:`riskppo.cli.runner`).
    """

    every_updates: int | None = Field(
        None,
        ge=1,
        description="updates between checkpoints (and env resets); null: riskppo train uses "
        "10 (written into the run's config.yaml), learn() in Python saves and resets nothing",
    )
    keep_last: int = Field(3, ge=1, description="checkpoints kept in RUN_DIR/checkpoints")
