"""Shipped configs by name: ``config="cartpole_masked"`` and ``--config cartpole_masked``."""

from __future__ import annotations

from pathlib import Path

import pytest

from riskppo.agent.sb3_compat import config_from_keywords
from riskppo.cli.main import load_config, main
from riskppo.config import Config, ConfigError
from riskppo.config.bundled import bundled_dir, bundled_names, resolve_config_path


def test_every_shipped_config_is_reachable_by_name() -> None:
    names = bundled_names()
    assert {"cartpole_masked", "trading_googl", "portfolio_sp20"} <= set(names)
    for name in names:
        by_file = Config.from_yaml(bundled_dir() / f"{name}.yaml")
        assert Config.from_yaml(name) == by_file
        assert Config.from_yaml(f"{name}.yaml") == by_file


def test_a_file_in_the_working_directory_wins(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("cartpole_masked.yaml").write_text("seed: 7\n")
    assert resolve_config_path("cartpole_masked.yaml") == Path("cartpole_masked.yaml")
    assert Config.from_yaml("cartpole_masked.yaml").seed == 7
    # without the suffix the name is not that file, so the shipped preset is read
    assert Config.from_yaml("cartpole_masked").ppo.learning_rate == 1e-3


def test_a_path_with_a_folder_is_never_a_shipped_name(tmp_path: Path) -> None:
    missing = tmp_path / "cartpole_masked.yaml"
    assert resolve_config_path(missing) == missing
    with pytest.raises(ConfigError, match=r"no such file$"):
        Config.from_yaml(missing)


def test_a_mistyped_name_lists_the_shipped_configs() -> None:
    with pytest.raises(ConfigError) as ei:
        Config.from_yaml("cartpol_masked")
    msg = str(ei.value)
    assert "cartpol_masked: no such file, nor a shipped config (" in msg
    assert all(name in msg for name in bundled_names())
    assert "\n" not in msg


def test_keywords_change_a_shipped_preset() -> None:
    cfg = config_from_keywords("cartpole_masked", seed=3, n_envs=4)
    assert (cfg.seed, cfg.env.n_envs, cfg.ppo.learning_rate) == (3, 4, 1e-3)
    assert cfg.env.id == "riskppo/MaskedVelocityCartPole-v1"


def test_the_cli_reads_a_shipped_name_and_says_one_line_for_a_wrong_one(capsys) -> None:
    assert load_config("cartpole_masked", ["seed=2"]).seed == 2
    assert main(["train", "--config", "cartpol_masked"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nor a shipped config" in err
