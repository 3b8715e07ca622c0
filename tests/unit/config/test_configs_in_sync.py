"""`riskppo train` with no arguments must train the GOOGL trading agent of
``configs/trading_googl.yaml`` (once it read a copy, ``default.yaml``, that silently kept an older
GOOGL default while trading_googl.yaml and the README's results moved on), and ``riskppo pbt``'s
population the same agent."""

from __future__ import annotations

from riskppo.cli.main import load_config, preset_path
from riskppo.config import Config


def test_the_cli_default_is_the_shipped_googl_agent() -> None:
    default = load_config(None, []).to_dict()
    googl = Config.from_yaml(preset_path("trading_googl.yaml")).to_dict()
    assert default == googl


def test_the_pbt_default_trains_the_same_agent() -> None:
    """pbt_trading.yaml: the GOOGL agent's env, data, PPO, critic and risk sections, plus PBT."""
    pbt = Config.from_yaml(preset_path("pbt_trading.yaml")).to_dict()
    googl = Config.from_yaml(preset_path("trading_googl.yaml")).to_dict()
    for section in ("env", "data", "ppo", "critic", "risk", "policy", "prior_trials"):
        assert pbt[section] == googl[section], section
