"""The paper loop saves and restores an env's episode state by name (riskppo.live.paper): the
names must be every attribute the env's ``_new_episode_state`` sets (its own and its bar-env
base's), but the bar and the episode end (set by ``reset``), or a restored episode would
drift from the backtest."""

from __future__ import annotations

import inspect
import re

import pytest

from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.envs.trading.env import TradingEnv
from riskppo.live.paper import PORTFOLIO_EPISODE, TRADING_EPISODE


@pytest.mark.parametrize(
    ("env", "saved"), [(TradingEnv, TRADING_EPISODE), (PortfolioEnv, PORTFOLIO_EPISODE)]
)
def test_saved_fields_are_the_episode_state(env: type, saved: tuple[str, ...]) -> None:
    source = "".join(
        inspect.getsource(cls.__dict__["_new_episode_state"])
        for cls in env.__mro__
        if "_new_episode_state" in cls.__dict__
    )
    assigned = set(re.findall(r"self\.(_\w+)\s*(?:=|,)", source))
    assigned |= set(re.findall(r"=\s*self\.(_\w+)\s*=", source))
    assert assigned - {"_t", "_end_bar"} == set(saved)
