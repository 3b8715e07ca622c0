"""A run directory is untrusted input (downloaded, shared, unpacked): the CLI never writes
through its symlinks, never resumes or evaluates a checkpoint of another run, never mixes two
runs in one directory, and a checkpoint save on a full disk (a real ``ulimit -f``) is one line,
exit code 2, with the previous checkpoint intact and the resume afterwards exact.

Real runs, real symlinks, the CLI in real processes.
"""

from __future__ import annotations

import json
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from safetensors.torch import load_file

from riskppo import cli
from riskppo.runs.rundir import latest_good_checkpoint

TINY = {
    "seed": 0,
    "total_timesteps": 256,
    "env": {"id": "CartPole-v1", "n_envs": 2},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 1},
    "policy": {"lstm_hidden_size": 16},
    "checkpoint": {"every_updates": 2, "keep_last": 5},
}
OTHER = {**TINY, "seed": 1, "total_timesteps": 320, "ppo": {**TINY["ppo"], "learning_rate": 1e-3},
         "policy": {"lstm_hidden_size": 8}}  # fmt: skip
TENSORS = ("model.safetensors", "optimizer.safetensors", "training.safetensors")


def run_cli(*args: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m riskppo.cli ARGS`` in a real process; ``fsize``: its RLIMIT_FSIZE in bytes
    (SIGXFSZ ignored, so an oversized write fails with EFBIG like a full disk)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "riskppo.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=limit if fsize is not None else None,
    )


