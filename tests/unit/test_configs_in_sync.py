"""`riskppo train` with no arguments runs ``configs/default.yaml``; it must stay the GOOGL trading
agent of ``configs/trading_googl.yaml`` (once it silently kept an older GOOGL default while
trading_googl.yaml and the README's results moved on)."""

from __future__ import annotations

from riskppo.cli import DEFAULT_CONFIG, preset_path
from riskppo.config import Config


def test_the_cli_default_is_the_shipped_googl_agent() -> None:
    default = Config.from_yaml(preset_path(DEFAULT_CONFIG)).to_dict()
    googl = Config.from_yaml(preset_path("trading_googl.yaml")).to_dict()
    assert default == googl


def test_the_pbt_default_trains_the_same_agent() -> None:
    """pbt_trading.yaml: the GOOGL agent's env, data, PPO, critic and risk sections, plus PBT."""
    pbt = Config.from_yaml(preset_path("pbt_trading.yaml")).to_dict()
    googl = Config.from_yaml(preset_path("trading_googl.yaml")).to_dict()
    for section in ("env", "data", "ppo", "critic", "risk", "policy"):
        assert pbt[section] == googl[section], section
