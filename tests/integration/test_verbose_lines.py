"""``verbose=1`` (Python) and ``monitor.verbose: 1`` (config, ``--set monitor.verbose=1``) print one
line per ``log_interval`` updates, as docs/config.md says; ``verbose=0`` prints nothing while
training. Tiny real CartPole runs, stdout captured."""

from __future__ import annotations

import re
from typing import Any

import pytest

from riskppo import DistributionalPPO

TINY: dict[str, Any] = {"n_envs": 2, "n_steps": 16, "batch_size": 32, "lstm_hidden_size": 8}
LINE = re.compile(
    r"update (\d+)  steps ([\d,]+)  fps [\d,]+  ep_rew_mean \S+  ep_len_mean \S+  loss \S+  "
    r"entropy \S+  approx_kl \S+  clip_fraction \S+  explained_variance \S+"
)


def _update_lines(out: str) -> list[tuple[int, int]]:
    """``(update, steps)`` of each update line printed."""
    return [
        (int(m[1]), int(m[2].replace(",", "")))
        for line in out.splitlines()
        if (m := LINE.match(line))
    ]


def test_verbose_1_prints_an_update_line_every_log_interval_updates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: only "no alerts" at the end."""
    model = DistributionalPPO("CartPole-v1", verbose=1, seed=0, **TINY)
    model.learn(128, log_interval=2)  # 4 updates of 32 steps
    out = capsys.readouterr().out
    assert _update_lines(out) == [(2, 64), (4, 128)]
    assert out.splitlines()[-1] == "no alerts"
    model.close()


def test_monitor_verbose_in_the_config_prints_them_too(capsys: pytest.CaptureFixture[str]) -> None:
    config = {"monitor": {"verbose": 1, "log_interval": 1}}
    model = DistributionalPPO("CartPole-v1", config=config, seed=0, **TINY)
    model.learn(64)
    assert _update_lines(capsys.readouterr().out) == [(1, 32), (2, 64)]
    model.close()


def test_verbose_0_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    model = DistributionalPPO("CartPole-v1", seed=0, **TINY)
    model.learn(64)
    assert capsys.readouterr().out == ""
    model.close()


def test_riskppo_train_verbose_prints_the_alert_summary_once(tmp_path) -> None:
    import subprocess
    import sys

    config = tmp_path / "tiny.yaml"
    config.write_text(
        "seed: 0\ntotal_timesteps: 64\nenv: {id: CartPole-v1, n_envs: 2}\n"
        "ppo: {n_steps: 16, batch_size: 32, bptt_len: 8, n_epochs: 1}\n"
        "policy: {lstm_hidden_size: 8}\nmonitor: {verbose: 1, log_interval: 1}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "riskppo.cli", "train", "--config", str(config), "--run-dir",
         str(tmp_path / "run"), "--no-progress"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _update_lines(proc.stdout), proc.stdout
    assert proc.stdout.count("no alerts") == 1, proc.stdout
