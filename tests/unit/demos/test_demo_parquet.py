"""Parquet demonstration tables (R-ALG-12): the tidy one-row-per-step format a user's
own strategy writes, its round trip through ``riskppo record``'s writer, and one clear line for
every malformed table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from gymnasium import spaces

from riskppo.demos.files import (
    DemonstrationError,
    Demonstrations,
    load_demonstrations,
    save_demonstrations,
)

OBS = spaces.Box(-10, 10, (3,), np.float32)
BOX = spaces.Box(-1.0, 1.0, (1,), np.float32)


def demos(T: int = 12, N: int = 3) -> Demonstrations:
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(T, N, 3, generator=g)
    starts = torch.zeros(T, N, dtype=torch.bool)
    starts[0] = True
    starts[5, 1] = True
    return Demonstrations(obs, (obs[..., 0] > 0).long(), starts, torch.randn(T, N, generator=g))


def test_parquet_round_trip_keeps_every_sequence_in_order(tmp_path):
    """Mutation check: writing rows time-major instead of sequence by sequence (``_rows``
    without the transpose) scrambles the sequences and fails the equality below."""
    d = demos()
    path = save_demonstrations(tmp_path / "d.parquet", d, {"source": "test"})
    table = pd.read_parquet(path)
    assert list(table["sequence"][:12]) == [0] * 12  # one row per step, sequence by sequence
    back = load_demonstrations(path, OBS, spaces.Discrete(2))
    assert torch.equal(back.observations, d.observations)
    assert torch.equal(back.actions, d.actions)
    assert torch.equal(back.episode_starts, d.episode_starts)
    torch.testing.assert_close(back.returns, d.returns)


def test_a_users_wide_table_with_shuffled_sequences(tmp_path):
    """Numbered scalar columns, scalar Box actions, rows of two sequences interleaved: each
    sequence is gathered in its own row order."""
    T = 8
    seq = np.tile([1, 0], T)  # interleaved rows
    step = np.repeat(np.arange(T), 2)
    df = pd.DataFrame(
        {
            "sequence": seq,
            "observations_0": step + 100.0 * seq,
            "observations_1": -step,
            "observations_2": seq.astype(float),
            "actions": np.where(seq == 1, 0.5, -0.5).astype(np.float32),
            "episode_starts": step == 0,
        }
    )
    df.to_parquet(tmp_path / "w.parquet")
    d = load_demonstrations(tmp_path / "w.parquet", OBS, BOX)
    assert d.shape == (T, 2) and d.returns is None
    assert d.actions.shape == (T, 2, 1)
    assert d.observations[:, 0, 0].tolist() == list(range(T))  # sequence 0, in time order
    assert d.observations[:, 1, 0].tolist() == [100.0 + t for t in range(T)]
    assert d.actions[0, :, 0].tolist() == [-0.5, 0.5]
    assert d.episode_starts[0].all() and not d.episode_starts[1:].any()


def _table(**change):
    T = 6
    cols = {
        "observations": [np.arange(3, dtype=np.float32) + t for t in range(T)],
        "actions": np.zeros(T, dtype=np.float32),
        "episode_starts": [True] + [False] * (T - 1),
    }
    cols.update(change)
    return pd.DataFrame({k: v for k, v in cols.items() if v is not None})


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"actions": None}, "column 'actions' is missing"),
        ({"episode_starts": ["yes"] * 6}, "column 'episode_starts' must be numeric"),
        ({"actions": [0.0, 0.1, None, 0.0, 0.0, 0.0]}, "column 'actions' has 1 missing"),
        ({"actions": [0.0, 0.1, 2.0, 0.0, 0.0, 0.0]}, "'actions' has a value outside"),
        ({"observations": [np.zeros(3)] * 5 + [np.zeros(2)]}, "row 5 has 2 values, row 0 has 3"),
        ({"observations": [np.zeros(4)] * 6}, "the env's is [3]"),
        ({"observations": [np.array([0, np.inf, 0])] * 6}, "'observations' has a non-finite"),
        ({"sequence": [0, 0, 0, 0, 1, 1]}, "sequence 1 has 2 rows"),
        ({"sequence": [0.5] * 6}, "column 'sequence' must be integer"),
        ({"weight": [1.0] * 6}, "unknown column 'weight'"),
        ({"observations_0": [0.0] * 6}, "both column 'observations' and 'observations_0'"),
    ],
)
def test_malformed_table_gives_one_line_naming_file_and_column(tmp_path, change, fragment):
    path = tmp_path / "bad.parquet"
    _table(**change).to_parquet(path)
    with pytest.raises(DemonstrationError) as info:
        load_demonstrations(path, OBS, BOX)
    msg = str(info.value)
    assert str(path) in msg and fragment in msg, msg
    assert "\n" not in msg


def test_numbered_columns_must_be_complete(tmp_path):
    df = pd.DataFrame({"observations_0": [0.0], "observations_2": [0.0], "actions": [0.0]})
    df["episode_starts"] = True
    df.to_parquet(tmp_path / "gap.parquet")
    with pytest.raises(DemonstrationError, match="column 'observations_1' is missing"):
        load_demonstrations(tmp_path / "gap.parquet")


def test_not_a_parquet_file(tmp_path):
    path = tmp_path / "junk.pq"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(DemonstrationError, match=r"junk\.pq: not a Parquet demonstration file"):
        load_demonstrations(path)
