"""The trading agent finds a planted edge with the pathwise term, and not without it; with a
feed-forward policy it follows the edge out of sample and does not memorise a random walk, which
the recurrent one does; the shipped trading config turns a planted momentum into most of what the
one-day rule expects, and reads a slow bull/bear regime through the 12-month return (slow:
about a minute each)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from riskppo import DistributionalPPO
from riskppo.config import Config, apply_overrides
from riskppo.config.bundled import resolve_config_path
from riskppo.envs.market.planted import Planted, ar_market, regime_market
from riskppo.evaluation.backtest import _agent_env, backtest
from riskppo.evaluation.baselines import run_policy

pytestmark = pytest.mark.slow

# The settings the first three tests were measured with, before the trading config's defaults
# were chosen on the planted suite (all twelve features, the overlay clipping the position, the
# mean return's slope, exploration sd 0.6, a hidden layer after the encoder). Under today's
# defaults the recurrent agent memorises a random walk's training bars less (Sharpe 0.58-0.60
# against 0.31 for vol-targeted buy-and-hold, short of the margin below).
TWELVE = (
    "env.kwargs.features=[vret_1,vret_5,vret_20,vret_60,vret_250,macd_8_24,macd_16_48,"
    "macd_32_96,rsi_14,ewmvol_20,ewmvol_60,hl_range]"
)
AS_MEASURED = [
    TWELVE,
    "env.kwargs.overlay.mode=clip",
    "ppo.pathwise_utility=return",
    "policy.log_std_init=-0.5",
    "policy.net_arch=[64]",
]


def _trained(
    tmp_path,
    market: float | tuple[pd.DataFrame, Planted],
    sets: list[str],
    config: str = "trading_googl",
) -> tuple[DistributionalPPO, pd.Series, pd.Series]:
    """A shipped agent (GOOGL's unless ``config`` names another) trained 150,000 steps with
    ``sets`` on ``market``: a planted frame, or a float ``phi`` for ``ar_market(3000, phi,
    seed=1)``. The model, the planted information and the planted ``E[r_t | past]``, each on the
    rows of a strategy frame (a row is the bar whose return the position decided at the previous
    bar earns)."""
    df, planted = ar_market(3000, phi=market, seed=1) if isinstance(market, float) else market
    path = tmp_path / "market.csv"
    df.to_csv(path)
    cfg = apply_overrides(
        Config.from_yaml(resolve_config_path(config)),
        [f"data.path={path}", "data.dataset=null", "total_timesteps=150000", *sets],
    )
    model = DistributionalPPO(config=cfg)
    model.learn(cfg.total_timesteps)
    last = pd.Series(planted.info, index=df.index).shift(1)
    return model, last, pd.Series(planted.cond_mean, index=df.index).shift(1)


def _signal_vs_planted(tmp_path, pathwise: float) -> tuple[float, float]:
    """The agent seeing only the last vol-scaled return, on an AR(1) market with phi = 0.15:
    (correlation of its signal with the last log return, signal sd) on its training bars."""
    sets = [*AS_MEASURED, "env.kwargs.features=[vret_1]", f"ppo.pathwise_coef={pathwise}"]
    model, last, _ = _trained(tmp_path, 0.15, sets)
    frame = backtest(model, "train").frames["agent"]
    return float(frame["signal"].corr(last.reindex(frame.index))), float(np.std(frame["signal"]))


@pytest.mark.parametrize("pathwise", [1.0, 0.0])
def test_the_agent_follows_a_planted_momentum_only_with_the_pathwise_term(tmp_path, pathwise):
    corr, sd = _signal_vs_planted(tmp_path, pathwise)
    if pathwise:
        assert corr > 0.4 and sd > 0.1, (corr, sd)
    else:  # the score function alone: a signal that hardly moves (measured corr 0.03, sd 0.01)
        assert sd < 0.1, (corr, sd)


def _sharpe(r: pd.Series) -> float:
    return float(r.mean() / r.std() * np.sqrt(252))


@pytest.mark.parametrize("memory", [False, True])
def test_a_random_walk_is_memorised_only_through_the_recurrent_state(tmp_path, memory):
    """All twelve features and the pathwise term on a random walk: the recurrent agent fits its
    training period, the feed-forward one (``policy.memory: false``) does not."""
    sets = [*AS_MEASURED, "ppo.pathwise_coef=1", f"policy.memory={str(memory).lower()}"]
    frames = backtest(_trained(tmp_path, 0.0, sets)[0], "train").frames
    agent = _sharpe(frames["agent"]["log_return"])
    full = _sharpe(frames["vol_target_buy_and_hold"]["log_return"])
    if memory:  # measured: 0.86 against 0.24 (docs/learnability.md)
        assert agent > full + 0.3, (agent, full)
    else:  # measured: 0.21 against 0.24
        assert agent < full + 0.15, (agent, full)


def test_the_feed_forward_agent_follows_a_planted_momentum_out_of_sample(tmp_path):
    sets = [*AS_MEASURED, "ppo.pathwise_coef=1", "policy.memory=false"]
    model, last, _ = _trained(tmp_path, 0.15, sets)
    frame = backtest(model, "test").frames["agent"]
    corr = float(frame["signal"].corr(last.reindex(frame.index)))
    assert corr > 0.3, corr  # measured: 0.51 on the test rows


def _expected_sharpe(frame: pd.DataFrame, expected: pd.Series) -> float:
    """``mean(position_t · E[r_t | past] − costs_t) / sd(net log return)``, annualised: what the
    positions earn on average over the market's paths, the realised noise taken out."""
    edge = frame["position"] * expected.reindex(frame.index) - frame["costs"]
    return float(edge.mean() / frame["log_return"].std() * np.sqrt(252))


def _rule_share_and_bound(model: DistributionalPPO, last: pd.Series, expected: pd.Series):
    """On the test rows: the agent's expected advantage over the full signal (in its own env) as
    a share of the one-day momentum rule's in the same band, and the share of bars where its
    signal sits at a bound of the band."""
    _, env = _agent_env(model.config, "test")
    lo, hi = env.signal_range
    full = run_policy(env, lambda bar: hi)
    rule = run_policy(env, lambda bar: hi if last.iloc[bar + 1] > 0 else lo)  # decided at bar
    agent = backtest(model, "test").frames["agent"]
    base = _expected_sharpe(full, expected)
    share = (_expected_sharpe(agent, expected) - base) / (_expected_sharpe(rule, expected) - base)
    signal = agent["signal"]
    return share, float(((signal <= lo + 1e-6) | (signal >= hi - 1e-6)).mean())


def test_the_shipped_trading_config_captures_most_of_a_planted_momentum(tmp_path):
    """The shipped trading config as it is, on ``ar_market(3000, 0.2, seed=1)``: on the test
    rows its expected advantage over the full signal (in its own env) is at least 70% of the
    one-day momentum rule's. Measured (with the former exploration, log_std_init -0.5): 79%
    (0.63 of 0.80); with all twelve features 62%, with the overlay clipping the position instead
    of scaling the signal 63%, without the pathwise term 47% (each fails here). Its signal sits
    at a bound of the band on at most 40% of those rows."""
    share, at_bound = _rule_share_and_bound(*_trained(tmp_path, 0.2, []))
    assert share > 0.7, share
    # Sized for the account it trades: inside its band on most test bars. Measured: at a bound
    # on 20% of them; with the former exploration (policy.log_std_init -0.5) 67%, all-or-floor.
    assert at_bound < 0.4, at_bound


def test_the_shipped_eurusd_config_captures_most_of_a_planted_momentum(tmp_path):
    """The EURUSD config (a long–short band, no core) on the same file: at least 70% of the
    long–short one-day momentum rule's expected advantage. Measured: 131% (at a bound of the
    band on 11% of the test bars); with its former learner settings −28% (fails here)."""
    share, _ = _rule_share_and_bound(*_trained(tmp_path, 0.2, [], "trading_eurusd"))
    assert share > 0.7, share


def test_the_shipped_trading_config_reads_a_slow_regime_through_the_12_month_return(tmp_path):
    """Four files of ``regime_market(6000, duration=250)`` (seeds 5-8): a drift of about one
    standard deviation over a whole regime, which a 60-bar window sees a quarter of. On its
    training rows the shipped agent's positions expect, on average over the files, at least 0.27
    of annual Sharpe ratio more than holding the full signal in its own env. Measured: 0.31 (0.40,
    0.13, 0.34, 0.36); without ``vret_250`` among the features 0.23 (0.29, 0.10, 0.23, 0.29: lower
    on every file; fails here). The walk-forward gain on the suite's regime files:
    docs/learnability.md."""
    gains = []
    for seed in (5, 6, 7, 8):
        market = regime_market(6000, duration=250, seed=seed)
        model, _, expected = _trained(tmp_path, market, [])
        _, env = _agent_env(model.config, "train")
        top = env.signal_range[1]
        full = run_policy(env, lambda bar, top=top: top)
        agent = backtest(model, "train").frames["agent"]
        gains.append(_expected_sharpe(agent, expected) - _expected_sharpe(full, expected))
    assert np.mean(gains) > 0.27, gains
