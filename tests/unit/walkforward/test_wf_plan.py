"""The walk-forward schedule and the stitching of its segments (riskppo/walkforward/plan.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from riskppo.config import Config, ConfigError
from riskppo.envs.trading.factory import trading_range
from riskppo.walkforward.plan import (
    Record,
    WalkForwardSettings,
    mean_record,
    plan_segments,
    stitch,
)


def test_expanding_segments_tile_the_rows_after_initial() -> None:
    segs = plan_segments(1000, WalkForwardSettings(initial=600, step=150))
    assert [(s.train_start, s.test_start, s.test_end, s.settle_end) for s in segs] == [
        (0, 600, 750, 751),
        (0, 750, 900, 901),
        (0, 900, 999, 1000),  # the last one is short: its last position settles at row 999
    ]
    # each decision row is tested once, and training never reaches its own test rows
    tested = np.concatenate([np.arange(s.test_start, s.test_end) for s in segs])
    assert np.array_equal(tested, np.arange(600, 999))
    assert all(s.bars()[1] == s.test_start for s in segs)


def test_rolling_window_keeps_its_length() -> None:
    segs = plan_segments(
        1000, WalkForwardSettings(initial=600, step=150, window="rolling", train_bars=400)
    )
    assert [(s.train_start, s.test_start) for s in segs] == [(200, 600), (350, 750), (500, 900)]


def test_a_one_row_tail_is_dropped_and_too_little_data_refused() -> None:
    segs = plan_segments(752, WalkForwardSettings(initial=600, step=150))
    assert [(s.test_start, s.test_end) for s in segs] == [(600, 750)]
    with pytest.raises(ValueError, match="--initial 600 leaves no rows"):
        plan_segments(601, WalkForwardSettings(initial=600, step=150))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"step": 0}, "--step must be >= 1"),
        ({"window": "sliding"}, "--window must be expanding or rolling"),
        ({"seeds": (1, 1)}, "--seeds must name distinct seeds"),
        ({"warm_steps": 0}, "--warm-steps must be >= 1"),
    ],
)
def test_bad_settings_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        WalkForwardSettings(**kwargs)


def test_warm_start_budget() -> None:
    s = WalkForwardSettings(warm_start=True, warm_steps=500)
    assert [s.steps_for(k, 4000) for k in range(3)] == [4000, 500, 500]
    assert WalkForwardSettings(warm_start=True).steps_for(2, 4000) == 1000
    assert WalkForwardSettings().steps_for(2, 4000) == 4000


def _part(start: str, n: int, seg: int, value: float) -> pd.DataFrame:
    idx = pd.date_range(start, periods=n, freq="B", name="timestamp")
    frame = pd.DataFrame(
        {"close": 1.0, "agent_log_return": value, "agent_position": value}, index=idx
    )
    frame["segment"] = seg
    return frame


def test_stitch_refuses_overlap_and_mean_averages_agents() -> None:
    a = stitch("seed 0", [_part("2020-01-01", 3, 0, 1.0), _part("2020-01-06", 2, 1, 3.0)])
    assert a.segments == [0, 1] and len(a.frame) == 5
    with pytest.raises(ValueError, match="overlap"):
        stitch("x", [_part("2020-01-01", 3, 0, 1.0), _part("2020-01-02", 2, 1, 1.0)])
    b = Record("seed 1", a.frame.assign(agent_log_return=0.0, agent_position=0.0))
    m = mean_record([a, b])
    # half the capital in each agent, rebalanced every bar: the simple returns average
    np.testing.assert_allclose(np.expm1(m.returns("agent")), np.expm1(a.returns("agent")) / 2)
    assert np.allclose(m.positions("agent"), a.positions("agent") / 2)
    assert (m.frame["segment"] == a.frame["segment"]).all()


def test_data_bars_cut_the_frame_and_name_empty_parts() -> None:
    df, lo, hi = trading_range(
        part="test", dataset="googl", path=None, split=(0.7, 0.15, 0.15), bars=(0, 756, 756, 883)
    )
    assert (len(df), lo, hi) == (883, 756, 883)
    df, lo, hi = trading_range(
        part="train", dataset="googl", path=None, split=(0.7, 0.15, 0.15), bars=(100, 756, 756, 883)
    )
    assert (len(df), lo, hi) == (883, 100, 756)
    with pytest.raises(ConfigError, match="has no val part"):
        trading_range(
            part="val", dataset="googl", path=None, split=(0.7, 0.15, 0.15), bars=(0, 756, 756, 883)
        )
    with pytest.raises(ValueError, match="0 <= start < train_end <= val_end < end"):
        Config.model_validate({"data": {"bars": [0, 756, 700, 883]}})
