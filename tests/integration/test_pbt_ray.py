"""R-PBT-3: a tiny Ray Tune population on a local Ray instance limited to 2 CPUs, through the
command line, with the same member logic (exploit, audit trail) as the local backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from riskppo.persist.checkpoint import read_checkpoint

SMOKE = Path(__file__).parents[2] / "riskppo/configs/pbt_smoke.yaml"


def test_ray_population_exploits_on_two_cpus(tmp_path: Path) -> None:
    run = tmp_path / "ray_pbt"
    cmd = [
        sys.executable, "-m", "riskppo.cli", "pbt", "--config", str(SMOKE), "--backend", "ray",
        "--run-dir", str(run), "--no-progress",
        "--set", "pbt.population=2", "--set", "pbt.quantile=0.5", "--set", "pbt.workers=2",
        "--set", "total_timesteps=1536",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run / "pbt_summary.json").read_text())
    assert summary["backend"] == "ray" and summary["n_errors"] == 0
    history = [json.loads(x) for x in (run / "pbt_history.jsonl").read_text().splitlines()]
    assert len(history) == summary["n_exploits"] >= 1
    for ex in history:
        assert ex["member"] != ex["source"]
        assert ex["applied_lr"] == ex["new_hyperparams"]["ppo.learning_rate"]
        after = read_checkpoint(Path(ex["checkpoint_after"]))
        assert after.config.ppo.learning_rate == ex["new_hyperparams"]["ppo.learning_rate"]
        assert after.config.ppo.ent_coef == ex["new_hyperparams"]["ppo.ent_coef"]
    members = [json.loads(x) for x in (run / "pbt_members.jsonl").read_text().splitlines()]
    assert len({m["member"] for m in members}) == 2 and len(members) == 2 * 3
    best = Path(summary["best_dir"])
    assert (best / "checkpoints" / "latest").is_file()
    assert (run / "pbt_summary.png").is_file()
