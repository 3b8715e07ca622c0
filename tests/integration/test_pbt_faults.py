"""PBT that survives its workers (R-PBT-5), with real worker processes.

Faults come from the test-only hook ``RISKPPO_PBT_FAULT`` (``riskppo.pbt.member.FAULT_ENV``):
the worker of a chosen member in a chosen round, right after it saved its interval's checkpoint,
SIGKILLs itself or raises. The population must finish (exit 0, a summary listing the failures),
each failed member restarts from its last recorded checkpoint, hyperparameters change only with a
recorded exploit, and every exploit's source still verifies after ``keep_last`` pruned it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from riskppo.config import Config
from riskppo.pbt.audit import assert_history_verifies, verify_history
from riskppo.pbt.local import initial_members, run_pbt_local
from riskppo.pbt.member import FAULT_ENV
from riskppo.persist.checkpoint import CheckpointError, verify_checkpoint

STEPS_PER_ROUND = 16 * 2  # n_steps × n_envs, one update per round


def tiny(rounds: int, population: int, **pbt: Any) -> Config:
    """A population that trains one 32-step update per round on CartPole (seconds per round)."""
    return Config.build(
        {
            "seed": 0,
            "total_timesteps": rounds * STEPS_PER_ROUND,
            "env": {"id": "CartPole-v1", "n_envs": 2},
            "ppo": {"n_steps": 16, "batch_size": 32, "n_epochs": 1, "bptt_len": 8},
            "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
            "critic": {"n_quantiles": 8},
            "risk": {"cvar_alpha": 0.25},
            "checkpoint": {"keep_last": 1},  # members keep 2: sources get pruned
            "pbt": {
                "population": population,
                "ready_updates": 1,
                "eval_episodes": 1,
                "workers": 2,
                "hyperparams": {
                    "ppo.learning_rate": {"low": 1e-4, "high": 1e-2},
                    "ppo.clip_range": {"low": 0.1, "high": 0.3, "log": False},
                },
                **pbt,
            },
        }
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def entries(run: Path, member: int) -> list[dict[str, Any]]:
    return [e for e in lines(run / "pbt_members.jsonl") if e["member"] == member]


def ckpt_name(step: int) -> str:
    return f"ckpt-{step:012d}"


def pbt_cli(
    tmp_path: Path, cfg: Config, faults: str, exit_code: int = 0
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``riskppo pbt`` on ``cfg`` in a fresh process with the fault plan ``faults``
    (``FAULT_ENV``); returns the finished process (checked for ``exit_code``) and its run
    directory."""
    cfg.to_yaml(tmp_path / "pbt.yaml")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "riskppo.cli", "pbt", "--config", str(tmp_path / "pbt.yaml")]
    cmd += ["--run-dir", str(run), "--no-progress"]
    env = {**os.environ, FAULT_ENV: faults}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == exit_code, proc.stderr[-3000:]
    return proc, run


def test_killed_workers_cost_their_member_one_round(tmp_path: Path) -> None:
    """`riskppo pbt` with SIGKILLed workers: m1 dies in round 1 and restarts from its round-0
    checkpoint; m2 dies in round 0 (no checkpoint yet: restarts fresh) and fails again in round
    1, which is past max_failures=1, so it is frozen; m0 never notices. Exit 0, summary, plot."""
    cfg = tiny(rounds=3, population=3, quantile=0.0, max_failures=1)
    proc, run = pbt_cli(tmp_path, cfg, "1:1:kill,2:0:kill,2:1:raise")
    assert "m1 failed in round 1 (worker process died (killed by SIGKILL)): restart" in proc.stdout

    summary = json.loads((run / "pbt_summary.json").read_text())
    failures = [(f["member"], f["round"], f["kind"], f["action"]) for f in summary["failures"]]
    assert failures == [(2, 0, "died", "restart"), (1, 1, "died", "restart"),
                        (2, 1, "raised", "frozen")]  # fmt: skip
    assert all("SIGKILL" in f["reason"] for f in summary["failures"] if f["kind"] == "died")
    assert summary["frozen"] == [2] and summary["n_failures"] == 3
    status = {m["member"]: (m["status"], m["failures"], m["step"]) for m in summary["members"]}
    assert status == {0: ("active", 0, 96), 1: ("active", 1, 64), 2: ("frozen", 2, 0)}

    # m0 was never disturbed; m1 restarted from its recorded round-0 checkpoint, not `latest`
    assert [e["step"] for e in entries(run, 0)] == [32, 64, 96]
    m1 = entries(run, 1)
    assert [e.get("step") for e in m1] == [32, None, 64]
    assert m1[1]["restart_from"].endswith(ckpt_name(32)) and ckpt_name(64) in m1[1]["discarded"]
    assert m1[2]["started_from"].endswith(ckpt_name(32))
    assert [e.get("step") for e in entries(run, 2)] == [None, None]  # frozen: no round 2
    assert entries(run, 2)[0]["restart_from"] is None  # nothing recorded: restarts fresh

    # each member directory holds what the logs describe: latest = the recorded checkpoint,
    # metrics without the rows of the failed interval
    ckpts = run / "members/m1/checkpoints"
    assert (ckpts / "latest").read_text() == ckpt_name(64)
    verify_checkpoint(ckpts / ckpt_name(64))
    logged = [r["time/total_timesteps"] for r in lines(run / "members/m1/metrics.jsonl")]
    assert logged == sorted(set(logged)) and logged[-1] == 64
    m2 = run / "members/m2/checkpoints"
    assert not (m2 / "latest").exists() and not list(m2.glob("ckpt-*"))
    assert (run / "pbt_summary.png").stat().st_size > 10_000  # m2 has no finished round


