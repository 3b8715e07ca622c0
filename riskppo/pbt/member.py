"""Engine-agnostic population member logic (R-PBT-1), shared by the local and the Ray backend.

Exploit/explore (Jaderberg et al. 2017, "Population Based Training of Neural Networks"):
a weak member copies a strong member's *weights and statistics* and continues with perturbed
hyperparameters. The failure modes this module makes impossible (design §6):

* the new learning rate never reaching the optimizer — ``exploit`` writes it into the config
  the lr schedule reads *and* into every param group, for both optimizer strategies;
* normalisation statistics out of sync with the copied weights — observation and return
  statistics (and the CVaR multiplier) come from the source together with its weights;
* hyperparameters stored in the source checkpoint overwriting the perturbed ones — the source's
  config is never applied, only its tensors;
* a half-written checkpoint being exploited — the source is read through
  :func:`riskppo.persist.checkpoint.read_snapshot`, which parses only SHA-256-verified bytes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from riskppo.agent import DistributionalPPO
from riskppo.config import Config, HyperparamSpec, PBTConfig, set_by_path
from riskppo.envs.registration import KINDS, env_kind
from riskppo.evaluation.backtest import backtest
from riskppo.persist.checkpoint import CheckpointError, Snapshot, read_snapshot, sha256
from riskppo.runs.rundir import drop_metrics_after, save_run_checkpoint

LR = "ppo.learning_rate"
"""The envs whose members are scored on a validation backtest, feasibility first (R-PBT-4)."""
INFEASIBLE_BASE = -1e3
"""Score of an infeasible (or flat) trading member with zero violation; more violation is lower."""
FEASIBLE_FLOOR = INFEASIBLE_BASE / 2
"""Feasible scores are clipped at this floor, so every feasible member outranks every infeasible
one even for an absurd metric value; a feasible member with an undefined metric scores it."""
Strategy = Literal["copy", "reset"]
# what must match between source and target for the source's tensors to mean the same thing
_ARCHITECTURE = ("policy", "critic")


@dataclasses.dataclass
class PopulationMember:
    """One member of the population (R-PBT-1): what a scheduler needs to know about it."""

    id: int
    hyperparams: dict[str, float]
    performance: float | None = None
    step: int = 0
    checkpoint: Path | None = None
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    failures: int = 0  # failed intervals so far (R-PBT-5)
    frozen: bool = False  # failed more than pbt.max_failures times: trains no more
    checkpoint_score: float | None = None  # the score of the round ``checkpoint`` ended

    @property
    def normalizer(self) -> Path | None:
        """The normaliser statistics that travel with the checkpoint's weights."""
        return None if self.checkpoint is None else self.checkpoint / "normalizer.safetensors"


# ---- exploit -----------------------------------------------------------------------------------
def exploit(
    target: DistributionalPPO,
    source: str | Path | Snapshot,
    new_hyperparams: Mapping[str, float],
    strategy: Strategy = "copy",
) -> float:
    """Make ``target`` continue from ``source``'s checkpoint with ``new_hyperparams``.

    Loads the source's weights, normalisation statistics (observations, returns/PopArt, CVaR
    multiplier) and counters; ``strategy="copy"`` also takes the source's optimizer moments,
    ``"reset"`` starts a fresh optimizer. Then applies ``new_hyperparams`` (dotted config paths)
    — never the source's stored hyperparameters — and resets the envs and recurrent states.
    Without ``ppo.learning_rate`` in ``new_hyperparams`` the target's current lr is kept, with a
    warning. Returns the learning rate now in every optimizer param group.
    """
    if strategy not in ("copy", "reset"):
        raise ValueError(f"strategy must be 'copy' or 'reset', got {strategy!r}")
    ck = source if isinstance(source, Snapshot) else read_snapshot(Path(source))
    _check_compatible(target.config, ck)
    new = dict(new_hyperparams)
    if LR not in new:
        current = float(target.optimizer.param_groups[0]["lr"])
        warnings.warn(
            f"exploit from {ck.path}: new hyperparameters have no {LR}; keeping the target's "
            f"current learning rate {current:g}",
            stacklevel=2,
        )
        new[LR] = current
    # weights with their statistics and counters; "copy": the source's optimizer moments too
    # (its lr is replaced just below)
    target.adopt(ck, optimizer=strategy == "copy")
    target.set_hyperparams(new)
    if strategy == "reset":
        target.reset_optimizer()
    target.reset_rollout()  # fresh episodes and zero LSTM states: the old ones fit other weights
    lrs = {float(g["lr"]) for g in target.optimizer.param_groups}
    if len(lrs) != 1:  # cannot happen with the schedule above; an invariant worth a clear error
        raise RuntimeError(f"optimizer param groups disagree on the learning rate: {sorted(lrs)}")
    return lrs.pop()