def error_line(res: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a CLI that failed as a user error (exit code 2, no traceback)."""
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith("riskppo: warning:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def train(root: Path, name: str, config: dict[str, Any]) -> Path:
    (root / f"{name}.yaml").write_text(yaml.safe_dump(config))
    args = ["train", "--config", str(root / f"{name}.yaml"), "--run-dir", str(root / name)]
    assert cli.main([*args, "--no-progress"]) == 0
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two finished CartPole runs with different configs (checkpoints every 64 steps)."""
    root = tmp_path_factory.mktemp("runs")
    return {"tiny": train(root, "tiny", TINY), "other": train(root, "other", OTHER)}


@pytest.fixture()
def run(runs: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the tiny run, to tamper with."""
    return Path(shutil.copytree(runs["tiny"], tmp_path / "run", symlinks=True))


def set_total(run: Path, total: int) -> None:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["total_timesteps"] = total
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def logged_steps(run: Path) -> list[int]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["time/total_timesteps"] for line in lines]


def ckpt(step: int) -> str:
    return f"ckpt-{step:012d}"


# ---- writes through symlinks -------------------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "eval"])
def test_a_symlinked_lock_is_refused_and_its_target_untouched(run: Path, command: str) -> None:
    victim = run.parent / "victim"
    victim.write_text("secret")
    if command == "train":
        target = run.parent / "new"
        target.mkdir()
        (run.parent / "cfg.yaml").write_text(yaml.safe_dump(TINY))
        args = ["train", "--config", str(run.parent / "cfg.yaml"), "--run-dir", str(target)]
    else:
        target, args = run, ["eval", str(run), "--episodes", "1"]
    (target / ".lock").unlink(missing_ok=True)
    (target / ".lock").symlink_to(victim)
    line = error_line(run_cli(*args))
    assert line.startswith(f"riskppo: unsafe path: {target / '.lock'} is a symlink"), line
    assert victim.read_text() == "secret"
    assert not (target / ("config.yaml" if command == "train" else "evaluation.json")).exists()


def test_symlinked_evaluation_files_are_replaced_not_followed(run: Path) -> None:
    victims = {}
    for name in ("evaluation.json", "evaluation.txt"):
        victims[name] = run.parent / f"victim-{name}"
        victims[name].write_text("secret")
        (run / name).symlink_to(victims[name])
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0
    for name, victim in victims.items():
        assert victim.read_text() == "secret"
        assert not (run / name).is_symlink()
    assert json.loads((run / "evaluation.json").read_text())["checkpoint"] == ckpt(256)


def test_backtest_refuses_a_symlinked_report_directory_and_a_foreign_checkpoint(
    tmp_path: Path,
) -> None:
    sets = ["total_timesteps=64", "env.n_envs=2", "ppo.n_steps=32", "ppo.batch_size=64"]
    sets += ["policy.lstm_hidden_size=8"]
    run = tmp_path / "trading"
    args = ["train", "--run-dir", str(run), "--no-progress"]
    assert cli.main([*args, *(x for kv in sets for x in ("--set", kv))]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(run / "backtest_test")
    (run / "backtest_test").symlink_to(elsewhere)
    line = error_line(run_cli("backtest", str(run)))
    assert line == (
        f"riskppo: unsafe path: {run / 'backtest_test'} is a symlink, not a directory; riskppo "
        "does not write through links in a run directory: remove it or use another directory"
    )
    assert list(elsewhere.iterdir()) == []

    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("lstm_hidden_size: 8", "lstm_hidden_size: 64"))
    line = error_line(run_cli("backtest", str(run), "--split", "val"))
    assert "was written with policy.lstm_hidden_size=8 but config.yaml says 64;" in line, line
    assert not (run / "backtest_val").exists()


def test_a_symlinked_metrics_log_is_refused_on_resume(run: Path) -> None:
    victim = run.parent / "victim"
    victim.write_text("secret\n")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(victim)
    set_total(run, 320)
    line = error_line(run_cli("train", "--resume", str(run), "--no-progress"))
    assert line.startswith(f"riskppo: unsafe path: {run / 'metrics.jsonl'} is a symlink"), line
    assert victim.read_text() == "secret\n"


# ---- checkpoints of another run -----------------------------------------------------------------
def test_a_checkpoint_copied_from_another_run_is_refused(runs: dict[str, Path], run: Path) -> None:
    shutil.copytree(runs["other"] / "checkpoints" / ckpt(320), run / "checkpoints" / ckpt(320))
    (run / "checkpoints" / "latest").write_text(ckpt(320))
    set_total(run, 512)
    want = (
        f"checkpoint {ckpt(320)} was written with seed=1 but config.yaml says 0 (and "
        "ppo.learning_rate, policy.lstm_hidden_size); this checkpoint does not belong to this run"
    )
    for args in (("train", "--resume", str(run), "--no-progress"), ("eval", str(run))):
        line = error_line(run_cli(*args))
        assert line == f"riskppo: checkpoint error: {want}", line
    assert not (run / "evaluation.json").exists()
    assert max(logged_steps(run)) == 256


def test_record_refuses_a_checkpoint_copied_from_another_run(
    runs: dict[str, Path], run: Path, tmp_path: Path
) -> None:
    """`riskppo record --run` checks the checkpoint as eval and backtest do: one line, no file;
    the run's own checkpoint records."""
    shutil.copytree(runs["other"] / "checkpoints" / ckpt(320), run / "checkpoints" / ckpt(320))
    (run / "checkpoints" / "latest").write_text(ckpt(320))
    out = tmp_path / "demos.safetensors"
    line = error_line(run_cli("record", str(out), "--run", str(run), "--steps", "8"))
    assert line == (
        f"riskppo: checkpoint error: checkpoint {ckpt(320)} was written with seed=1 but "
        "config.yaml says 0 (and ppo.learning_rate, policy.lstm_hidden_size); this checkpoint "
        "does not belong to this run"
    ), line
    assert not out.exists()
    (run / "checkpoints" / "latest").write_text(ckpt(256))
    assert cli.main(["record", str(out), "--run", str(run), "--steps", "8"]) == 0
    assert out.is_file()


def test_an_edited_config_yaml_no_longer_matches_its_checkpoints(run: Path) -> None:
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("learning_rate: 0.0003", "learning_rate: 0.001"))
    line = error_line(run_cli("eval", str(run), "--episodes", "1"))
    assert "was written with ppo.learning_rate=0.0003 but config.yaml says 0.001;" in line, line


def test_symlinked_checkpoints_are_ignored_by_the_fallback_and_the_rotation(
    runs: dict[str, Path], run: Path
) -> None:
    foreign = runs["other"] / "checkpoints" / ckpt(320)
    link = run / "checkpoints" / ckpt(999_999)
    link.symlink_to(foreign)
    (run / "checkpoints" / "latest").write_text("garbage")
    ignored = re.escape(f"ignoring {link}: a symlink, not a checkpoint of this run")
    with (
        pytest.warns(UserWarning, match="ignoring the latest pointer"),
        pytest.warns(UserWarning, match=ignored),
    ):
        assert latest_good_checkpoint(run).name == ckpt(256)

    (run / "checkpoints" / "latest").write_text(ckpt(256))
    set_total(run, 384)  # two more checkpoints: 6 real ones, keep_last 5
    assert cli.main(["train", "--resume", str(run), "--no-progress"]) == 0
    real = sorted(p.name for p in (run / "checkpoints").glob("ckpt-*") if not p.is_symlink())
    assert real == [ckpt(s) for s in (128, 192, 256, 320, 384)]
    assert link.is_symlink() and (foreign / "manifest.json").is_file()


# ---- one run per directory ----------------------------------------------------------------------
def test_train_into_a_directory_holding_a_run_is_refused_unless_forced(run: Path) -> None:
    cfg_file = run.parent / "seed5.yaml"
    cfg_file.write_text(yaml.safe_dump({**TINY, "seed": 5}))
    config_before = (run / "config.yaml").read_bytes()
    args = ("train", "--config", str(cfg_file), "--run-dir", str(run), "--no-progress")
    line = error_line(run_cli(*args))
    assert line == (
        f"riskppo: {run} already holds a run; use --resume {run} to continue it, or --force to "
        "delete its contents and start clean, or another --run-dir"
    )
    assert (run / "config.yaml").read_bytes() == config_before

    outside = run.parent / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").symlink_to(outside)  # --force unlinks it, never deletes through it
    res = run_cli(*args, "--force")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (outside / "keep.txt").read_text() == "keep"
    assert yaml.safe_load((run / "config.yaml").read_text())["seed"] == 5
    assert logged_steps(run) == list(range(32, 257, 32))  # this run's rows only
    assert len(list(run.glob("events.out.tfevents.*"))) == 1


def test_force_never_deletes_files_a_run_does_not_write(run: Path) -> None:
    (run / "notes.txt").write_text("mine")
    cfg_file = run.parent / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(TINY))
    args = ("train", "--config", str(cfg_file), "--run-dir", str(run), "--force")
    line = error_line(run_cli(*args, "--no-progress"))
    assert line.startswith(f"riskppo: {run} is not empty and holds files a run does not write")
    assert "notes.txt" in line and (run / "checkpoints" / "latest").is_file()


