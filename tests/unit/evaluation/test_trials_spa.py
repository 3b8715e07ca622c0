"""The test of superior predictive ability in the verdict's trials block: over the ledger's
configurations on the judged bars (a real ledger on disk), against the judged run's benchmark,
printed beside the Šidák-adjusted p; and the walk-forward seeds' spread line."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from riskppo.evaluation.trials import spa_entry, trial_lines, trials_block, trials_html
from riskppo.evaluation.verdict import statistics_block, verdict_lines
from riskppo.runs.ledger import Judged, record_trial
from riskppo.stats import superior_ability
from riskppo.walkforward.seeds import seed_line, seed_spread, seeds_entry

PPY = 252.0
N = 600
TIMES = pd.bdate_range("2021-01-01", periods=N)
ASSET = np.random.default_rng(0).standard_t(5, N) * 0.01 / math.sqrt(5 / 3) + 3e-4
BENCH = pd.Series(0.8 * ASSET, index=TIMES)  # the vol-targeted holder: 0.8 of the asset


def _agent(seed: int, edge: float = 0.0) -> pd.Series:
    """An agent holding 0.5–0.9 of the asset (correlated with the benchmark) plus ``edge``."""
    hold = 0.7 + 0.2 * np.sin(np.arange(N) / (5 + seed))
    return pd.Series(hold * ASSET + edge, index=TIMES)


def _judge(ledger, config: str, returns: pd.Series, seed: int = 0):
    judged = Judged(
        data="sha256:aa",
        data_label="prices.csv",
        config=config,
        kind="train",
        returns=returns,
        periods_per_year=PPY,
        run_dir=f"runs/{config}-s{seed}",
    )
    return record_trial(ledger, judged)


def test_spa_runs_over_the_ledgers_configurations_on_the_judged_bars(tmp_path):
    _judge(tmp_path, "cfgA" + "0" * 60, _agent(0))
    _judge(tmp_path, "cfgA" + "0" * 60, _agent(1), seed=1)  # a second seed of A
    _judge(tmp_path, "cfgB" + "0" * 60, _agent(2))
    trials = _judge(tmp_path, "cfgC" + "0" * 60, _agent(3, edge=8e-4))
    entry = spa_entry(trials, BENCH, PPY, p_sidak=0.2, benchmark_name="VT", seed=0)
    assert entry is not None and entry["n_configs"] == 3 and entry["n_bars"] == N
    # the matrix the ledger hands over: A's two seeds averaged bar by bar, B, C
    a = (_agent(0) + _agent(1)) / 2
    matrix = np.column_stack([a, _agent(2), _agent(3, edge=8e-4)])
    direct = superior_ability(BENCH.to_numpy(), matrix, PPY, n_resamples=1000, seed=0)
    assert entry["p"] == direct.p_consistent < 0.05
    assert entry["superior"] == ["cfgC" + "0" * 60]
    assert list(entry["sharpe_diff"].values()) == pytest.approx(direct.sharpe_diff, rel=1e-12)
    lines = trial_lines({**trials_block(trials, 1), "spa": entry})
    assert lines[-2].startswith(
        f"  SPA (Hansen 2005) over 3 configurations: p = {entry['p']:.2g} (Šidák: 0.2), H0: none "
        f"has a higher Sharpe ratio than VT on these {N} bars"
    )
    assert lines[-1] == "  StepM (Romano & Wolf 2005, familywise 5%): 1 beats it: cfgC000000"
    assert "StepM (Romano &amp; Wolf 2005" in trials_html({**trials_block(trials, 1), "spa": entry})


def test_no_edge_anywhere_is_no_rejection(tmp_path):
    for i, cfg in enumerate(("cfgA", "cfgB", "cfgC", "cfgD")):
        trials = _judge(tmp_path, cfg, _agent(i))
    entry = spa_entry(trials, BENCH, PPY, p_sidak=0.5, benchmark_name="VT")
    assert entry is not None and entry["p"] > 0.1 and entry["superior"] == []
    assert spa_lines_of(entry)[-1].endswith("familywise 5%): none beats it")


def spa_lines_of(entry):
    return trial_lines({"n_trials": 4, "ledger": "L", "n_configs": 4, "configs": [], "spa": entry})


def test_no_spa_with_one_configuration_or_other_bars(tmp_path):
    one = _judge(tmp_path / "one", "cfgA", _agent(0))
    assert spa_entry(one, BENCH, PPY, p_sidak=0.5, benchmark_name="VT") is None
    two = _judge(tmp_path / "two", "cfgA", _agent(0))
    two = _judge(tmp_path / "two", "cfgB", _agent(1))
    shifted = BENCH.set_axis(pd.bdate_range("2021-01-04", periods=N))  # other bars
    assert spa_entry(two, shifted, PPY, p_sidak=0.5, benchmark_name="VT") is None
    assert spa_entry(two, BENCH.iloc[1:], PPY, p_sidak=0.5, benchmark_name="VT") is None
    assert spa_entry(None, BENCH, PPY, p_sidak=0.5, benchmark_name="VT") is None
    assert spa_entry(two, BENCH, PPY, p_sidak=0.5, benchmark_name="VT") is not None


def _frames(agent: pd.Series) -> dict[str, pd.DataFrame]:
    ones = np.ones(N)
    frame = {
        "buy_and_hold": (ones, ones, ASSET),
        "vol_target_buy_and_hold": (0.8 * ones, ones, BENCH.to_numpy()),
        "agent": (0.7 * ones, 0.7 * ones, agent.to_numpy()),
    }
    return {
        name: pd.DataFrame(
            {"position": pos, "signal": sig, "log_return": r, "gross_return": r}, index=TIMES
        )
        for name, (pos, sig, r) in frame.items()
    }


def test_the_verdict_block_prints_spa_beside_sidak(tmp_path):
    _judge(tmp_path, "cfgA", _agent(0))
    trials = _judge(tmp_path, "cfgB", _agent(1))
    block = statistics_block(_frames(_agent(1)), PPY, fee=0.0, trials=trials)
    spa = block["trials"]["spa"]
    assert spa is not None and spa["n_configs"] == 2
    assert spa["p_sidak"] == block["verdict"]["p_adjusted"]
    assert spa["benchmark"] == block["stats"]["benchmark_name"]
    simple = np.expm1(BENCH)  # the verdict reads the accounts' simple returns
    expected = spa_entry(
        trials, simple, PPY, p_sidak=spa["p_sidak"], benchmark_name=spa["benchmark"], seed=0
    )
    assert spa == expected
    text = "\n".join(verdict_lines(block))
    assert "  SPA (Hansen 2005) over 2 configurations: p = " in text
    assert f"(Šidák: {block['verdict']['p_adjusted']:.2g})" in text
    alone = statistics_block(_frames(_agent(1)), PPY, fee=0.0)  # no ledger: no trials, no SPA
    assert alone["trials"] is None and "SPA" not in "\n".join(verdict_lines(alone))


def _block(agent: float | None, bench: float | None) -> dict:
    return {
        "stats": {
            "benchmark_name": "vol-targeted buy-and-hold",
            "agent": {"sharpe": {"estimate": agent}},
            "benchmark": {"sharpe": {"estimate": bench}},
        }
    }


def test_the_seeds_spread_line():
    records = {
        "seed 0": _block(0.41, 0.38),
        "seed 1": _block(0.52, 0.38),
        "seed 2": _block(0.30, 0.38),
        "mean of seeds": _block(0.47, 0.38),
    }
    spread = seed_spread(records, "mean of seeds")
    assert spread is not None and spread.agent == [0.41, 0.52, 0.30] and spread.above == 2
    assert spread.sd == pytest.approx(np.std([0.41, 0.52, 0.30], ddof=1))
    assert seed_line(seeds_entry(records, "mean of seeds")) == [
        "  seeds: agent Sharpe 0.41, 0.52, 0.30 (sd 0.11; mean record 0.47; vol-targeted "
        "buy-and-hold 0.38, above it: 2 of 3 seeds)"
    ]
    many = {f"seed {i}": _block(0.1 * i, 0.38) for i in range(10)}
    line = seed_line(seeds_entry({**many, "mean of seeds": _block(0.5, 0.38)}, "mean of seeds"))
    assert line[0].startswith("  seeds: agent Sharpe 0.00 to 0.90 over 10 seeds (sd 0.30;")
    assert seeds_entry({"seed 0": _block(0.4, 0.38)}, "mean of seeds") is None  # one seed
    assert seed_line(None) == []
