"""A feed-forward policy (``policy.memory: false``) finds a planted edge out of sample and does
not memorise a random walk; the recurrent one memorises it (slow: about a minute each)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from riskppo import DistributionalPPO
from riskppo.config import Config, apply_overrides
from riskppo.config.bundled import resolve_config_path
from riskppo.envs.market.planted import ar_market
from riskppo.evaluation.backtest import backtest

pytestmark = pytest.mark.slow


def _train(tmp_path, phi: float, memory: bool) -> DistributionalPPO:
    """The shipped GOOGL agent, all its features, the pathwise term, 150,000 steps, on
    ``ar_market(3000, phi, seed=1)``."""
    df, _ = ar_market(3000, phi=phi, seed=1)
    path = tmp_path / "ar.csv"
    df.to_csv(path)
    cfg = apply_overrides(
        Config.from_yaml(resolve_config_path("trading_googl")),
        [f"data.path={path}", "data.dataset=null", "total_timesteps=150000",
         "ppo.pathwise_coef=1", f"policy.memory={str(memory).lower()}"],
    )  # fmt: skip
    model = DistributionalPPO(config=cfg)
    model.learn(cfg.total_timesteps)
    return model


def _sharpe(r: pd.Series) -> float:
    return float(r.mean() / r.std() * np.sqrt(252))


@pytest.mark.parametrize("memory", [False, True])
def test_a_random_walk_is_memorised_only_through_the_recurrent_state(tmp_path, memory):
    model = _train(tmp_path, 0.0, memory)
    frames = backtest(model, "train").frames
    agent = _sharpe(frames["agent"]["log_return"])
    full = _sharpe(frames["vol_target_buy_and_hold"]["log_return"])
    if memory:  # measured: 0.86 against 0.24 (docs/learnability.md)
        assert agent > full + 0.3, (agent, full)
    else:  # measured: 0.21 against 0.24
        assert agent < full + 0.15, (agent, full)


def test_the_feed_forward_agent_follows_a_planted_momentum_out_of_sample(tmp_path):
    model = _train(tmp_path, 0.15, False)
    df, planted = ar_market(3000, phi=0.15, seed=1)
    frame = backtest(model, "test").frames["agent"]
    last = pd.Series(planted.info, index=df.index).shift(1)
    corr = float(frame["signal"].corr(last.reindex(frame.index)))
    assert corr > 0.3, corr  # measured: 0.51 on the test rows