# ---- a full disk -------------------------------------------------------------------------------
def test_a_full_disk_is_one_line_and_the_resume_after_it_is_exact(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """The run stopped at step 128 (the full run's files up to there); its resume under a
    60 kB file-size limit cannot write ckpt-192 (optimizer.safetensors is ~88 kB)."""
    full = runs["tiny"]
    run = Path(shutil.copytree(full, tmp_path / "run"))
    for step in (192, 256):
        shutil.rmtree(run / "checkpoints" / ckpt(step))
    (run / "checkpoints" / "latest").write_text(ckpt(128))
    for name in ("eval.json", "evaluation.json", "evaluation.txt"):
        (run / name).unlink(missing_ok=True)
    before = sorted(p.name for p in (run / "checkpoints").iterdir())

    res = run_cli("train", "--resume", str(run), "--no-progress", fsize=60_000)
    line = error_line(res)
    assert line == (
        f"riskppo: checkpoint error: cannot write checkpoint {run / 'checkpoints' / ckpt(192)}: "
        "File too large; the previous checkpoint is untouched"
    )
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before  # no temp left
    assert (run / "checkpoints" / "latest").read_text() == ckpt(128)

    res = run_cli("train", "--resume", str(run), "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    for name in TENSORS:
        a = load_file(str(full / "checkpoints" / ckpt(256) / name))
        b = load_file(str(run / "checkpoints" / ckpt(256) / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_a_train_that_fails_before_it_starts_leaves_no_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Without --run-dir a failed start leaves no ``runs/<time>-…/`` holding only ``.lock``; a
    directory the user named is theirs and stays. A malformed data file fails before any
    directory is made (the data is read first)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.csv").write_text("date,close\n2020-01-01,abc\n2020-01-02,def\n")
    assert cli.main(["train", "--set", "data.path=bad.csv", "--no-progress"]) == 2
    assert "non-numeric value 'abc'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    too_short = "data.bars=[0, 5, 6, 7]"  # its env fails once the run directory is made
    assert cli.main(["train", "--set", too_short, "--no-progress"]) == 2
    assert "has no step" in capsys.readouterr().err
    assert not any((tmp_path / "runs").iterdir())
    mine = tmp_path / "mine"
    assert cli.main(["train", "--set", too_short, "--run-dir", str(mine)]) == 2
    assert mine.is_dir()
