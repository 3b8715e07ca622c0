"""The test session keeps its runs out of the developer's trial ledger, fixtures of every scope
included (a module-scoped training fixture once wrote into ``./runs/ledger``)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def ledger_setting_seen_by_a_module_fixture() -> str | None:
    return os.environ.get("RISKPPO_LEDGER")


def test_a_module_scoped_fixture_already_sees_the_ledger_off(
    ledger_setting_seen_by_a_module_fixture: str | None,
) -> None:
    assert ledger_setting_seen_by_a_module_fixture == "off"
