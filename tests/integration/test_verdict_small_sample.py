"""The statistics block judges a short record (a ~350-bar test split) with the small-sample
bootstrap test, a long one with the HAC test, and says which (``test_method``, the verdict line,
the statistics table's note)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from riskppo import stats
from riskppo.evaluation.verdict import statistics_block, verdict_lines


def _frames(n: int, edge: float, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Per-bar frames of an asset, its vol-targeted holder and an agent holding 0.25–0.75 of
    it plus ``edge`` per bar."""
    rng = np.random.default_rng(seed)
    asset = rng.normal(3e-4, 0.01, n)
    scale = np.full(n, 0.5)
    signal = 0.25 + 0.5 * rng.random(n)
    frame = {
        "buy_and_hold": (np.ones(n), np.ones(n), asset),
        "vol_target_buy_and_hold": (scale, np.ones(n), scale * asset),
        "agent": (signal * scale, signal, signal * scale * asset + edge),
    }
    return {
        name: pd.DataFrame({"position": pos, "signal": sig, "log_return": r, "gross_return": r})
        for name, (pos, sig, r) in frame.items()
    }


def _returns(frames: dict[str, pd.DataFrame]) -> tuple[np.ndarray, np.ndarray]:
    """The accounts' simple returns, which the verdict judges."""
    return (
        np.expm1(frames["agent"]["log_return"].to_numpy()),
        np.expm1(frames["vol_target_buy_and_hold"]["log_return"].to_numpy()),
    )


def test_a_350_bar_record_is_judged_by_the_small_sample_bootstrap() -> None:
    frames = _frames(350, 6e-5)  # one-sided p about 0.13
    block = statistics_block(frames, 252, fee=0.0005, seed=7)
    agent, bench = _returns(frames)
    boot = stats.sharpe_difference_bootstrap(agent, bench, 252, n_resamples=5000, seed=7)
    hac = stats.sharpe_difference_hac(agent, bench, 252)
    assert block["test_method"] == "ledoit-wolf-bootstrap"
    assert block["stats"]["vs_benchmark"]["test_method"] == "ledoit-wolf-bootstrap"
    # the verdict's p is the bootstrap's (seeded by the block's seed), not HAC's
    assert block["verdict"]["p_adjusted"] == boot.p_one_sided
    assert abs(hac.p_one_sided - boot.p_one_sided) > 1e-3
    assert (
        "by the small-sample bootstrap test, adjusted for N = 1 trial)"
        in (block["verdict"]["text"])
    )
    assert "by the small-sample bootstrap test" in verdict_lines(block)[0]
    notes = {row[0]: row[-1] for row in block["stats_rows"]}
    assert notes["p one-sided, bootstrap"].endswith("; the verdict's test")
    assert "verdict" not in notes["p one-sided, HAC"]
    again = statistics_block(frames, 252, fee=0.0005, seed=7)
    assert again["verdict"] == block["verdict"]


@pytest.mark.parametrize("n", [stats.SMALL_SAMPLE_BARS, 1500])
def test_a_long_record_keeps_the_hac_test(n: int) -> None:
    frames = _frames(n, 2e-4, seed=1)
    block = statistics_block(frames, 252, fee=0.0005, seed=7)
    agent, bench = _returns(frames)
    assert block["test_method"] == "ledoit-wolf-hac"
    hac = stats.sharpe_difference_hac(agent, bench, 252)
    assert block["verdict"]["p_adjusted"] == hac.p_one_sided
    assert "by the HAC test, adjusted for N = 1 trial)" in block["verdict"]["text"]
    notes = {row[0]: row[-1] for row in block["stats_rows"]}
    assert notes["p one-sided, HAC"] == "Ledoit & Wolf 2008; the verdict's test"
    assert "verdict" not in notes["p one-sided, bootstrap"]
