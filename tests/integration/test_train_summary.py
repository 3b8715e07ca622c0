"""The end of ``riskppo train`` on the trading env and ``riskppo eval`` of its run, as a user
sees them: the validation summary (agent against vol-targeted buy-and-hold, CVaR against the
limit, market share), no gradient alert on a healthy run, and one labelled deterministic episode
per split. Real processes, the bundled GOOGL data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SMALL = [
    "total_timesteps=512", "env.n_envs=2", "ppo.n_steps=128", "ppo.batch_size=256",
    "policy.lstm_hidden_size=16",
]  # fmt: skip


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riskppo.cli", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def trading_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    run = tmp_path_factory.mktemp("googl") / "run"
    sets = [x for s in SMALL for x in ("--set", s)]
    proc = cli("train", "--run-dir", str(run), "--no-progress", *sets)
    assert proc.returncode == 0, proc.stderr
    return run, proc.stdout + proc.stderr


def test_train_ends_with_a_validation_summary_and_no_gradient_alert(trading_run) -> None:
    run, out = trading_run
    lines = out.splitlines()
    (head,) = [i for i, line in enumerate(lines) if line.startswith("riskppo: validation split")]
    assert "of GOOGL" in lines[head] and "net of costs" in lines[head]
    block = "\n".join(lines[head : head + 6])
    assert "agent" in block and "| vol-targeted buy-and-hold" in block
    assert "Sharpe (annualised)" in block and "in the market" in block
    assert "CVaR 5% of 20-bar log returns" in block and "limit -4.00%: " in block
    assert "grad_norm_pre_clip" not in out  # the critics' routine norms are no alert
    assert json.loads((run / "eval.json").read_text())["n_episodes"] == 1.0


@pytest.mark.parametrize("split", ["val", "test"])
def test_eval_runs_one_labelled_episode_over_the_split(trading_run, split: str) -> None:
    run, _ = trading_run
    proc = cli("eval", str(run), "--split", split)
    assert proc.returncode == 0, proc.stderr
    rows = {
        k: v.strip()
        for k, v in (ln.strip().split("  ", 1) for ln in proc.stdout.splitlines()[1:-1])
    }
    assert (
        rows["split"].startswith(f"{split}: ")
        and "one episode over the whole period" in rows["split"]
    )
    assert rows["episodes"].strip() == "1, deterministic policy"
    assert rows["unit"].strip() == "log return of equity over the episode, net of costs"
    ev = json.loads((run / f"evaluation_{split}.json").read_text())
    assert ev["episodes"] == 1 and ev["same_episode"] is True


def test_train_and_backtest_print_the_verdict(trading_run) -> None:
    """The verdict reaches the terminal after `riskppo train` and `riskppo backtest`, not only
    the HTML report: the line, the Sharpe ratios it compares and the random-timing null, from
    the same statistics block the report shows (its statistics.json)."""
    run, out = trading_run
    block = json.loads((run / "backtest_test" / "statistics.json").read_text())
    for text in (out, cli("backtest", str(run)).stdout):
        lines = text.splitlines()
        (i,) = [i for i, line in enumerate(lines) if line.startswith("verdict on the test split")]
        assert lines[i].endswith(f" bars): {block['verdict']['text']}")
        assert lines[i + 1].startswith("  Sharpe ratio (annual): agent ")
        # the default agent trades under the risk overlay: so do its benchmark and its null
        assert ", VT B&H+overlay " in lines[i + 1] and ", supervised " in lines[i + 1]
        assert lines[i + 2].startswith("  random timing: the agent's Sharpe beats ")
        held = "% of 2000 smooth random signals in its band, held in its own env (sizing, "
        assert held in lines[i + 2]


def test_eval_defaults_to_the_validation_split_training_evaluated(trading_run) -> None:
    """`riskppo eval RUN` evaluates the split of training's eval.json (validation) and says so."""
    run, _ = trading_run
    proc = cli("eval", str(run))
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[0]
    assert head == "riskppo eval: riskppo/Trading-v0 on GOOGL, validation split (--split val)"
    ev = json.loads((run / "evaluation_val.json").read_text())
    trained = json.loads((run / "eval.json").read_text())
    assert ev["split"] == "val" and ev["return"]["mean"] == pytest.approx(trained["mean"])
