"""Ray Tune PBT backend (R-PBT-3): the same member logic inside a Ray Tune trainable.

Ray's :class:`~ray.tune.schedulers.PopulationBasedTraining` decides who exploits whom and
perturbs the hyperparameters (clipped to the declared bounds by ``custom_explore_fn``); it
restarts an exploiting trial from the source trial's checkpoint with the new config. The
trainable recognises that case (the checkpoint belongs to another trial) and calls
:func:`riskppo.pbt.member.exploit` — weights, statistics, optimizer strategy, lr, recurrent
reset — exactly as the local backend does, and appends the exploit to ``pbt_history.jsonl``.
Checkpoints are directories (a riskppo checkpoint plus ``member.json``); failed trials are
restarted from their last checkpoint (``FailureConfig``). Install with ``pip install
"riskppo[ray]"``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from riskppo.config import Config, ConfigError
from riskppo.pbt.audit import archive_source
from riskppo.pbt.local import append_jsonl, initial_members, json_safe, n_rounds
from riskppo.pbt.member import (
    exploit,
    manifest_sha256,
    member_config,
    member_score,
    resolve_metric,
)
from riskppo.runs.jobs import ray_connection
from riskppo.safefs import write_text_atomic

_WORST = -1e30  # Ray reports must be finite: a failed evaluation ranks last


def _flat(hp: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in hp.items()}


def member_trainable(config: dict[str, Any]) -> None:
    """Ray Tune function trainable: one PBT member, reporting after every ``ready`` interval."""
    import torch
    from ray import tune

    from riskppo.agent import DistributionalPPO
    from riskppo.runs.rundir import save_run_checkpoint

    torch.set_num_threads(1)
    base = Config.build(config["base"])
    hp = _flat(config["hp"])
    root = Path(config["run_dir"])
    trial_id = tune.get_context().get_trial_id()
    member = int(config["member"])
    mdir = root / "members" / trial_id
    cfg = member_config(base, member, hp)
    restored = tune.get_checkpoint()
    if restored is None:
        model = DistributionalPPO(config=cfg, run_dir=mdir)
    else:
        with restored.as_directory() as d:
            info = json.loads((Path(d) / "member.json").read_text())
            if info["trial_id"] == trial_id:  # own checkpoint: after a (synch PBT) pause or failure
                model = DistributionalPPO.load(Path(d) / "model", env=cfg.env.id, run_dir=mdir)
                model.set_hyperparams(hp)  # Ray's config, never the stored one
            else:  # Ray's PBT exploit: continue from another trial with perturbed hp
                model = DistributionalPPO(config=cfg, run_dir=mdir)
                _exploit_from(model, Path(d), info, trial_id, hp, root, mdir, restored.path)
    interval = base.pbt.ready_updates * base.ppo.n_steps * base.env.n_envs
    total = n_rounds(base) * interval
    try:
        while model.num_timesteps < total:
            model.learn(interval, reset_num_timesteps=False)
            score, details = member_score(model, cfg.pbt)  # base limit, see member_config
            write_text_atomic(mdir / "hyperparams.json", json.dumps(hp))
            append_jsonl(
                root / "pbt_members.jsonl",
                {
                    "member": trial_id,
                    "step": model.num_timesteps,
                    "score": score,
                    "hyperparams": hp,
                    **details,
                },
            )
            model.config.to_yaml(mdir / "config.yaml")
            own = save_run_checkpoint(model, mdir, model.config.checkpoint.keep_last)
            with tempfile.TemporaryDirectory(dir=mdir) as tmp:
                shutil.copytree(own, Path(tmp) / "model")
                info = {"trial_id": trial_id, "member": member, "hyperparams": hp}
                (Path(tmp) / "member.json").write_text(json.dumps(info))
                metrics = {
                    "score": score if math.isfinite(score) else _WORST,
                    "step": model.num_timesteps,
                    "applied_lr": float(model.optimizer.param_groups[0]["lr"]),
                    **{k: v for k, v in details.items() if math.isfinite(v)},
                }
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(tmp))
    finally:
        model.close()


def _exploit_from(
    model: Any,
    ckpt_dir: Path,
    info: dict[str, Any],
    trial_id: str,
    hp: dict[str, float],
    root: Path,
    mdir: Path,
    source_path: str,
) -> None:
    old_file = mdir / "hyperparams.json"
    old = json.loads(old_file.read_text()) if old_file.is_file() else None
    name = f"{trial_id}-from-{info['trial_id']}-{Path(source_path).name}"
    # a verified copy the history can point at after Ray prunes its checkpoints (R-PBT-5)
    source, digest = archive_source(root, ckpt_dir / "model", name)
    applied = exploit(model, source, hp, model.config.pbt.optimizer_strategy)
    after = model.save(mdir / "checkpoints" / f"exploit-{model.num_timesteps:012d}")
    append_jsonl(
        root / "pbt_history.jsonl",
        {
            "member": trial_id,
            "step": model.num_timesteps,
            "source": info["trial_id"],
            "old_hyperparams": old,
            "new_hyperparams": hp,
            "applied_lr": applied,
            "strategy": model.config.pbt.optimizer_strategy,
            "source_checkpoint": str(source),
            "source_original": source_path,
            "source_manifest_sha256": digest,
            "checkpoint_after": str(after),
            "checkpoint_after_sha256": manifest_sha256(after),
        },
    )


def _mutations(cfg: Config) -> dict[str, Any]:
    from ray import tune

    return {
        name: tune.loguniform(s.low, s.high) if s.log else tune.uniform(s.low, s.high)
        for name, s in cfg.pbt.hyperparams.items()
    }


def run_pbt_ray(
    cfg: Config, run_dir: Path, *, progress_bar: bool = True, address: str | None = None
) -> dict[str, Any]:
    """Run the population with Ray Tune: on the Ray instance this process is already connected
    to, else on the cluster at ``address``, else on a local Ray instance of ``pbt.workers``
    CPUs (the connection of :func:`riskppo.runs.jobs.ray_connection`, as walk-forward and
    universe cells use it)."""
    try:
        import ray.tune  # noqa: F401  (Tune is an extra of Ray: fail here, with the hint)
    except ImportError:
        raise ConfigError('pbt.backend=ray needs Ray Tune: pip install "riskppo[ray]"') from None

    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg.to_yaml(run_dir / "config.yaml")
    with ray_connection(address, cfg.pbt.workers or os.cpu_count()):
        results = _tuner(cfg, run_dir, progress_bar).fit()
    summary = _summary(cfg, run_dir, results)
    write_text_atomic(run_dir / "pbt_summary.json", json.dumps(json_safe(summary), indent=2))
    # matplotlib only in the driver: the trainables import this module too
    from riskppo.pbt.report import plot_population

    plot_population(run_dir)
    return summary


def _tuner(cfg: Config, run_dir: Path, progress_bar: bool) -> Any:
    """The Ray Tune ``Tuner``: one trial per member (the local backend's initial draws), Ray's
    synchronous PBT scheduler with the config's quantile, resampling and perturbation factors,
    explored values clipped to the declared bounds."""
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    p = cfg.pbt
    bounds = {name: (s.low, s.high) for name, s in p.hyperparams.items()}

    def clip_to_bounds(config: dict[str, Any]) -> dict[str, Any]:
        for name, (low, high) in bounds.items():
            config["hp"][name] = min(max(float(config["hp"][name]), low), high)
        return config

    scheduler = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=1,
        hyperparam_mutations={"hp": _mutations(cfg)},
        quantile_fraction=p.quantile,
        resample_probability=p.resample_prob,
        perturbation_factors=(max(p.perturb_factors), min(p.perturb_factors)),
        custom_explore_fn=clip_to_bounds,
        synch=True,
    )
    members = initial_members(cfg)  # the same initial draws as the local backend
    param_space = {
        "base": cfg.to_dict(),
        "run_dir": str(run_dir),
        "member": tune.grid_search([m.id for m in members]),
        "hp": {name: tune.sample_from(_initial(members, name)) for name in p.hyperparams},
    }
    return tune.Tuner(
        tune.with_resources(member_trainable, {"cpu": 1}),
        param_space=param_space,
        tune_config=tune.TuneConfig(scheduler=scheduler, metric="score", mode="max"),
        run_config=tune.RunConfig(
            name="ray",
            storage_path=str(run_dir),
            failure_config=tune.FailureConfig(max_failures=p.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=4),
            stop={"training_iteration": n_rounds(cfg)},  # no exploit after the last interval
            verbose=1 if progress_bar else 0,
        ),
    )


def _summary(cfg: Config, run_dir: Path, results: Any) -> dict[str, Any]:
    """``pbt_summary.json``'s content from Ray's ``ResultGrid``: the best trial by its last
    score, its hyperparameters and directory, exploit and error counts."""
    best = results.get_best_result(metric="score", mode="max", scope="last")
    last = best.metrics or {}
    trial = str(last.get("trial_id"))
    return {
        "backend": "ray",
        "metric": resolve_metric(cfg),
        "best_member": trial,
        "best_score": last.get("score"),
        "best_hyperparams": (best.config or {}).get("hp"),
        "best_dir": str(run_dir / "members" / trial),
        "n_exploits": _count_lines(run_dir / "pbt_history.jsonl"),
        "n_errors": len(results.errors),
        "ray_results": str(run_dir / "ray"),
    }


def _initial(members: list[Any], name: str) -> Any:
    def draw(config: dict[str, Any]) -> float:
        return float(members[int(config["member"])].hyperparams[name])

    return draw


def _count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0
