"""A portfolio model's backtest: the agent and every skfolio baseline over the same test bars,
the baselines fitted on the training bars (an untrained model acts: no training here)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from riskppo.agent import DistributionalPPO
from riskppo.cli.main import load_config, preset_path
from riskppo.envs.portfolio.data import load_portfolio
from riskppo.evaluation.portfolio.backtest import (
    OVERLAY_SUFFIX,
    PortfolioBacktest,
    portfolio_backtest,
)
from riskppo.evaluation.portfolio.baselines import BASELINES, fit_baselines

SMALL = [
    "env.n_envs=1",
    "ppo.n_steps=64",
    "ppo.batch_size=64",
    "env.kwargs.symbols=[AAPL, KO, XOM]",
    "env.kwargs.features=[vret_1, vret_20]",
    "data.bars=[0, 1500, 1500, 1700]",
]


@pytest.fixture(scope="module")
def backtest(tmp_path_factory: pytest.TempPathFactory) -> PortfolioBacktest:
    cfg = load_config(str(preset_path("portfolio_sp20.yaml")), SMALL)
    run_dir: Path = tmp_path_factory.mktemp("bt")
    model = DistributionalPPO(config=cfg, run_dir=run_dir)
    try:
        return portfolio_backtest(model, "test")
    finally:
        model.close()


def test_every_strategy_on_the_same_bars(backtest: PortfolioBacktest) -> None:
    held = [f"{n}{OVERLAY_SUFFIX}" for n in BASELINES]  # the config has an overlay
    assert list(backtest.frames) == ["agent", *BASELINES, *held]
    agent = backtest.frames["agent"]
    assert len(agent) == 1700 - 1500 - 1 and backtest.test == (1500, 1700)
    for name, frame in backtest.frames.items():
        assert frame.index.equals(agent.index), name
        w = frame[[f"w_{s}" for s in ("AAPL", "KO", "XOM")]].to_numpy()
        np.testing.assert_allclose(frame["gross_exposure"], np.abs(w).sum(axis=1))
        assert (frame["gross_exposure"] <= 1.0 + 1e-9).all(), name
    assert agent["turnover"].iloc[0] == pytest.approx(agent["gross_exposure"].iloc[0])
    for name, frame in backtest.frames.items():  # long-only: the cost is the fee on turnover
        np.testing.assert_allclose(frame["costs"], 0.0005 * frame["turnover"], err_msg=name)


def test_baselines_fitted_on_the_training_bars(backtest: PortfolioBacktest) -> None:
    assert backtest.train == (0, 1500)
    close = load_portfolio(dataset="sp500", symbols=["AAPL", "KO", "XOM"]).close()
    hrp = fit_baselines(close, (0, 1500), ["hrp"])["hrp"]
    frame = backtest.frames["hrp"]
    w = frame[["w_AAPL", "w_KO", "w_XOM"]].to_numpy()
    np.testing.assert_allclose(w / w.sum(axis=1, keepdims=True), np.tile(hrp, (len(w), 1)))


def test_baselines_are_also_held_under_the_agents_overlay(backtest: PortfolioBacktest) -> None:
    """The same allocation, capped by the same overlay: never more exposure, less on the bars
    where the cap binds, and the same proportions between the assets."""
    assert backtest.overlay is not None
    syms = [f"w_{s}" for s in ("AAPL", "KO", "XOM")]
    for name in BASELINES:
        free, capped = backtest.frames[name], backtest.frames[f"{name}{OVERLAY_SUFFIX}"]
        assert (capped["gross_exposure"] <= free["gross_exposure"] + 1e-12).all(), name
        assert (capped["gross_exposure"] < free["gross_exposure"] - 1e-6).any(), name
        wf, wc = free[syms].to_numpy(), capped[syms].to_numpy()
        np.testing.assert_allclose(
            wc / wc.sum(axis=1, keepdims=True), wf / wf.sum(axis=1, keepdims=True), atol=1e-9
        )


def test_train_ends_in_a_report_and_backtest_writes_one_per_part(tmp_path: Path, capsys) -> None:
    """``riskppo train`` on the portfolio config ends with the test part's report against the
    baselines (both ways of holding them); ``riskppo backtest RUN --split val`` writes one for
    the validation part."""
    from riskppo import cli

    run = tmp_path / "run"
    small = [*SMALL[:-1], "data.bars=[0, 1300, 1500, 1700]", "total_timesteps=64"]
    sets = [a for s in small for a in ("--set", s)]
    assert cli.main(["train", "--config", "portfolio_sp20", *sets, "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "backtest report →" in out and "trial" in out  # the verdict line
    test = json.loads((run / "backtest_test" / "metrics.json").read_text())
    held = {f"{n}{OVERLAY_SUFFIX}" for n in BASELINES}
    assert set(test["metrics"]) == {"agent", *BASELINES, *held}
    assert test["best_baseline"] in {*BASELINES, *held}
    assert test["overlay"]["limit"] == -0.04 and test["oos_bars"] == 1700 - 1500 - 1
    for name in ("report.html", "record.csv", "equity.png", "weights.png", "cvar.png"):
        assert (run / "backtest_test" / name).stat().st_size > 0, name
    assert cli.main(["backtest", str(run), "--split", "val"]) == 0
    val = json.loads((run / "backtest_val" / "metrics.json").read_text())
    assert val["oos_bars"] == 1500 - 1300 - 1 and val["end"] < test["start"]
    assert "report:" in capsys.readouterr().out


def test_a_portfolio_backtest_is_counted_in_the_trial_ledger(tmp_path: Path, capsys) -> None:
    """Two configurations trained and judged on the same three stocks: the second verdict counts
    both (N = 2), as a single-asset backtest's does; ``riskppo backtest`` of the first run's
    test part counts both too and adds no second row for the same judgement; its validation
    part (bars no other judgement covers) is N = 1."""
    from riskppo import cli

    ledger = tmp_path / "ledger"
    small = [*SMALL[:-1], "data.bars=[0, 1300, 1500, 1700]"]
    verdicts = []
    for steps in (64, 128):
        sets = [a for s in [*small, f"total_timesteps={steps}"] for a in ("--set", s)]
        argv = ["train", "--config", "portfolio_sp20", *sets, "--ledger", str(ledger)]
        assert cli.main([*argv, "--run-dir", str(tmp_path / f"r{steps}")]) == 0
        verdicts.append(json.loads((tmp_path / f"r{steps}/backtest_test/metrics.json").read_text()))
    assert [m["trials"]["n_configs"] for m in verdicts] == [1, 2]
    assert [m["n_trials"] for m in verdicts] == [1, 2]
    assert "adjusted for N = 2 trials" in verdicts[1]["verdict"]["text"]
    assert "<h2>Trials</h2>" in (tmp_path / "r128/backtest_test/report.html").read_text()
    capsys.readouterr()
    for split, n in (("test", "N = 2 trials"), ("val", "N = 1 trial")):
        run = ["backtest", str(tmp_path / "r64"), "--split", split, "--ledger", str(ledger)]
        assert cli.main(run) == 0
        assert n in capsys.readouterr().out, split
    rows = [json.loads(line) for line in (ledger / "ledger.jsonl").read_text().splitlines()]
    assert [r["data_label"] for r in rows] == ["SP500[AAPL,KO,XOM]"] * 3
    assert len({r["config"] for r in rows}) == 2


def test_pbt_on_a_portfolio_ends_with_the_best_members_backtest(tmp_path: Path, capsys) -> None:
    """``riskppo pbt`` on the portfolio config ends, as on the trading env, with the best
    member's test backtest against the baselines, recorded in the trial ledger as one
    configuration (the search)."""
    from riskppo import cli

    small = [*SMALL[:-1], "data.bars=[0, 1300, 1500, 1700]", "total_timesteps=128"]
    small += ["pbt.population=2", "pbt.ready_updates=1", "pbt.workers=1"]
    sets = [a for s in small for a in ("--set", s)]
    ledger, run = tmp_path / "ledger", tmp_path / "pbt"
    argv = ["pbt", "--config", "portfolio_sp20", *sets, "--run-dir", str(run), "--no-progress"]
    assert cli.main([*argv, "--ledger", str(ledger)]) == 0
    assert "best member's test backtest report →" in capsys.readouterr().out
    best = Path(json.loads((run / "pbt_summary.json").read_text())["best_dir"])
    metrics = json.loads((best / "backtest_test" / "metrics.json").read_text())
    assert metrics["trials"]["n_configs"] == 1 and metrics["oos_bars"] == 1700 - 1500 - 1
    rows = [json.loads(line) for line in (ledger / "ledger.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["pbt"]
