"""The sections of the run configuration (SPEC §1.1), one per concern.

:class:`riskppo.config.Config` nests them (``cfg.env``, ``cfg.ppo``, ...) and re-exports them, so
``from riskppo.config import PPOConfig`` keeps working. Every field has a type and an allowed
range; a bad value raises (as a :class:`~riskppo.config.ConfigError` from ``Config.build``) naming
the field, the value given and what is allowed.
"""

from __future__ import annotations

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

    id: str = Field("CartPole-v1", description="Gymnasium env id (or 'trading' for TradingEnv)")
    n_envs: int = Field(8, ge=1, le=4096)
    vec_env: Literal["dummy", "subproc"] = "dummy"
    kwargs: dict[str, Any] = Field(default_factory=dict)
    normalize_obs: bool = False
    clip_obs: float = Field(10.0, gt=0)
    nonfinite_policy: Literal["raise", "skip"] = "raise"
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

    learning_rate: float = Field(3e-4, gt=0, le=1.0)
    lr_schedule: Literal["constant", "linear"] = "constant"
    n_steps: int = Field(128, ge=1)
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

    n_epochs: int = Field(4, ge=1)
    gamma: float = Field(0.99, ge=0, le=1)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    clip_range: float = Field(0.2, gt=0, le=1)
    clip_range_vf: float | None = Field(None, gt=0)
    vf_clip_mode: Literal["none", "mean_only", "mean_and_variance", "per_quantile"] = "none"
    log_ratio_clip: float = Field(20.0, gt=0)
    normalize_advantage: bool = True
    per_env_advantage: bool = False
    ent_coef: float = Field(0.0, ge=0)
    ent_coef_min: float = Field(0.0, ge=0)
    ent_decay: Literal["none", "linear", "exponential"] = "none"
    ent_decay_updates: int = Field(100, ge=1)
    ent_plateau_window: int = Field(10, ge=2)
    ent_plateau_tol: float = Field(1e-3, ge=0)
    ent_boost_threshold: float | None = Field(None, ge=0)
    ent_boost_factor: float = Field(2.0, ge=1)
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
    ent_floor_coef_max: float = Field(0.5, gt=0)
    vf_coef: float = Field(0.5, ge=0)
    max_grad_norm: float = Field(0.5, gt=0)
    target_kl: float | None = Field(None, gt=0)
    grad_accum_steps: int = Field(1, ge=1)
    max_nonfinite_updates: int = Field(5, ge=1)

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

    lstm_hidden_size: int = Field(64, ge=1)
    n_lstm_layers: int = Field(1, ge=1)
    lstm_sharing: Literal["none", "critics", "all"] = Field(
        "critics",
        description="critics (default): an actor LSTM and one critic LSTM feeding the twin critic "
        "heads (and the risk head); none: one LSTM per critic; all: a single LSTM feeds actor "
        "and critics",
    )
    net_arch: list[int] = Field(default_factory=lambda: [64])
    activation: Literal["tanh", "relu", "gelu"] = "tanh"
    log_std_init: float = Field(0.0, ge=-MAX_LOG_STD, le=MAX_LOG_STD)
    state_dependent_std: bool = False
    ortho_init: bool = True

    @field_validator("net_arch")
    @classmethod
    def _widths(cls, widths: list[int]) -> list[int]:
        if any(width < 1 for width in widths):
            raise ValueError("every width must be ≥ 1")
        return widths


class CriticConfig(_Section):
    """Distributional critic (R-ALG-3/4) and return scaling (R-ALG-8)."""

    kind: Literal["quantile", "categorical", "scalar"] = "quantile"
    twin: bool = True
    n_quantiles: int = Field(32, ge=1, le=MAX_QUANTILES)
    n_atoms: int = Field(51, ge=2, le=MAX_ATOMS)
    v_min: float = Field(-1.0, ge=-MAX_SUPPORT, le=MAX_SUPPORT)
    v_max: float = Field(1.0, ge=-MAX_SUPPORT, le=MAX_SUPPORT)
    kappa: float = Field(
        0.02,
        ge=0,
        description="quantile Huber threshold in *normalised* return units, where targets have "
        "std ≈ 1/ret_clip: κ must be small against that, or the quantiles shrink towards the "
        "mean (expectile-like); 0 = pure quantile loss",
    )
    ret_clip: float = Field(5.0, gt=0, description="normalised targets: (G-mean)/(ret_clip*std)")
    std_floor: float = Field(1e-2, gt=0)
    scale_cap: float = Field(100.0, gt=0)
    popart: bool = True

    @model_validator(mode="after")
    def _check(self) -> CriticConfig:
        if self.v_max <= self.v_min:
            raise ValueError(f"v_max={self.v_max} must be > v_min={self.v_min}")
        return self


