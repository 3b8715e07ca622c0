"""docs/config.md is the configuration reference: every key of the config models, with a
description, and the trading env's keyword arguments. It is generated
(``python -m riskppo.cli.config_doc docs/config.md``); these tests fail when a field has no
description or the page was not regenerated after the models changed."""

from __future__ import annotations

from pathlib import Path

from riskppo.cli.config_doc import TRADING_KWARGS, leaf_fields, trading_kwargs
from riskppo.config import Config, HyperparamSpec

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "config.md"


def test_every_config_field_has_a_description():
    fields = [*leaf_fields(Config), *leaf_fields(HyperparamSpec, "pbt.hyperparams.<key>.")]
    assert len(fields) > 100
    missing = [key for key, field in fields if not (field.description or "").strip()]
    assert missing == []


def test_every_key_is_on_the_page_as_the_user_types_it():
    text = PAGE.read_text(encoding="utf-8")
    for key, _ in leaf_fields(Config):
        assert f"| `{key}` |" in text, key
    for name in trading_kwargs():
        assert f"| `env.kwargs.{name}` |" in text, name


def test_every_trading_env_keyword_is_described():
    assert set(TRADING_KWARGS) == set(trading_kwargs())
