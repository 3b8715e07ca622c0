"""Validated configuration objects (design §1.1), one per concern, loadable from YAML.

Every field has a type and an allowed range; a bad value raises :class:`ConfigError` naming the
field (dotted path), the value given and what is allowed — before any environment is built.

``Config.from_yaml(path)`` / ``Config.to_yaml(path)`` round-trip the whole tree;
``apply_overrides(cfg, ["ppo.learning_rate=1e-4", "seed=3"])`` implements ``--set key=value``.
The sections (``EnvConfig``, ``PPOConfig``, ...) live in :mod:`riskppo.config.sections` and are
re-exported here.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, ValidationError, model_validator

from riskppo.config.bundled import bundled_names, resolve_config_path
from riskppo.config.data import PORTFOLIO_ID
from riskppo.config.limits import (
    MAX_CONFIG_BYTES,
    MAX_PARAMETERS,
    MAX_SEED,
    MAX_THREADS,
    expansion_problem,
    physical_memory,
    policy_parameters,
    rollout_bytes,
)
from riskppo.config.sections import (
    TRADING_ID,
    TUNABLE,
    AdversarialConfig,
    BCConfig,
    CheckpointConfig,
    CriticConfig,
    DataConfig,
    EnvConfig,
    HyperparamSpec,
    MonitorConfig,
    OptimConfig,
    PBTConfig,
    PolicyConfig,
    PPOConfig,
    RiskConfig,
    VGSConfig,
    _Section,
)
from riskppo.config.yaml_io import YAMLProblem, YAMLSyntaxError, decode_yaml_bytes, load_yaml, short
from riskppo.safefs import write_text_atomic

__all__ = [
    "TUNABLE",
    "AdversarialConfig",
    "BCConfig",
    "CheckpointConfig",
    "Config",
    "ConfigError",
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
    "apply_overrides",
    "check_rollout_memory",
    "set_by_path",
]


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field, the value and what is allowed.

    A subclass of ``ValueError``.
    """


