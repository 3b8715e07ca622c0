"""The statistics block of a trading record (riskppo.evaluation.verdict) on whole synthetic
records: what it claims, with its bootstrap and random-timing null."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from riskppo.evaluation.verdict import statistics_block


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


def test_a_random_agent_ranks_in_the_middle_of_its_null() -> None:
    """An agent whose signal is itself a random smooth signal (slow, with costs that matter) is
    not called skilful: the null at its own turnover ranks it away from the extremes (with a
    fixed 20-bar null it beat every random signal, because those paid 10x its costs)."""
    from riskppo.stats.null import random_signals

    frames = _frames(0.0, n=2000)
    signal = random_signals(1, 2000, (0.25, 0.75), 300.0, seed=3)[0]
    agent = frames["agent"]
    agent["signal"] = signal
    agent["position"] = signal * 0.5
    asset = frames["buy_and_hold"]["gross_return"].to_numpy()
    dpos = np.abs(np.diff(agent["position"].to_numpy(), prepend=0.0))
    agent["log_return"] = agent["position"] * asset - 0.01 * dpos
    timing = statistics_block(frames, 252, fee=0.01)["random_timing"]
    assert 200 < timing["smoothness"] < 450
    assert 0.05 < timing["p_value"] < 0.95


def test_the_report_states_the_random_timing_percentile_in_percent() -> None:
    """The null's percentile is already in percent: 40.1 is "beats 40% of", never "4010%"."""
    from riskppo.evaluation.report import statistics_section

    block = statistics_block(_frames(0.0), 252, fee=0.0005)
    block["random_timing"] = {**block["random_timing"], "percentile": 40.1, "p_value": 0.6}
    html_text = statistics_section(block)
    assert "beats 40% of 2000 smooth random signals" in html_text


def test_a_higher_sharpe_between_two_losses_is_not_called_beating() -> None:
    """In a falling market an agent that loses less than the benchmark, significantly, is said
    to lose less: "beats" between two negative Sharpe ratios would read as a gain."""
    frames = _frames(1.6e-4, n=2500, seed=1)
    for name in ("buy_and_hold", "vol_target_buy_and_hold", "agent"):
        frame = frames[name]
        fall = -1e-3 * frame["position"]  # the asset drifts down: both strategies lose
        frame["log_return"] = frame["log_return"] + fall
        frame["gross_return"] = frame["gross_return"] + fall
    block = statistics_block(frames, 252, fee=0.0005)
    agent, bench = (block["stats"][k]["sharpe"]["estimate"] for k in ("agent", "benchmark"))
    assert agent < 0 and bench < 0 and agent > bench and block["verdict"]["claim"]
    assert block["verdict"]["text"].startswith(
        f"loses less than vol-targeted buy-and-hold (both lose money: Sharpe {agent:.2f} "
        f"against {bench:.2f}; Sharpe difference +"
    )
    assert "beats" not in block["verdict"]["text"]
