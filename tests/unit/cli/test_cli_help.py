"""``riskppo --help`` and ``riskppo NAME --help`` say what each subcommand does, what every
argument is and what it defaults to; the README's command table and docs/getting-started.md
agree with the command line."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from riskppo.cli.main import build_parser
from riskppo.config.bundled import bundled_names

ROOT = Path(__file__).resolve().parents[3]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_subcommand_has_a_description(name: str) -> None:
    description = subcommands()[name].description
    assert description and len(description) > 40, name


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_argument_is_documented_with_its_default(name: str) -> None:
    parser = subcommands()[name]
    for action in arguments(parser):
        assert action.help, f"riskppo {name}: {action.dest} has no help"
        if action.default not in (None, False):
            assert "default" in action.help, f"riskppo {name}: {action.dest} hides its default"


@pytest.mark.parametrize("name", ["eval", "backtest"])
def test_split_help_shows_the_default_in_force(name: str) -> None:
    parser = subcommands()[name]
    split = next(a for a in arguments(parser) if a.dest == "split")
    assert f"(default: {split.default})" in " ".join(parser.format_help().split())


@pytest.mark.parametrize("name", ["train", "walkforward", "record", "universe"])
def test_config_help_names_every_shipped_config(name: str) -> None:
    config = next(a for a in arguments(subcommands()[name]) if a.dest == "config")
    assert config.help is not None
    for shipped in bundled_names():
        assert shipped in config.help, (name, shipped)


def test_the_readme_command_table_lists_every_subcommand() -> None:
    text = (ROOT / "README.md").read_text()
    table = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `riskppo (\w+)", table, re.M))
    assert listed == set(subcommands())


def test_getting_started_says_alerts_jsonl_is_written_only_with_alerts() -> None:
    """The monitor writes ``alerts.jsonl`` on the first alert (riskppo/monitor/writer.py); a run
    without alerts has none."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `alerts.jsonl`"))
    assert "only when" in row