class RiskConfig(_Section):
    """CVaR monitor and constraint (R-RISK)."""

    cvar_alpha: float = Field(0.05, gt=0, le=1)
    cvar_limit: float | None = None
    cvar_horizon: int | None = Field(None, ge=1, le=MAX_HORIZON)
    lambda_update: Literal["dual", "pid"] = Field(
        "dual",
        description="dual: projected dual ascent with lambda_lr; pid: the PID Lagrangian of "
        "Stooke, Achiam & Abbeel 2020 with pid_kp/pid_ki/pid_kd (R-RISK-4)",
    )
    lambda_lr: float = Field(0.05, ge=0)
    lambda_init: float = Field(0.0, ge=0)
    lambda_max: float | None = Field(100.0, gt=0)
    pid_kp: float = Field(0.5, ge=0)
    pid_ki: float = Field(0.05, ge=0)
    pid_kd: float = Field(0.5, ge=0)
    pid_ema: float = Field(0.5, ge=0, lt=1, description="EMA of the violation for the P/D terms")
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

    source: Literal["rollout", "file", "teacher"] = "rollout"
    bc_coef: float = Field(0.0, ge=0)
    beta: float = Field(5.0, gt=0)
    max_weight: float = Field(100.0, gt=1)
    decay_steps: int | None = Field(None, ge=1)
    path: str | None = None
    teacher: Literal["buy_and_hold", "vol_target_buy_and_hold", "sma_crossover"] | None = None
    weighting: Literal["none", "return"] = "none"

    @model_validator(mode="after")
    def _source_fields(self) -> BCConfig:
        if (self.source == "file") != (self.path is not None):
            raise ValueError("bc.path (a demonstration file) is needed exactly with source: file")
        if self.teacher is not None and self.source != "teacher":
            raise ValueError("bc.teacher applies to source: teacher only")
        return self


class VGSConfig(_Section):
    """Variance gradient scaler (R-OPT-2)."""

    enabled: bool = False
    mode: Literal["spatial_mean", "per_element"] = "spatial_mean"
    beta: float = Field(0.99, gt=0, lt=1)
    alpha: float = Field(1.0, gt=0)
    warmup_steps: int = Field(100, ge=0)
    min_scale: float = Field(0.1, gt=0, le=1)


class OptimConfig(_Section):
    """Optimizer choice (R-OPT-1).

    ``upgd`` takes SGD-like steps (gradient × gate, no normalisation): it needs a far larger
    ``ppo.learning_rate`` than Adam (about 1.0 in benchmarks/plasticity.py, where 1e-2 did not
    learn). ``adaptive_upgd`` gates Adam-normalised steps and works at Adam-like rates.
    """

    optimizer: Literal["adam", "adamw", "sgd", "upgd", "adaptive_upgd"] = "adam"
    weight_decay: float = Field(0.0, ge=0)
    eps: float = Field(1e-5, gt=0)
    beta_utility: float = Field(0.999, gt=0, lt=1)
    sigma: float = Field(1e-3, ge=0)
    vgs: VGSConfig = Field(default_factory=VGSConfig)


class MonitorConfig(_Section):
    """Logging and alert thresholds (R-MON)."""

    tensorboard_log: str | None = None
    verbose: int = Field(0, ge=0, le=2)
    log_interval: int = Field(1, ge=1, description="updates between metric dumps")
    progress_bar: bool = False
    adv_max_abs: float = Field(20.0, gt=0)
    log_ratio_clamp_frac: float = Field(0.01, ge=0, le=1)
    grad_norm_pre_clip: float = Field(50.0, gt=0)
    critics_grad_ratio_high: float = Field(100.0, gt=1)
    critics_grad_ratio_low: float = Field(0.01, gt=0, lt=1)
    critic_grad_vanishing: float = Field(1e-8, ge=0)
    entropy_discrete: float = Field(0.01, ge=0)
    entropy_continuous_per_dim: float = Field(-2.0)
    loss_max: float = Field(1000.0, gt=0)
    bc_loss_ratio: float = Field(0.8, gt=0)
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


class DataConfig(_Section):
    """Trading data source (R-TRADE-1)."""

    dataset: Literal["googl", "eurusd", "sp500"] | None = "googl"
    path: str | None = None
    symbol: str | None = Field(
        None,
        validate_default=True,
        description="dataset sp500 only (required there): the stock, one of SP500_SYMBOLS",
    )
    split: tuple[float, float, float] = (0.7, 0.15, 0.15)
    nan_policy: Literal["raise", "ffill"] = Field(
        "raise",
        description="data.path only: raise on a missing value, or forward-fill runs of at most "
        "ffill_limit bars",
    )
    ffill_limit: int = Field(5, ge=0, description="longest NaN run nan_policy='ffill' fills")
    sort: bool = Field(False, description="data.path only: sort rows by time (unsorted raises)")
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

    kappa: float = Field(0.0, ge=0)
    eps: float = Field(0.05, ge=0)
    eps_warmup_updates: int = Field(0, ge=0)
    pgd_steps: int = Field(3, ge=1)
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

    low: float
    high: float
    log: bool = True

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

    backend: Literal["local", "ray"] = "local"
    population: int = Field(4, ge=2)
    ready_updates: int = Field(5, ge=1)
    quantile: float = Field(0.25, ge=0, le=0.5)
    resample_prob: float = Field(0.25, ge=0, le=1)
    perturb_factors: tuple[float, float] = (0.8, 1.2)
    optimizer_strategy: Literal["copy", "reset"] = "copy"
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
        "of validation bars (R-PBT-4); flat or infeasible members rank below every feasible one",
    )
    selection_cvar_limit: float | None = Field(
        None,
        description="trading: the limit on the validation horizon-CVaR members are selected "
        "against; None = the risk.cvar_limit PBT starts from (fixed for the whole population, "
        "also when risk.cvar_limit is tuned); no limit if that is None too",
    )
    eval_episodes: int = Field(10, ge=1)
    workers: int | None = Field(None, ge=1, description="parallel members; None = min(pop, cores)")
    max_failures: int = Field(
        2,
        ge=0,
        description="failed intervals a member may restart from (R-PBT-5): local backend, a "
        "member whose worker dies or raises scores -inf that round and restarts from its last "
        "recorded checkpoint; after max_failures + 1 failures it is frozen and the rest go on "
        "(0: frozen at its first failure). Ray backend: restarts of a failed trial",
    )
    hyperparams: dict[str, HyperparamSpec] = Field(default_factory=_default_pbt_space)

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
