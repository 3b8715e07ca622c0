"""Population-based training (R-PBT): member logic, the local scheduler, the Ray Tune backend.

``run_pbt(cfg, run_dir)`` runs ``cfg.pbt.backend`` ("local" by default, or "ray").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from riskppo.config import Config, ConfigError
from riskppo.logs import OnMessage, log_message
from riskppo.pbt.member import (
    PopulationMember,
    exploit,
    explore,
    member_score,
    sample_hyperparams,
    truncation_selection,
)

__all__ = [
    "PopulationMember",
    "exploit",
    "explore",
    "member_score",
    "run_pbt",
    "sample_hyperparams",
    "truncation_selection",
]


def run_pbt(
    cfg: Config,
    run_dir: Path,
    *,
    progress_bar: bool = True,
    resume: bool = False,
    on_message: OnMessage = log_message,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Run the population of ``cfg.pbt`` into ``run_dir``; returns the summary dict (what
    ``riskppo pbt`` prints of it: :func:`riskppo.pbt.local.summary_lines`).

    ``resume``: continue the run in ``run_dir`` from its last completed round (local backend;
    ``cfg`` must be the run's own config). ``on_message``: the local backend's line when the
    population starts (:mod:`riskppo.logs`; Ray Tune reports its own trials). ``ray_address``:
    the Ray cluster the Ray backend runs on (None: a local Ray instance)."""
    if cfg.ppo.lr_schedule != "constant":
        raise ConfigError(
            f"ppo.lr_schedule={cfg.ppo.lr_schedule!r} with PBT: each member trains in "
            "intervals, so a schedule would restart in every interval; PBT tunes the learning "
            "rate itself — use ppo.lr_schedule: constant"
        )
    if ray_address is not None and cfg.pbt.backend != "ray":
        raise ConfigError("--ray-address needs the Ray backend (--backend ray, pbt.backend=ray)")
    if cfg.pbt.backend == "ray":
        if resume:
            raise ConfigError(
                "resuming a PBT run needs pbt.backend=local; the Ray backend restarts failed "
                "trials itself (pbt.max_failures)"
            )
        from riskppo.pbt.ray_backend import run_pbt_ray

        return run_pbt_ray(cfg, run_dir, progress_bar=progress_bar, address=ray_address)
    from riskppo.pbt.local import run_pbt_local

    return run_pbt_local(
        cfg, run_dir, progress_bar=progress_bar, resume=resume, on_message=on_message
    )