class Config(_Section):
    """All hyper-parameters of one run."""

    seed: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        description="seed of every random generator (torch, numpy, the envs); the same seed "
        "gives the same run on CPU",
    )
    total_timesteps: int = Field(
        100_000,
        ge=1,
        description="env steps to train, summed over all env.n_envs envs; training stops at "
        "the first update boundary at or past it",
    )
    device: str = Field(
        "cpu",
        description="torch device of the networks and the update: 'cpu', 'cuda', 'cuda:1', ...",
    )
    num_threads: int | None = Field(
        1,
        ge=1,
        le=MAX_THREADS,
        description="torch intra-op threads (process-wide), set when a model is built (the "
        "initial weights depend on it) and again by learn(); small recurrent nets run fastest "
        "on 1; None leaves torch's setting",
    )
    compile: bool = Field(
        False,
        description="compile the update's minibatch loss and backward with torch.compile "
        "(inductor), and run the step after it (gradient norms, clipping, Adam) in C: faster "
        "steady state, a one-off compile (about 30-90 s on a 2-core CPU; seconds from "
        "inductor's disk cache); equal to the eager path to float rounding. "
        "Features not compiled (SA-PPO, BC from demonstrations) run eager with a logged reason",
    )
    cuda_graphs: bool = Field(
        True,
        description="with compile: true on a CUDA device, replay the compiled loss and backward "
        "as CUDA graphs (inductor's reduce-overhead mode: one launch instead of one per kernel); "
        "no effect on the CPU",
    )
    prior_trials: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="configurations judged on a market before this config was chosen, by the "
        "data's name as reports print it (e.g. {GOOGL: 5}): no trial ledger can know them, so "
        "the verdict's N adds them to the ledger's count on that data (docs/risk.md)",
    )
    env: EnvConfig = Field(default_factory=EnvConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    risk: RiskConfig = Field(default_factory=RiskConfig)
    bc: BCConfig = Field(default_factory=BCConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    adversarial: AdversarialConfig = Field(default_factory=AdversarialConfig)
    pbt: PBTConfig = Field(default_factory=PBTConfig)

    @model_validator(mode="after")
    def _check_batching(self) -> Config:
        p, n = self.ppo, self.env.n_envs
        rollout = p.n_steps * n
        bptt = p.chunk_len
        if p.n_steps % bptt:
            raise ValueError(f"ppo.bptt_len={bptt} must divide ppo.n_steps={p.n_steps}")
        if p.batch_size % bptt:
            raise ValueError(
                f"ppo.batch_size={p.batch_size} must be a multiple of the sequence length "
                f"{bptt} (ppo.bptt_len)"
            )
        if rollout % p.batch_size:
            raise ValueError(
                f"ppo.batch_size={p.batch_size} must divide the rollout size "
                f"n_steps*n_envs={p.n_steps}*{n}={rollout}"
            )
        if (p.batch_size // bptt) % p.grad_accum_steps:
            raise ValueError(
                f"ppo.grad_accum_steps={p.grad_accum_steps} must divide the number of sequences "
                f"per minibatch ({p.batch_size // bptt})"
            )
        if self.risk.cvar_limit is not None and self.critic.kind == "scalar":
            raise ValueError(
                "risk.cvar_limit needs a distributional critic (critic.kind quantile|categorical)"
            )
        if self.ppo.vf_clip_mode == "per_quantile" and self.critic.kind != "quantile":
            raise ValueError("ppo.vf_clip_mode='per_quantile' requires critic.kind='quantile'")
        if "risk.cvar_limit" in self.pbt.hyperparams and self.risk.cvar_limit is None:
            raise ValueError("pbt.hyperparams tunes risk.cvar_limit but risk.cvar_limit is None")
        self._check_parameters()
        slopes_asked = self.env.kwargs.get("reward_slopes") is True
        if self.env.id == PORTFOLIO_ID and self.ppo.pathwise_coef != 0 and not slopes_asked:
            raise ValueError(
                f"ppo.pathwise_coef={self.ppo.pathwise_coef} follows the reward's slopes, which "
                f"the {PORTFOLIO_ID} env computes only when asked: set "
                "env.kwargs.reward_slopes=true"
            )
        if self.env.id in (TRADING_ID, PORTFOLIO_ID) and self.risk.cvar_limit is not None:
            scale = self.env.kwargs.get("reward_scale", 1.0)
            scale = float(scale) if isinstance(scale, int | float) and scale > 0 else 1.0
            problem = log_return_limit_problem(self.risk.cvar_limit / scale)
            if problem:
                r = self.risk
                raise ValueError(
                    f"risk.cvar_limit={r.cvar_limit}: the {self.env.id} reward is a log return, so "
                    f"the worst {r.cvar_alpha:.0%} of {r.cvar_horizon}-bar periods {problem}"
                )
        return self

    def _check_parameters(self) -> None:
        """Refuse networks whose parameters (with gradients and Adam's moments, 16 bytes each)
        could not be built: more than ``MAX_PARAMETERS`` even for one observation value."""
        count = self.parameter_count()
        if count > MAX_PARAMETERS:
            pol = self.policy
            raise ValueError(
                f"policy.lstm_hidden_size={pol.lstm_hidden_size}, policy.n_lstm_layers="
                f"{pol.n_lstm_layers}, policy.net_arch={short(pol.net_arch, 60)} and "
                f"{self._critic_outputs()} critic outputs: the networks would have at least "
                f"{count:.3g} parameters ({16 * count / 2**30:.3g} GiB with gradients and "
                f"optimizer state), more than the {MAX_PARAMETERS:.0e} allowed; make them smaller"
            )

    def _critic_outputs(self) -> int:
        crit = self.critic
        return {"quantile": crit.n_quantiles, "categorical": crit.n_atoms, "scalar": 1}[crit.kind]

    def parameter_count(self, obs_size: int = 1, action_outputs: int = 1) -> int:
        """The policy's parameter count for ``obs_size`` observation values and an action head
        of ``action_outputs`` (``n`` of a Discrete space, ``sum(nvec)``, a Box's size); exact
        but for a Box's log-std parameters (:class:`riskppo.nn.policy.RecurrentActorCritic`)."""
        pol = self.policy
        n_critics = 2 if self.critic.twin else 1
        heads = n_critics + int(self.risk.cvar_limit is not None)
        n_lstms = 1 + {"none": n_critics, "critics": 1, "all": 0}[pol.lstm_sharing]
        return policy_parameters(
            pol.lstm_hidden_size,
            pol.n_lstm_layers,
            pol.net_arch,
            n_lstms,
            heads,
            self._critic_outputs(),
            obs_size=obs_size,
            action_outputs=action_outputs,
        )

    # ---- construction helpers -------------------------------------------------------------
    @classmethod
    def build(cls, data: dict[str, Any] | None = None) -> Config:
        """Validate a nested dict, turning pydantic's error into a :class:`ConfigError`."""
        try:
            return cls.model_validate(data or {})
        except ValidationError as exc:
            raise ConfigError(_format_validation_error(exc)) from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> Config:
        """Read a YAML config: a file, or the name of a shipped one (``"cartpole_masked"``;
        :mod:`riskppo.config.bundled`)."""
        path = resolve_config_path(path)
        try:
            if path.is_file() and path.stat().st_size > MAX_CONFIG_BYTES:
                raise ConfigError(
                    f"{path}: config file of {path.stat().st_size} bytes; at most "
                    f"{MAX_CONFIG_BYTES} allowed"
                )
            raw = path.read_bytes()
        except FileNotFoundError:
            shipped = f", nor a shipped config ({', '.join(bundled_names())})"
            raise ConfigError(
                f"cannot read config file {path}: no such file"
                + (shipped if path.parent == Path(".") else "")
            ) from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        try:
            data = load_yaml(decode_yaml_bytes(raw)) or {}
        except YAMLProblem as exc:
            raise ConfigError(f"{path}: {exc}") from None
        _check_expansion(data, str(path))
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
        try:
            return cls.build(data)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            write_text_atomic(Path(path), text)
        return text

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def log_return_limit_problem(limit: float) -> str | None:
    """What is wrong with a CVaR limit on log returns (``None`` if nothing): above 0 it asks
    the worst periods to gain; below -1 (a loss of 1 - e^-1 = 63%) it constrains nothing a
    trader would accept. Both are read as a percentage or a sign slip (4 or -4 for -4%)."""
    if -1.0 <= limit <= 0.0:
        return None
    pct = abs(limit) if abs(limit) >= 1 else 100 * abs(limit)
    fix = f"; for a {pct:g}% loss write risk.cvar_limit={-pct / 100:g}"
    if limit > 0:
        gain = f"would have to gain {math.expm1(limit):.1%} on average"
        return f"{gain}: even the worst periods would make money; a loss limit is negative{fix}"
    loss = f"may lose {-math.expm1(limit):.1%} on average"
    return f"{loss}: a limit below -1 (a 63% loss) constrains nothing{fix}"


def _check_expansion(data: Any, where: str) -> None:
    problem = expansion_problem(data)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")


def check_rollout_memory(
    cfg: Config, obs_size: int, act_size: int = 1, total_bytes: int | None = None
) -> None:
    """Raise :class:`ConfigError` before anything is allocated when the rollout buffer of
    ``ppo.n_steps`` × ``env.n_envs`` observations of ``obs_size`` floats needs more than half of
    the machine's memory (``total_bytes``; default: the physical RAM)."""
    total = physical_memory() if total_bytes is None else total_bytes
    need = rollout_bytes(cfg.ppo.n_steps, cfg.env.n_envs, obs_size, act_size)
    if total is not None and need > total // 2:
        raise ConfigError(
            f"ppo.n_steps={cfg.ppo.n_steps} x env.n_envs={cfg.env.n_envs} x {obs_size} "
            f"observation values needs about {need / 2**30:.1f} GiB for the rollout buffer, "
            f"more than half of this machine's {total / 2**30:.1f} GiB; lower ppo.n_steps "
            "or env.n_envs"
        )


def _format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"])
        given = err.get("input")
        shown = short(given) if not isinstance(given, dict) else "{...}"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = unknown_key_message(err["loc"])
        lines.append(f"{loc}: {msg} (got {shown})" if loc else msg)
    return "invalid configuration: " + "; ".join(lines)


def unknown_key_message(loc: tuple[int | str, ...]) -> str:
    """``unknown key; did you mean ppo.learning_rate?`` for the mistyped key at ``loc``
    (``("ppo", "learnin_rate")``), or the section's valid keys when none is close."""
    model: type[_Section] | type[Config] = Config
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        inner = field.annotation if field is not None else None
        if not (isinstance(inner, type) and issubclass(inner, _Section)):
            return "unknown key"
        model = inner
    name, section = str(loc[-1]), loc[:-1]
    elsewhere = [key for key in dotted_keys() if key.rsplit(".", 1)[-1] == name]
    if elsewhere:  # the right name in the wrong section (``learning_rate`` for ppo's)
        return f"unknown key; did you mean {' or '.join(elsewhere)}?"
    valid = list(model.model_fields)
    if not difflib.get_close_matches(name, valid, n=1, cutoff=0.6):
        dotted = ".".join(str(part) for part in loc)
        close = difflib.get_close_matches(dotted, dotted_keys(), n=1, cutoff=0.75)
        if close:  # a close spelling in another section (``learnig_rate``)
            return f"unknown key; did you mean {close[0]}?"
    return "unknown key; " + suggest(name, valid, section)


def dotted_keys(model: type[_Section] = Config, prefix: str = "") -> list[str]:
    """Every key of ``model`` as the user writes it (``seed``, ``ppo.learning_rate``), sections
    followed into but not listed themselves; the keys of a free mapping (``env.kwargs``) are not
    known here."""
    keys: list[str] = []
    for name, field in model.model_fields.items():
        inner = field.annotation
        if isinstance(inner, type) and issubclass(inner, _Section):
            keys += dotted_keys(inner, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def suggest(name: str, valid: list[str], section: tuple[int | str, ...] = ()) -> str:
    """``did you mean X?`` for the valid name closest to ``name``
    (:func:`difflib.get_close_matches`), else the list of valid names; both prefixed with
    ``section`` (dotted)."""
    prefix = "".join(f"{part}." for part in section)
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if close:
        return f"did you mean {prefix}{close[0]}?"
    where = f" of {prefix[:-1]}" if prefix else ""
    return f"valid keys{where}: {', '.join(valid)}"


def set_by_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data['a']['b'] = value`` for ``dotted='a.b'``, creating sections as needed."""
    keys = dotted.split(".")
    if not all(k.strip() for k in keys):
        raise ConfigError(f"--set {short(dotted)}: every part of a dotted key needs a name")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: '{key}' is a value, not a section")
        node = child
    node[keys[-1]] = value


def apply_overrides(cfg: Config, overrides: list[str]) -> Config:
    """Apply ``key=value`` strings (values parsed as YAML scalars) and re-validate."""
    data = cfg.to_dict()
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        try:
            value = load_yaml(raw) if raw.strip() else None
        except YAMLSyntaxError:
            value = raw
        except YAMLProblem as exc:
            raise ConfigError(f"--set {short(key, 60)}: {exc}") from None
        _check_expansion(value, f"--set {key}")
        set_by_path(data, key, _plain_scalar(value))
    return Config.build(data)


_E_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


def _plain_scalar(value: Any) -> Any:
    """What a command-line user means by a value YAML 1.1 leaves a string: ``None``/``none``
    (Python's null) → None; ``1e5``, ``3e-4`` (e-notation without a dot) → a float (an
    integral one is accepted where an int is expected)."""
    if not isinstance(value, str):
        return value
    if value in ("None", "none"):
        return None
    return float(value) if _E_NUMBER.fullmatch(value) else value
