"""Stopping on SIGINT/SIGTERM (:mod:`riskppo.runs.interrupt`) with real signals, and the run
that has no periodic checkpoints: it saves after the current update."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from riskppo.cli.runner import Interrupted, train_run
from riskppo.config import Config
from riskppo.runs.interrupt import (
    Terminated,
    interrupt_signal,
    sigterm_as_interrupt,
    stop_on_signals,
)
from riskppo.runs.rundir import latest_checkpoint


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_is_recorded_and_the_second_interrupts(signum: int, capfd) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with stop_on_signals("stopping on {signal}") as stop:
        signal.raise_signal(signum)
        assert stop.signum == signum and stop.exit_code == 128 + signum
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert capfd.readouterr().err == f"stopping on {name}\n"
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored


def test_sigterm_raises_as_ctrl_c_does_while_asked() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_interrupt(), pytest.raises(KeyboardInterrupt) as caught:
        signal.raise_signal(signal.SIGTERM)
    assert isinstance(caught.value, Terminated) and interrupt_signal(caught.value) == 15
    assert interrupt_signal(KeyboardInterrupt()) == signal.SIGINT  # Ctrl-C's own
    assert signal.getsignal(signal.SIGTERM) == before  # restored


def test_no_handlers_outside_the_main_thread() -> None:
    """Inside a worker thread the process's handlers stay whatever they were (compared with
    the handler before, not with Python's default: an earlier test may have replaced it)."""
    seen: list[bool] = []
    before = signal.getsignal(signal.SIGINT)

    def work() -> None:
        with stop_on_signals("x") as stop:
            seen.append(signal.getsignal(signal.SIGINT) is before)
            seen.append(stop.requested)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [True, False]


def test_without_periodic_checkpoints_a_signal_saves_after_the_current_update(
    tmp_path: Path,
) -> None:
    cfg = Config.build(
        {
            "total_timesteps": 10**6,
            "env": {"id": "CartPole-v1", "n_envs": 2},
            "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 1},
            "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
            "checkpoint": {"every_updates": None},
        }
    )
    run = tmp_path / "run"
    run.mkdir()

    def interrupt_once_training() -> None:
        while not (run / "metrics.jsonl").exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_training, daemon=True).start()
    with pytest.raises(Interrupted) as stopped:
        train_run(cfg, run, progress_bar=False)
    step = int(latest_checkpoint(run).name.split("-")[1])
    assert 0 < step < 10**6 and stopped.value.exit_code == 130
    assert str(stopped.value) == (
        f"riskppo: stopped by Ctrl-C at step {step:,} of 1,000,000; saved "
        f"{run / 'checkpoints' / f'ckpt-{step:012d}'}; continue with: riskppo train --resume {run}"
    )