def _check_compatible(cfg: Config, ck: Snapshot) -> None:
    for section in _ARCHITECTURE:
        mine, theirs = getattr(cfg, section), getattr(ck.config, section)
        if mine != theirs:
            raise CheckpointError(
                f"{ck.path}: {section} settings differ from the target's ({theirs} vs {mine}); "
                "PBT members must share one architecture"
            )


# ---- explore / select --------------------------------------------------------------------------
def sample_hyperparams(space: Mapping[str, HyperparamSpec], rng: np.random.Generator) -> dict:
    """One draw per hyperparameter: log-uniform (``log``) or uniform within its bounds."""
    out: dict[str, float] = {}
    for name, spec in space.items():
        if spec.log:
            out[name] = float(math.exp(rng.uniform(math.log(spec.low), math.log(spec.high))))
        else:
            out[name] = float(rng.uniform(spec.low, spec.high))
    return out


def explore(
    hyperparams: Mapping[str, float],
    space: Mapping[str, HyperparamSpec],
    rng: np.random.Generator,
    *,
    factors: tuple[float, float] = (0.8, 1.2),
    resample_prob: float = 0.25,
) -> dict[str, float]:
    """Perturb each hyperparameter by one of ``factors`` or, with ``resample_prob``, draw it
    afresh; the result is clipped to the declared bounds (R-PBT-2)."""
    out: dict[str, float] = {}
    for name, spec in space.items():
        if rng.random() < resample_prob:
            value = sample_hyperparams({name: spec}, rng)[name]
        else:
            value = float(hyperparams[name]) * float(factors[int(rng.integers(len(factors)))])
        out[name] = float(min(max(value, spec.low), spec.high))
    return out


