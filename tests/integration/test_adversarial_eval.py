"""R-ADV end to end: SA-PPO training on a real env, and `riskppo eval --attack` on real runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from riskppo.agent import DistributionalPPO
from riskppo.cli import main
from riskppo.cli.runner import train_run
from riskppo.config import Config

SMALL = {
    "env": {"n_envs": 2, "normalize_obs": True},
    "ppo": {"n_steps": 32, "batch_size": 64, "n_epochs": 2},
    "policy": {"lstm_hidden_size": 16, "net_arch": [16]},
    "critic": {"n_quantiles": 8},
    "risk": {"cvar_alpha": 0.25},
}


def small(env_id: str, **extra: object) -> Config:
    data = json.loads(json.dumps(SMALL))
    data["env"]["id"] = env_id
    data.update(extra)
    return Config.build(data)


def test_sa_training_logs_the_regulariser_and_is_deterministic() -> None:
    cfg = small(
        "riskppo/MaskedVelocityPendulum-v1",
        adversarial={"kappa": 0.5, "eps": 0.1, "eps_warmup_updates": 2, "pgd_steps": 2},
    )
    weights = []
    for _ in range(2):
        model = DistributionalPPO(config=cfg)
        model.learn(256)
        assert model.monitor is not None
        assert model.monitor.latest["train/sa_kl"] > 0
        assert model.monitor.latest["train/sa_eps"] == pytest.approx(0.1)
        weights.append({k: v.clone() for k, v in model.policy.state_dict().items()})
        model.close()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_sa_regulariser_changes_the_update() -> None:
    """The regulariser enters the loss: with κ > 0 the weights differ from κ = 0 after one update
    (same seed, same rollout)."""
    out = []
    for kappa in (0.0, 1.0):
        model = DistributionalPPO(
            config=small("CartPole-v1", adversarial={"kappa": kappa, "eps": 0.2})
        )
        model.learn(64)
        out.append(model.policy.action_head.net.weight.detach().clone())
        model.close()
    assert not torch.equal(out[0], out[1])


def test_eval_attack_writes_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "cartpole"
    train_run(small("CartPole-v1", total_timesteps=128), run, progress_bar=False)
    argv = ["eval", str(run), "--attack", "random,pgd,critic", "--eps", "0.05,0.2"]
    assert main([*argv, "--episodes", "2", "--pgd-steps", "2"]) == 0
    rows = json.loads((run / "robustness" / "robustness.json").read_text())
    assert [(r["attack"], r["eps"]) for r in rows] == [
        ("none", 0.0),
        *((a, e) for a in ("random", "pgd", "critic") for e in (0.05, 0.2)),
    ]
    assert all(math.isfinite(r["mean"]) and r["n_episodes"] == 2 for r in rows)
    assert (run / "robustness" / "robustness.png").stat().st_size > 5_000
    assert "pgd" in capsys.readouterr().out


def test_eval_attack_on_a_trading_run_reports_sharpe_and_cvar(tmp_path: Path) -> None:
    run = tmp_path / "trading"
    cfg = small("riskppo/Trading-v0", total_timesteps=128)
    train_run(cfg, run, progress_bar=False)
    assert main(["eval", str(run), "--attack", "pgd", "--eps", "0.1", "--episodes", "1"]) == 0
    rows = json.loads((run / "robustness" / "robustness.json").read_text())
    assert len(rows) == 2
    for key in ("sharpe", "cvar_95", "max_drawdown", "annual_return"):
        assert key in rows[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attack", "fgsm"], "unknown attack"),
        (["--attack", "pgd", "--eps", "0.1,abc"], "comma-separated numbers"),
        (["--attack", "pgd", "--eps", "-0.1"], "must be positive"),
    ],
)
def test_eval_attack_bad_input_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], message: str
) -> None:
    assert main(["eval", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err
