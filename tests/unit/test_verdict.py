"""The statistics block of a trading record (riskppo.evaluation.verdict): what it claims, how it
prints."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from riskppo.evaluation.verdict import format_stat, statistics_block


def _frames(agent_extra: float, n: int = 1500, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Per-bar frames of an asset, its vol-targeted holder and an agent holding 0.3 of the asset
    plus ``agent_extra`` per bar (a skill the benchmark lacks)."""
    rng = np.random.default_rng(seed)
    asset = rng.normal(3e-4, 0.01, n)
    scale = np.full(n, 0.5)
    signal = 0.25 + 0.5 * rng.random(n)
    frame = {
        "buy_and_hold": (np.ones(n), np.ones(n), asset),
        "vol_target_buy_and_hold": (scale, np.ones(n), scale * asset),
        "agent": (signal * scale, signal, signal * scale * asset + agent_extra),
    }
    return {
        name: pd.DataFrame({"position": pos, "signal": sig, "log_return": r, "gross_return": r})
        for name, (pos, sig, r) in frame.items()
    }


def test_an_agent_with_a_real_edge_is_claimed_and_one_without_is_not() -> None:
    edge = statistics_block(_frames(4e-4), 252, fee=0.0005)
    assert edge["verdict"]["claim"] and edge["verdict"]["p_adjusted"] < 0.05
    assert edge["verdict"]["text"].startswith(
        "beats vol-targeted buy-and-hold (Sharpe difference +"
    )
    none = statistics_block(_frames(0.0), 252, fee=0.0005)
    assert not none["verdict"]["claim"]
    assert none["verdict"]["text"].startswith("edge over vol-targeted buy-and-hold not established")
    # the same verdict with N = 40 configurations tried: the adjustment can only raise p
    many = statistics_block(_frames(4e-4), 252, fee=0.0005, n_trials=40)
    assert many["verdict"]["p_adjusted"] > edge["verdict"]["p_adjusted"]
    assert "adjusted for N = 40 trials" in many["verdict"]["text"]


def test_the_block_scales_the_benchmark_and_runs_the_random_timing_null() -> None:
    block = statistics_block(_frames(0.0), 252, fee=0.0005)
    assert block["exposure_scale"] == pytest.approx(0.5 * 0.5 / 0.5, rel=0.05)  # mean signal 0.5
    timing = block["random_timing"]
    assert timing["band"][0] >= 0.25 and timing["band"][1] <= 0.75 and timing["n"] == 2000
    assert 0 < timing["p_value"] <= 1
    labels = [row[0] for row in block["stats_rows"]]
    assert "p one-sided, HAC" in labels and all(
        isinstance(c, str) for r in block["stats_rows"] for c in r
    )


@pytest.mark.parametrize(
    ("label", "value", "text"),
    [
        ("p one-sided, HAC", 0.0123, "0.012"),
        ("PSR vs 0", 0.9973, "0.997"),
        ("deflated Sharpe (N = 1)", 0.99999, "1.000"),
        ("max drawdown", -0.0843, "-8.4%"),
        ("CVaR 95% (per bar)", -0.00931, "-0.93%"),
        ("MinTRL vs 0 (bars)", 623.4, "623"),
        ("MinTRL vs 0 (bars)", math.inf, "∞"),
        ("Sharpe (annual)", 1.004, "1.00"),
        ("beta", None, "–"),
        ("beta", math.nan, "–"),
    ],
)
def test_table_values_print_in_their_units(label: str, value: float | None, text: str) -> None:
    assert format_stat(label, value) == text
