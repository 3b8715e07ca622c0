"""The statistics block of a trading record (riskppo.evaluation.verdict): how it prints, and the
random-timing null's smoothness (what it claims on whole records:
tests/integration/test_verdict_block.py)."""

from __future__ import annotations

import math

import pytest

from riskppo.evaluation.verdict import format_stat


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


@pytest.mark.parametrize("span", [3.0, 40.0, 400.0])
def test_the_null_moves_as_much_as_the_agent(span: float) -> None:
    """The random-timing null is scored at the agent's own turnover: the matched span recovers
    the span of a signal drawn from the null's own generator."""
    from riskppo.stats import matched_smoothness
    from riskppo.stats.null import random_signals

    signal = random_signals(1, 3000, (0.25, 1.0), span, seed=7)[0]
    assert matched_smoothness(signal, (0.25, 1.0)) == pytest.approx(span, rel=0.25)
