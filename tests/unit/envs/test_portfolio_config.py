"""The portfolio env from a config: registration, the data section's split, env.kwargs checks and
errors in the config's words."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

from riskppo.cli.main import preset_path
from riskppo.config import Config, ConfigError
from riskppo.envs.kwargs_check import check_env_kwargs
from riskppo.envs.market.errors import DataError
from riskppo.envs.portfolio.env import PortfolioEnv
from riskppo.envs.registration import PORTFOLIO_ID, register_envs
from riskppo.envs.vec.build import env_kwargs


def _make(cfg: Config, part: str) -> PortfolioEnv:
    register_envs()
    env = gym.make(PORTFOLIO_ID, **env_kwargs(cfg.env.id, cfg.env, cfg.data, part, cfg.risk))
    assert isinstance(env.unwrapped, PortfolioEnv)
    return env.unwrapped


def test_shipped_config_makes_train_and_test_envs() -> None:
    cfg = Config.from_yaml(preset_path("portfolio_sp20.yaml"))
    assert cfg.env.id == PORTFOLIO_ID and cfg.risk.cvar_limit == -0.04
    train, test = _make(cfg, "train"), _make(cfg, "test")
    assert train.n_assets == 20 and train.vol_target == 0.08 and train.long_only
    assert train.random_start and not test.random_start
    n = len(train.data.index)
    assert train.trading_range[1] == int(0.7 * n) - 1
    assert test.trading_range[1] == n - 1
    obs, _ = test.reset()
    assert obs.shape == test.observation_space.shape


def test_data_bars_cut_the_assets() -> None:
    cfg = Config.from_yaml(preset_path("portfolio_sp20.yaml"))
    cfg = Config.build({**cfg.to_dict(), "data": {"dataset": None, "bars": [0, 1500, 1500, 2000]}})
    env = _make(cfg, "test")
    assert len(env.data.index) == 2000 and env.trading_range == (1500, 1999)


def test_env_kwargs_typo_names_the_key() -> None:
    register_envs()
    with pytest.raises(ConfigError, match=r"env\.kwargs\.vol_targt: .* takes no argument"):
        check_env_kwargs(PORTFOLIO_ID, {"vol_targt": 0.1})
    check_env_kwargs(PORTFOLIO_ID, {"vol_target": 0.1, "symbols": ["KO"], "align": "strict"})


def test_misaligned_paths_remedy_in_config_words(tmp_path: Path) -> None:
    dates = pd.bdate_range("2021-01-04", periods=40)
    paths = []
    for name, idx in (("AAA", dates), ("BBB", dates.delete(7))):
        df = pd.DataFrame(
            {"Date": idx.strftime("%Y-%m-%d"), "Close": np.linspace(10, 11, len(idx))}
        )
        df.to_csv(tmp_path / f"{name}.csv", index=False)
        paths.append(str(tmp_path / f"{name}.csv"))
    register_envs()
    with pytest.raises(
        DataError, match=r"BBB \(BBB.csv\): dates do not align .* set env\.kwargs\.align=intersect"
    ):
        gym.make(PORTFOLIO_ID, paths=paths, features=["ret_1"], vol_span=5, episode_length=5)


def test_no_assets_is_one_line() -> None:
    register_envs()
    with pytest.raises(ConfigError, match=r"set env\.kwargs\.dataset"):
        gym.make(PORTFOLIO_ID)


def test_cvar_limit_in_percent_is_refused_for_the_portfolio_env() -> None:
    cfg = Config.from_yaml(preset_path("portfolio_sp20.yaml")).to_dict()
    cfg["risk"]["cvar_limit"] = -4
    with pytest.raises(
        ConfigError,
        match=r"-4.0: the riskppo/Portfolio-v0 reward is a log return.*cvar_limit=-0\.04",
    ):
        Config.build(cfg)


def test_the_pathwise_term_asks_for_the_portfolio_envs_slopes() -> None:
    """The portfolio env computes its reward slopes only when asked: a pathwise term without them
    would silently do nothing."""
    cfg = Config.from_yaml(preset_path("portfolio_sp20.yaml")).to_dict()
    cfg["ppo"]["pathwise_coef"] = 1.0
    with pytest.raises(ConfigError, match=r"set env\.kwargs\.reward_slopes=true"):
        Config.build(cfg)
    cfg["env"]["kwargs"]["reward_slopes"] = True
    assert Config.build(cfg).env.kwargs["reward_slopes"] is True
