"""``riskppo universe`` without training: the cells' configs and the command line's one-line
errors (the verdict table: tests/unit/evaluation/test_universe_table.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from riskppo.cli import main
from riskppo.cli.universe import CELL_CHECKPOINT_EVERY, Cell, cell_config, check_symbols
from riskppo.config import Config, ConfigError

ROOT = Path(__file__).parents[3]


def test_cell_config_trades_the_stock_and_checkpoints() -> None:
    base = Config.from_yaml(ROOT / "riskppo/configs/trading_googl.yaml")
    cfg = cell_config(base, Cell("KO", 3))
    assert (cfg.data.dataset, cfg.data.symbol, cfg.data.path, cfg.seed) == ("sp500", "KO", None, 3)
    assert cfg.checkpoint.every_updates == CELL_CHECKPOINT_EVERY
    assert cfg.env.kwargs == base.env.kwargs and cfg.ppo == base.ppo
    own = base.model_copy(
        update={"checkpoint": base.checkpoint.model_copy(update={"every_updates": 7})}
    )
    assert cell_config(own, Cell("KO", 0)).checkpoint.every_updates == 7


def test_symbols_are_checked() -> None:
    assert check_symbols(["aapl", "KO", "AAPL"]) == ["AAPL", "KO"]
    with pytest.raises(ConfigError, match=r"--symbols IBM: not in the sp500 dataset; valid .*XOM"):
        check_symbols(["AAPL", "IBM"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--symbols", "IBM"], "riskppo: configuration error: --symbols IBM: not in the sp500"),
        (
            ["--resume", "x", "--seeds", "1"],
            "riskppo: configuration error: --resume continues a universe as it was started; "
            "drop --seeds",
        ),
        (["--resume", "nowhere"], "riskppo: nowhere/universe_spec.json: no such file"),
        (
            ["--set", "env.id=CartPole-v1"],
            "riskppo: configuration error: riskppo universe needs a run on",
        ),
    ],
)
def test_cli_errors_are_one_line(
    tmp_path: Path, monkeypatch, capsys, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["universe", "--no-progress", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines


def test_cli_refuses_a_non_empty_run_dir(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_text("")
    assert main(["universe", "--run-dir", "old", "--symbols", "KO"]) == 2
    assert "continue it with --resume old" in capsys.readouterr().err
    assert not (tmp_path / "old" / "universe_spec.json").exists()
