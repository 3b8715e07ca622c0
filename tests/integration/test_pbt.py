"""PBT member logic on real models, envs and checkpoint files (R-PBT-1..4).

Each test targets one failure mode of the audited implementation (design §6): a new lr that never
reaches the optimizer, normaliser statistics out of sync with copied weights, checkpoint
hyperparameters overwriting perturbed ones, a half-written checkpoint being exploited.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from riskppo.agent import DistributionalPPO
from riskppo.algo.loop import reset_carry
from riskppo.config import Config
from riskppo.envs.vec.build import find_normalizer
from riskppo.pbt import exploit
from riskppo.pbt.local import run_pbt_local
from riskppo.persist.checkpoint import CheckpointError, read_checkpoint, verify_checkpoint

BASE = {
    "env": {"id": "riskppo/MaskedVelocityCartPole-v1", "n_envs": 2, "normalize_obs": True},
    "ppo": {"n_steps": 16, "batch_size": 32, "bptt_len": 8, "n_epochs": 2},
    "policy": {"lstm_hidden_size": 16, "net_arch": [16]},
    "critic": {"n_quantiles": 8},
    "risk": {"cvar_alpha": 0.25},
}
NEW = {"ppo.learning_rate": 5e-4, "ppo.ent_coef": 0.02, "ppo.clip_range": 0.15}


def make(seed: int, lr: float, **extra: object) -> DistributionalPPO:
    cfg = json.loads(json.dumps(BASE))
    cfg["seed"] = seed
    cfg["ppo"]["learning_rate"] = lr
    cfg["ppo"].update(extra)
    return DistributionalPPO(config=cfg)


@pytest.fixture
def source_ckpt(tmp_path: Path) -> Path:
    """A source member trained 3 updates at lr 1e-3, saved: its config holds *its* values."""
    src = make(seed=1, lr=1e-3, ent_coef=0.001, clip_range=0.3)
    src.learn(96)
    path = src.save(tmp_path / "source")
    src.close()
    return path


def state_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("strategy", ["copy", "reset"])
def test_exploit_applies_perturbed_hyperparams_and_syncs_statistics(
    source_ckpt: Path, strategy: str
) -> None:
    target = make(seed=2, lr=3e-4)
    target.learn(64)
    applied = exploit(target, source_ckpt, NEW, strategy)  # type: ignore[arg-type]
    ck = read_checkpoint(source_ckpt)

    # the perturbed values, not the checkpoint's (lr 1e-3, ent 0.001, clip 0.3)
    assert ck.config.ppo.learning_rate == 1e-3
    assert applied == 5e-4
    assert all(g["lr"] == 5e-4 for g in target.optimizer.param_groups)
    assert target.config.ppo.learning_rate == 5e-4
    assert target.config.ppo.clip_range == 0.15
    assert target.config.ppo.ent_coef == 0.02 and target.state.entropy.coef == 0.02

    # weights and normalisation statistics are the source's
    assert state_equal(target.policy.state_dict(), ck.tensors["model.safetensors"])
    rms = find_normalizer(target.env).obs_rms  # type: ignore[arg-type]
    norm = ck.tensors["normalizer.safetensors"]
    np.testing.assert_array_equal(rms.mean, norm["obs/mean"].numpy())
    np.testing.assert_array_equal(rms.var, norm["obs/var"].numpy())
    assert rms.count == float(norm["obs/count"])
    assert torch.equal(target.state.scaling.moments.mean, ck.training.scaling.moments.mean)
    assert torch.equal(target.state.scaling.moments.var, ck.training.scaling.moments.var)
    assert target.state.counters.n_updates == ck.training.counters.n_updates

    # optimizer: the source's Adam moments (copy) or none yet (reset)
    moments = [s["exp_avg"] for s in target.optimizer.state.values()]
    if strategy == "copy":
        src_opt = ck.tensors["optimizer.safetensors"]
        src_moments = [v for k, v in src_opt.items() if k.endswith("/exp_avg")]
        assert len(moments) == len(src_moments) > 0
        assert sum(float(m.abs().sum()) for m in moments) == pytest.approx(
            sum(float(m.abs().sum()) for m in src_moments)
        )
    else:
        assert moments == []

    # the new lr survives the next update (the lr schedule reads the updated config)
    target.learn(32, reset_num_timesteps=False)
    assert all(g["lr"] == 5e-4 for g in target.optimizer.param_groups)
    assert target.monitor is not None and target.monitor.latest["train/learning_rate"] == 5e-4
    target.close()


def test_exploit_resets_recurrent_state_and_episodes(source_ckpt: Path) -> None:
    target = make(seed=2, lr=3e-4)
    target.learn(64)
    target.learn(32, reset_num_timesteps=False)  # continuing: carried, non-zero state
    carry = target.state.carry
    assert carry is not None
    assert carry.state.pi.h.abs().sum() > 0 and not carry.episode_start.all()

    exploit(target, source_ckpt, NEW)
    assert target.state.carry is None  # the next update starts from reset envs
    fresh = reset_carry(target.learner(), target.state).carry  # what that update starts from
    assert fresh is not None
    assert torch.count_nonzero(fresh.state.pi.h) == 0 and fresh.episode_start.all()
    target.learn(32, reset_num_timesteps=False)
    target.close()


def test_exploit_without_lr_warns_and_keeps_current(source_ckpt: Path) -> None:
    target = make(seed=2, lr=3e-4)
    with pytest.warns(UserWarning, match="no ppo.learning_rate.*keeping.*0.0003"):
        applied = exploit(target, source_ckpt, {"ppo.ent_coef": 0.02})
    assert applied == 3e-4
    assert all(g["lr"] == 3e-4 for g in target.optimizer.param_groups)
    assert target.config.ppo.learning_rate == 3e-4  # not the source's 1e-3
    target.close()


def test_exploit_refuses_other_architecture(source_ckpt: Path) -> None:
    cfg = json.loads(json.dumps(BASE))
    cfg["policy"]["lstm_hidden_size"] = 8
    target = DistributionalPPO(config=cfg)
    with pytest.raises(CheckpointError, match="policy settings differ"):
        exploit(target, source_ckpt, NEW)
    target.close()


def test_checkpoint_being_written_is_never_read(source_ckpt: Path, tmp_path: Path) -> None:
    target = make(seed=2, lr=3e-4)
    before = {k: v.clone() for k, v in target.policy.state_dict().items()}
    # a writer that has written some files but not yet the manifest
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("config.json", "state.json", "model.safetensors"):
        shutil.copy(source_ckpt / name, partial / name)
    with pytest.raises(CheckpointError, match=r"manifest\.json missing"):
        exploit(target, partial, NEW)
    # ... or has rewritten the weights in place while the manifest still describes the old ones
    shutil.copy(source_ckpt / "manifest.json", partial / "manifest.json")
    with pytest.raises(CheckpointError, match="listed in the manifest is missing"):
        exploit(target, partial, NEW)
    assert state_equal(target.policy.state_dict(), before)  # nothing was half-applied
    target.close()


def test_concurrent_rewrites_yield_whole_versions_or_errors(tmp_path: Path) -> None:
    """A naive writer overwrites a checkpoint's files one by one, over and over, while a reader
    loads it: every read that succeeds is one whole version (weights and counters agree)."""
    versions = []
    model = make(seed=5, lr=1e-3)
    for k in range(3):
        with torch.no_grad():
            for p in model.policy.parameters():
                p.fill_(float(k))
        model.state = model.state.with_counters(num_timesteps=1000 * k)
        versions.append(model.save(tmp_path / f"v{k}"))
    model.close()
    live = tmp_path / "live"
    shutil.copytree(versions[0], live)
    stop = threading.Event()

    def writer() -> None:
        rng = np.random.default_rng(0)
        while not stop.is_set():
            src = versions[int(rng.integers(3))]
            names = sorted(p.name for p in src.iterdir())
            for i in rng.permutation(len(names)):
                shutil.copyfile(src / names[i], live / names[i])

    thread = threading.Thread(target=writer)
    thread.start()
    ok = errors = 0
    try:
        for _ in range(5000):
            if ok >= 10 and errors >= 10:
                break
            try:
                ck = read_checkpoint(live)
            except CheckpointError:
                errors += 1
                continue
            ok += 1
            k = ck.training.counters.num_timesteps // 1000
            weights = ck.tensors["model.safetensors"]
            assert all(torch.all(v == float(k)) for n, v in weights.items() if "weight" in n)
    finally:
        stop.set()
        thread.join()
    assert ok >= 10 and errors >= 10  # the race did happen; torn reads were caught


def test_local_pbt_smoke_run_writes_the_audit_trail(tmp_path: Path) -> None:
    """`configs/pbt_smoke.yaml`, as shipped, on 2 worker processes: exploits happen and every
    history line is true to the files it names."""
    cfg = Config.from_yaml(Path(__file__).parents[2] / "riskppo/configs/pbt_smoke.yaml")
    cfg.checkpoint.keep_last = 10  # keep every source checkpoint, to compare with
    run = tmp_path / "pbt"
    summary = run_pbt_local(cfg, run, progress_bar=False)
    history = [json.loads(x) for x in (run / "pbt_history.jsonl").read_text().splitlines()]
    assert summary["n_exploits"] == len(history) >= 1
    keys = {"member", "step", "source", "old_hyperparams", "new_hyperparams", "applied_lr"}
    keys |= {"source_checkpoint", "checkpoint_after"}
    for ex in history:
        assert keys <= ex.keys()
        assert ex["applied_lr"] == ex["new_hyperparams"]["ppo.learning_rate"]
        assert ex["old_hyperparams"] != ex["new_hyperparams"]
        for name, value in ex["new_hyperparams"].items():
            spec = cfg.pbt.hyperparams[name]
            assert spec.low <= value <= spec.high
        after, source = (
            read_checkpoint(Path(ex["checkpoint_after"])),
            read_checkpoint(Path(ex["source_checkpoint"])),
        )
        assert state_equal(after.tensors["model.safetensors"], source.tensors["model.safetensors"])
        assert after.config.ppo.learning_rate == ex["new_hyperparams"]["ppo.learning_rate"]
        assert after.config.ppo.clip_range == ex["new_hyperparams"]["ppo.clip_range"]
        norm_a, norm_s = (
            after.tensors["normalizer.safetensors"],
            source.tensors["normalizer.safetensors"],
        )
        assert state_equal(norm_a, norm_s)
        assert after.training.scaling == source.training.scaling  # return statistics (PopArt)
    members = [json.loads(x) for x in (run / "pbt_members.jsonl").read_text().splitlines()]
    assert len(members) == cfg.pbt.population * summary["rounds"]
    best = Path(summary["best_dir"])
    verify_checkpoint(Path(summary["best_checkpoint"]))
    assert (best / "config.yaml").is_file() and (best / "metrics.jsonl").is_file()
    assert (run / "pbt_summary.png").stat().st_size > 10_000


def test_trading_member_score_is_constrained_by_the_validation_backtest() -> None:
    """R-PBT-4 on a real model: the score comes from the validation backtest's Sharpe, horizon
    CVaR and market share; an unmeetable limit makes the member infeasible (below -1000)."""
    from riskppo.config import PBTConfig
    from riskppo.evaluation.backtest import backtest
    from riskppo.pbt.member import INFEASIBLE_BASE, constraint_violation, member_score

    model = DistributionalPPO(
        config={
            "seed": 0,
            "env": {"id": "riskppo/Trading-v0", "n_envs": 1},
            "ppo": {"n_steps": 16, "batch_size": 16, "bptt_len": 8},
            "policy": {"lstm_hidden_size": 8},
            "data": {"dataset": "googl"},
            "risk": {"cvar_horizon": 20, "cvar_limit": -0.06},
        }
    )
    try:
        agent = backtest(model, "val").metrics["agent"]
        free = PBTConfig(min_market_share=0.0, selection_cvar_limit=-1e9)
        score, details = member_score(model, free)
        assert details["feasible"] == 1.0 and details["violation"] == 0.0
        assert score == pytest.approx(max(agent.sharpe or -500.0, -500.0))
        assert details["val_market_share"] == agent.market_share
        assert details["val_cvar_horizon"] == agent.cvar_horizon
        strict = PBTConfig(min_market_share=0.0, selection_cvar_limit=0.5)  # CVaR >= +50%
        score, details = member_score(model, strict)
        expected = constraint_violation(agent.cvar_horizon, 0.5, agent.market_share, 0.0)
        assert details["feasible"] == 0.0 and details["violation"] == pytest.approx(expected)
        assert score == pytest.approx(INFEASIBLE_BASE - expected) and np.isfinite(score)
        # None: the model config's risk.cvar_limit
        _, details = member_score(model, PBTConfig(min_market_share=0.0))
        assert details["selection_cvar_limit"] == -0.06
    finally:
        model.close()


def test_portfolio_member_score_is_constrained_like_trading() -> None:
    """``pbt.metric: auto`` on the portfolio env ranks as on the trading env: the validation
    record's Sharpe among feasible members (horizon CVaR >= the limit, in the market), every
    infeasible member below them (it was the unconstrained mean evaluation return)."""
    from riskppo.cli.main import load_config, preset_path
    from riskppo.config import PBTConfig
    from riskppo.pbt.member import (
        INFEASIBLE_BASE,
        constraint_violation,
        member_score,
        resolve_metric,
        validation_metrics,
    )

    sets = [
        "env.n_envs=1",
        "ppo.n_steps=64",
        "ppo.batch_size=64",
        "data.bars=[0, 1300, 1500, 1700]",
    ]
    sets += ["env.kwargs.symbols=[AAPL, KO, XOM]", "env.kwargs.features=[vret_1, vret_20]"]
    cfg = load_config(str(preset_path("portfolio_sp20.yaml")), sets)
    assert resolve_metric(cfg) == "sharpe"
    model = DistributionalPPO(config=cfg)
    try:
        agent = validation_metrics(model)
        assert agent["n_bars"] == 1500 - 1300 - 1  # the validation bars, as the trading backtest
        free = PBTConfig(min_market_share=0.0, selection_cvar_limit=-1e9)
        score, details = member_score(model, free)
        assert details["feasible"] == 1.0 and score == pytest.approx(agent["sharpe"])
        strict = PBTConfig(min_market_share=0.0, selection_cvar_limit=0.5)  # CVaR >= +50%
        score, details = member_score(model, strict)
        expected = constraint_violation(agent["cvar_horizon"], 0.5, agent["market_share"], 0.0)
        assert details["feasible"] == 0.0 and details["violation"] == pytest.approx(expected)
        assert score == pytest.approx(INFEASIBLE_BASE - expected)
    finally:
        model.close()
