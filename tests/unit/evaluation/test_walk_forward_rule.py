"""The walk-forward selection rule of ``benchmarks/walk_forward.py`` on constructed cells: a
candidate that goes flat anywhere is out, then cells meeting the common limit, then cells beating
vol-targeted buy-and-hold, then mean Sharpe, and an exact tie keeps the listed order."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.benchmark_modules import import_benchmark

LIMIT = -0.04


@pytest.fixture(scope="module")
def wf() -> ModuleType:
    return import_benchmark("walk_forward")


def cells(wf: ModuleType, *specs: tuple[float, float, float]) -> list:
    """One cell per ``(sharpe, cvar, market_share)``; vol-targeted B&H's Sharpe is 0.5."""
    return [
        wf.Cell(f"f{i}", 0, sharpe, 0.5, cvar, share)
        for i, (sharpe, cvar, share) in enumerate(specs)
    ]


def test_a_candidate_flat_in_any_cell_ranks_below_every_trader(wf: ModuleType) -> None:
    results = {
        "flat_once": cells(wf, (2.0, -0.01, 0.9), (0.0, 0.0, 0.2)),  # meets the limit twice
        "trader": cells(wf, (0.1, -0.05, 1.0), (0.1, -0.05, 1.0)),  # never meets it
    }
    assert wf.ranking(results, LIMIT) == ["trader", "flat_once"]


def test_cells_meeting_the_common_limit_come_before_sharpe(wf: ModuleType) -> None:
    results = {
        "high_sharpe": cells(wf, (2.0, -0.045, 1.0), (2.0, -0.03, 1.0)),
        "within_limit": cells(wf, (0.2, -0.039, 1.0), (0.2, -0.04, 1.0)),  # -4.0% itself meets
    }
    assert wf.ranking(results, LIMIT) == ["within_limit", "high_sharpe"]
    # judged at the limit given, not at any limit a candidate trained to
    assert wf.ranking(results, -0.05) == ["high_sharpe", "within_limit"]


def test_then_beating_vol_targeted_buy_and_hold_then_mean_sharpe(wf: ModuleType) -> None:
    results = {
        "one_big_win": cells(wf, (3.0, -0.03, 1.0), (0.4, -0.03, 1.0)),  # mean 1.7, beats 1/2
        "steady": cells(wf, (0.6, -0.03, 1.0), (0.6, -0.03, 1.0)),  # mean 0.6, beats 2/2
        "steady_lower": cells(wf, (0.55, -0.03, 1.0), (0.55, -0.03, 1.0)),
    }
    assert wf.ranking(results, LIMIT) == ["steady", "steady_lower", "one_big_win"]


def test_an_exact_tie_keeps_the_listed_order(wf: ModuleType) -> None:
    same = [(0.7, -0.03, 1.0)]
    assert wf.ranking({"b": cells(wf, *same), "a": cells(wf, *same)}, LIMIT) == ["b", "a"]


def test_a_fold_that_leaves_no_test_bars_is_one_clear_error(wf: ModuleType) -> None:
    assert wf.fold_split(0.55, 0.15) == [0.55, 0.15, 0.3]
    with pytest.raises(SystemExit, match=r"0\.9 with --val-width 0\.15 leaves no test bars"):
        wf.fold_split(0.9, 0.15)