def truncation_selection(
    scores: Mapping[int, float], quantile: float, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """Pairs ``(target, source)``: each of the bottom ``quantile`` members copies a random member
    of the top ``quantile`` (R-PBT-2). Non-finite scores rank last; ties break by member id."""
    if quantile <= 0 or len(scores) < 2:
        return []
    n = min(max(1, math.ceil(len(scores) * quantile)), len(scores) // 2)
    ranked = sorted(scores, key=lambda m: (-_rankable(scores[m]), m))
    top, bottom = ranked[:n], ranked[-n:]
    return [(t, top[int(rng.integers(len(top)))]) for t in bottom]


def _rankable(score: float) -> float:
    return score if math.isfinite(score) else -math.inf


# ---- selection metric --------------------------------------------------------------------------
def resolve_metric(cfg: Config) -> str:
    """R-PBT-4: validation Sharpe for the trading and the portfolio env, mean evaluation return
    otherwise (``auto``)."""
    metric = cfg.pbt.metric
    market = env_kind(cfg.env.id) is not None
    if metric == "auto":
        return "sharpe" if market else "mean_return"
    if metric not in ("mean_return", "cvar") and not market:
        raise ValueError(f"pbt.metric={metric!r} needs a bar env ({' or '.join(KINDS)})")
    return metric


def constraint_violation(
    cvar: float | None,
    limit: float | None,
    market_share: float | None,
    min_market_share: float,
) -> float:
    """How far a trading member is from feasible (R-PBT-4); 0 means feasible.

    ``max(0, (limit - cvar) / |limit|) + max(0, min_market_share - market_share)``: the CVaR
    shortfall relative to the limit (no term without a limit; ``|limit|`` taken as 1 for a limit
    of 0; a CVaR that could not be measured counts as a shortfall of 1) plus the missing share of
    bars in the market (a missing share counts as 0).
    """
    violation = 0.0
    if limit is not None:
        if cvar is None or not math.isfinite(cvar):
            violation += 1.0
        else:
            scale = abs(limit) if limit != 0 else 1.0
            violation += max(0.0, (limit - cvar) / scale)
    share = market_share if market_share is not None and math.isfinite(market_share) else 0.0
    violation += max(0.0, min_market_share - share)
    return violation


def constrained_score(
    value: float | None,
    *,
    cvar: float | None,
    limit: float | None,
    market_share: float | None,
    min_market_share: float,
) -> tuple[float, float]:
    """``(score, violation)`` of a trading member for PBT ranking (R-PBT-4).

    Feasible (``violation == 0``: validation horizon-CVaR ``>= limit`` or no limit, and in the
    market on ``>= min_market_share`` of the validation bars): the metric ``value``, clipped below
    at :data:`FEASIBLE_FLOOR` (an undefined value scores the floor). Infeasible or flat:
    ``INFEASIBLE_BASE - violation`` (see :func:`constraint_violation`), so every infeasible member
    ranks below every feasible one, the less violating higher. Always finite (Ray needs that).
    """
    violation = constraint_violation(cvar, limit, market_share, min_market_share)
    if violation > 0.0:
        return INFEASIBLE_BASE - min(violation, 1e6), violation
    if value is None or not math.isfinite(value):
        return FEASIBLE_FLOOR, 0.0
    return max(float(value), FEASIBLE_FLOOR), 0.0


def selection_cvar_limit(cfg: Config) -> float | None:
    """The CVaR limit trading members are selected against: ``pbt.selection_cvar_limit``, else
    the config's ``risk.cvar_limit`` (:func:`member_config` fixes it to the base config's)."""
    limit = cfg.pbt.selection_cvar_limit
    return cfg.risk.cvar_limit if limit is None else limit


def member_score(model: DistributionalPPO, pbt: PBTConfig) -> tuple[float, dict[str, float]]:
    """The selection score on data the members do not train on (the validation period for
    trading), and the figures it came from.

    Other envs: the mean (or CVaR) of the evaluation returns. Trading and portfolio
    (the kinds of :data:`~riskppo.envs.registration.KINDS`): the validation backtest's
    ``metric`` among feasible members, see
    :func:`constrained_score` and :func:`validation_metrics`; the CVaR limit is
    ``pbt.selection_cvar_limit`` (else the model config's ``risk.cvar_limit``), the horizon and
    α are the config's ``risk.cvar_horizon`` (20 if None) and ``risk.cvar_alpha``.
    """
    cfg = model.config
    metric = resolve_metric(cfg)
    details: dict[str, float] = {}
    value: float | None = None
    if metric in ("mean_return", "cvar"):
        stats = model.evaluate(n_episodes=pbt.eval_episodes, deterministic=True, part="val")
        key = "mean" if metric == "mean_return" else "cvar"
        value = float(stats[key])
        details.update({f"val_{k}": float(v) for k, v in stats.items()})
        if env_kind(cfg.env.id) is None:
            return value, details
    agent = validation_metrics(model)
    details.update({f"val_{k}": float(v) for k, v in agent.items() if v is not None})
    if metric not in ("mean_return", "cvar"):
        raw = agent.get(metric)
        value = None if raw is None else float(raw)
    limit = cfg.risk.cvar_limit if pbt.selection_cvar_limit is None else pbt.selection_cvar_limit
    score, violation = constrained_score(
        value,
        cvar=_opt_float(agent.get("cvar_horizon")),
        limit=limit,
        market_share=_opt_float(agent.get("market_share")),
        min_market_share=pbt.min_market_share,
    )
    if limit is not None:
        details["selection_cvar_limit"] = float(limit)
    details["violation"] = violation
    details["feasible"] = float(violation == 0.0)
    return score, details


def validation_metrics(model: DistributionalPPO) -> dict[str, Any]:
    """The agent's metrics over the validation period (``StrategyMetrics.to_dict()``): the
    trading backtest's, or for the portfolio env the same metrics of its validation record
    (net log returns, gross exposure as the position; no baselines are fitted), with the
    config's ``risk.cvar_alpha``, ``cvar_horizon`` and ``cvar_limit``."""
    cfg = model.config
    kind = env_kind(cfg.env.id)
    if kind is not None and kind.single_asset:
        return backtest(model, "val").metrics_dict()["agent"]
    from riskppo.evaluation.metrics import strategy_metrics
    from riskppo.evaluation.portfolio.backtest import portfolio_backtest

    bt = portfolio_backtest(model, "val", names=())
    agent = bt.frames["agent"]
    return strategy_metrics(
        agent["log_return"],
        agent["gross_exposure"],
        bars_per_year=bt.bars_per_year,
        cvar_alpha=cfg.risk.cvar_alpha,
        cvar_horizon=cfg.risk.cvar_horizon,
        cvar_limit=cfg.risk.cvar_limit,
    ).to_dict()


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


# ---- one interval of one member (the unit of work of both backends) ----------------------------
FAULT_ENV = "RISKPPO_PBT_FAULT"
"""Test-only fault injection (read in the worker): ``"<member>:<round>:<kill|raise>"``, several
separated by commas. The worker of that member in that round, right after it saved its interval's
checkpoint (the worst moment: ``latest`` has moved past the scheduler's record), SIGKILLs itself
(``kill``) or raises (``raise``). Unset in normal use."""


@dataclasses.dataclass(frozen=True)
class IntervalTask:
    """Train ``member`` for ``updates`` updates (after an exploit, if ``exploit_from``).

    ``resume_from`` is the member's last *recorded* checkpoint (None: a fresh member); the worker
    never trusts ``checkpoints/latest``, which a failed interval may have moved. ``exploit_sha256``
    is the SHA-256 of the source's ``manifest.json`` the scheduler recorded; a source whose
    manifest differs is refused."""

    member: int
    member_dir: str
    config: dict[str, Any]  # the member's config (its seed and current hyperparams applied)
    updates: int
    exploit_from: str | None = None
    strategy: Strategy = "copy"
    round: int = 0
    resume_from: str | None = None
    exploit_sha256: str | None = None


@dataclasses.dataclass(frozen=True)
class IntervalResult:
    member: int
    step: int
    checkpoint: str
    score: float
    details: dict[str, float]
    applied_lr: float
    checkpoint_after: str | None
    seconds: float
    started_from: str | None = None
    checkpoint_after_sha256: str | None = None


def member_config(base: Config, member: int, hyperparams: Mapping[str, float]) -> Config:
    """The config member ``member`` trains with: its own seed, its hyperparameters, a checkpoint
    at every ``ready`` boundary (so an interval resumed from disk equals an uninterrupted one)."""
    data = base.to_dict()
    data["seed"] = base.seed + 1000 * member
    data["checkpoint"]["every_updates"] = base.pbt.ready_updates
    data["checkpoint"]["keep_last"] = max(base.checkpoint.keep_last, 2)
    data["monitor"]["tensorboard_log"] = None
    # members are selected against the base config's CVaR limit, even when they tune their own
    data["pbt"]["selection_cvar_limit"] = selection_cvar_limit(base)
    for path, value in hyperparams.items():
        set_by_path(data, path, value)
    return Config.build(data)


def manifest_sha256(checkpoint: str | Path) -> str:
    """SHA-256 of a checkpoint's ``manifest.json``: it lists every file's SHA-256, so this one
    digest pins the whole checkpoint (what ``pbt_history.jsonl`` records per exploit)."""
    return sha256(Path(checkpoint) / "manifest.json")


def _open_member(task: IntervalTask, cfg: Config, mdir: Path) -> DistributionalPPO:
    """The member as the scheduler last recorded it: its recorded checkpoint, or a fresh model.
    ``metrics.jsonl`` rows a failed interval logged past that point are dropped."""
    hyperparams = {p: _get(cfg, p) for p in cfg.pbt.hyperparams}
    if task.resume_from is None:
        drop_metrics_after(mdir / "metrics.jsonl", 0)
        return DistributionalPPO(config=cfg, run_dir=mdir)
    model = DistributionalPPO.load(Path(task.resume_from), env=cfg.env.id, run_dir=mdir)
    drop_metrics_after(mdir / "metrics.jsonl", model.num_timesteps)
    model.set_hyperparams(hyperparams)  # the scheduler's values, not the stored ones
    return model


def _exploit_task(model: DistributionalPPO, task: IntervalTask, mdir: Path) -> tuple[str, str]:
    """Run the task's exploit after checking the source is the one recorded; returns the
    checkpoint saved right after it and that checkpoint's manifest hash."""
    source = task.exploit_from
    if source is None:
        raise ValueError("the task has no exploit")
    if task.exploit_sha256 is not None and manifest_sha256(source) != task.exploit_sha256:
        raise CheckpointError(f"{source}: manifest differs from the one the scheduler recorded")
    hyperparams = {p: _get(model.config, p) for p in model.config.pbt.hyperparams}
    exploit(model, source, hyperparams, task.strategy)
    name = f"exploit-{model.num_timesteps:012d}-r{task.round:03d}"
    after = model.save(mdir / "checkpoints" / name)
    return str(after), manifest_sha256(after)


def inject_fault(task: IntervalTask) -> None:
    """The test-only hook of :data:`FAULT_ENV` (no effect unless that variable names this task)."""
    for spec in filter(None, os.environ.get(FAULT_ENV, "").split(",")):
        member, rnd, kind = spec.split(":")
        if int(member) == task.member and int(rnd) == task.round:
            if kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected fault ({FAULT_ENV}={spec})")


def run_interval(task: IntervalTask) -> IntervalResult:
    """Load the member's recorded checkpoint (or create it), exploit if told to, train
    ``updates`` updates, checkpoint, score. Runs in a worker process (local backend); all state
    is on disk."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    cfg = Config.build(task.config)
    mdir = Path(task.member_dir)
    model = _open_member(task, cfg, mdir)
    try:
        after: tuple[str | None, str | None] = (None, None)
        if task.exploit_from is not None:
            after = _exploit_task(model, task, mdir)
        applied_lr = float(model.optimizer.param_groups[0]["lr"])
        steps = task.updates * cfg.ppo.n_steps * cfg.env.n_envs
        model.learn(steps, reset_num_timesteps=False)
        path = save_run_checkpoint(model, mdir, model.config.checkpoint.keep_last)
        model.config.to_yaml(mdir / "config.yaml")  # `riskppo eval/backtest` work on mdir
        inject_fault(task)
        score, details = member_score(model, cfg.pbt)
    finally:
        model.close()
    return IntervalResult(
        task.member,
        model.num_timesteps,
        str(path),
        score,
        details,
        applied_lr,
        after[0],
        time.perf_counter() - t0,
        task.resume_from,
        after[1],
    )


def _get(cfg: Config, dotted: str) -> float:
    node: Any = cfg
    for key in dotted.split("."):
        node = getattr(node, key)
    return float(node)
