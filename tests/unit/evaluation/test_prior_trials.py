"""A config's ``prior_trials``: configurations judged on a market before the config was chosen,
which no trial ledger can know — the verdict's N adds them on that market only, and they do not
make the config another configuration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskppo.config import Config, ConfigError
from riskppo.evaluation.trials import TrialSpec, judge_trials, trial_lines, trials_block
from riskppo.evaluation.verdict import statistics_block
from riskppo.runs.ledger import config_hash

ROOT = Path(__file__).parents[3]
N = 400


def _returns(seed: int) -> pd.Series:
    idx = pd.date_range("2020-01-01", periods=N, freq="B", name="timestamp")
    return pd.Series(np.random.default_rng(seed).normal(4e-4, 0.01, N), index=idx)


def _googl(prior: dict[str, int]) -> Config:
    cfg = Config.from_yaml(ROOT / "riskppo/configs/trading_googl.yaml")
    return cfg.model_copy(update={"prior_trials": prior})


@pytest.mark.parametrize(
    ("name", "prior"),
    [("trading_googl.yaml", {"GOOGL": 10}), ("trading_eurusd.yaml", {"EURUSD": 5})],
)
def test_the_shipped_trading_configs_carry_their_prior_trials(name: str, prior: dict) -> None:
    """The configurations judged on each bundled market while its defaults were developed (the
    last ones added when the remembered risk aversion (both markets) and the 12-month return
    (GOOGL) replaced defaults that had been judged on those markets' walk-forwards)."""
    assert Config.from_yaml(ROOT / "riskppo/configs" / name).prior_trials == prior


def test_n_adds_the_prior_trials_on_their_market_only(tmp_path: Path) -> None:
    spec = TrialSpec(ledger=tmp_path / "ledger", kind="train")
    trials = judge_trials(spec, _returns(0), 252, tmp_path / "a", _googl({"GOOGL": 5}))
    assert trials is not None and trials.n_configs == 1 and trials.prior == 5
    block = trials_block(trials, 1)
    assert block is not None and block["n_trials"] == 6 and block["prior_trials"] == 5
    assert "N = 6: 1 configuration(s) judged on this data" in trial_lines(block)[0]
    assert "+ 5 before it (prior_trials)" in trial_lines(block)[0]
    assert trials_block(trials, 9)["n_trials"] == 9  # --trials above it still wins
    other = judge_trials(spec, _returns(1), 252, tmp_path / "b", _googl({"EURUSD": 5}))
    assert other is not None and other.prior == 0  # another market's count does not apply


def test_the_verdict_is_adjusted_for_them(tmp_path: Path) -> None:
    r = _returns(2)
    frames = {
        name: pd.DataFrame(
            {"position": pos, "signal": 1.0, "log_return": x, "gross_return": x}, index=r.index
        )
        for name, pos, x in (
            ("buy_and_hold", 1.0, r),
            ("vol_target_buy_and_hold", 1.0, r),
            ("agent", 1.0, r + 3e-4),
        )
    }
    spec = TrialSpec(ledger=tmp_path / "ledger", kind="train")
    cfg = _googl({"GOOGL": 5})
    trials = judge_trials(spec, frames["agent"]["log_return"], 252, tmp_path / "a", cfg)
    block = statistics_block(frames, 252, fee=0.0, trials=trials)
    assert block["trials"]["n_trials"] == 6
    alone = statistics_block(frames, 252, fee=0.0)  # N = 1: the same test, unadjusted
    p = alone["verdict"]["p_adjusted"]
    assert block["verdict"]["p_adjusted"] == pytest.approx(1 - (1 - p) ** 6)
    assert "adjusted for N = 6" in block["verdict"]["text"]


def test_prior_trials_do_not_change_the_configuration() -> None:
    assert config_hash(_googl({"GOOGL": 5}), "train", {}) == config_hash(_googl({}), "train", {})


def test_a_negative_count_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="prior_trials"):
        Config.build({"prior_trials": {"GOOGL": -1}})