def test_failed_exploit_changes_nothing_and_every_exploit_verifies(tmp_path: Path) -> None:
    """Both members fail in round 1, the round that runs the exploit decided after round 0: the
    target keeps its hyperparameters, no history line, no exploit checkpoint left behind. Later
    exploits are recorded with their source's manifest hash, and after the run (keep_last
    pruned the members' own copies) every history line verifies against disk."""
    cfg = tiny(rounds=4, population=2, quantile=0.5)
    run = tmp_path / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FAULT_ENV, "0:1:raise,1:1:kill")
        with pytest.warns(UserWarning, match="failed in round 1"):
            summary = run_pbt_local(cfg, run, progress_bar=False)

    members = lines(run / "pbt_members.jsonl")
    history = lines(run / "pbt_history.jsonl")
    dropped = [e for e in members if "dropped_exploit" in e]
    assert len(dropped) == 1 and dropped[0]["round"] == 1
    target = dropped[0]["member"]
    assert dropped[0]["hyperparams"] == entries(run, target)[0]["hyperparams"]  # unchanged
    assert not any(h["round"] == 1 for h in history)  # the dropped exploit left no line
    assert [h["round"] for h in history] == [2, 3] and summary["n_exploits"] == 2

    # hyperparameters move only with a history line: replay the history over the initial draw
    current = {m.id: m.hyperparams for m in initial_members(cfg)}
    for e in members:
        ex = [h for h in history if h["member"] == e["member"] and h["round"] == e["round"]]
        if ex and "step" in e:
            assert ex[0]["old_hyperparams"] == current[e["member"]]
            current[e["member"]] = ex[0]["new_hyperparams"]
        assert e["hyperparams"] == current[e["member"]], e
    assert {m["member"]: m["hyperparams"] for m in summary["members"]} == current

    # every exploit checkpoint on disk is recorded, and every recorded one is on disk
    on_disk = {str(p) for p in run.glob("members/*/checkpoints/exploit-*")}
    assert on_disk == {h["checkpoint_after"] for h in history}
    # the members' own source checkpoints were pruned; the archived copies verify
    assert not Path(history[0]["source_original"]).exists()
    assert assert_history_verifies(run) == 2
    assert all(h["source_checkpoint"].startswith(str(run / "pbt/exploit_sources")) for h in history)
    assert (run / "pbt_summary.png").stat().st_size > 10_000

    # the audit notices a changed file and a swapped manifest
    src = Path(history[0]["source_checkpoint"])
    tampered = sorted(json.loads((src / "manifest.json").read_text())["files"])[0]
    (src / tampered).write_bytes(b"tampered")
    after = Path(history[1]["checkpoint_after"])
    manifest = json.loads((after / "manifest.json").read_text())
    (after / "manifest.json").write_text(json.dumps({**manifest, "riskppo_version": "x"}))
    report = verify_history(run)
    assert [r["ok"] for r in report] == [False, False]
    assert tampered in report[0]["problems"][0]
    assert "manifest SHA-256" in report[1]["problems"][0]
    with pytest.raises(CheckpointError, match="2 exploit"):
        assert_history_verifies(run)


def test_a_population_that_never_finishes_a_round_still_ends_cleanly(tmp_path: Path) -> None:
    """Every member dies in round 0 with no failure allowed: `riskppo pbt` exits 1 with a
    summary that has no best checkpoint, says so in one line, and does not try to backtest
    nothing. Mutation check: `_finish_pbt` without its no-best guard fails on the missing
    checkpoint."""
    cfg = tiny(rounds=2, population=2, max_failures=0)
    data = cfg.to_dict()
    data["env"] = {"id": "riskppo/Trading-v0", "n_envs": 2, "kwargs": {"episode_length": 64}}
    proc, run = pbt_cli(tmp_path, Config.build(data), "0:0:raise,1:0:raise", exit_code=1)
    summary = json.loads((run / "pbt_summary.json").read_text())
    assert summary["best_checkpoint"] is None and summary["n_failures"] == 2
    assert "riskppo pbt: no member finished a round (2 failed interval(s)" in proc.stderr
