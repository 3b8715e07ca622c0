"""What ``riskppo paper`` keeps in ``RUN_DIR/paper/`` between calls, and how it is committed.

::

    state.json    the loop's state after the last call (:class:`PaperState`): the bars consumed
                  and a hash of them, the env's episode state at the last bar, the action decided
                  there (to be filled at the next bar), the LSTM state after it, how many bytes
                  of orders.csv are committed
    orders.csv    time,asset,from,to,reason — one row per order (an exposure or weight that
                  changes), appended

**One commit per call.** The call's order rows are appended to ``orders.csv`` and fsynced, then
``state.json`` is replaced atomically (a temporary sibling, fsync, rename, fsync of the
directory: :func:`~riskppo.safefs.write_bytes_atomic`); the rename is the commit. ``state.json``
records the committed length of ``orders.csv``, so a call killed between the two (or during
either) leaves rows past that length, which the next call truncates away before anything else
(:func:`repair_orders`) — then replays the same bars and writes the same rows. Nothing committed
is lost, nothing is written twice.

:data:`PAUSE_ENV` is a test hook: ``RISKPPO_PAPER_PAUSE=<point>:<marker file>`` makes a call
create the marker and sleep at ``<point>`` (``orders``: after the rows are appended, before the
state is written; ``state``: with the new state written to its temporary file, before the
rename), so a test can SIGKILL it there.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from riskppo.live.inputs import LiveInputError
from riskppo.nn.policy import RecurrentState
from riskppo.nn.recurrent import LSTMState
from riskppo.safefs import (
    ensure_real_dir,
    open_nofollow,
    read_text_nofollow,
    remove_entry,
    write_bytes_atomic,
)

__all__ = [
    "ORDERS_HEADER",
    "PAUSE_ENV",
    "PaperFiles",
    "PaperState",
    "commit",
    "feed_hash",
    "lstm_from_json",
    "lstm_to_json",
    "paper_files",
    "read_state",
    "repair_orders",
]

FORMAT = 1
ORDERS_HEADER = "time,asset,from,to,reason\n"
PAUSE_ENV = "RISKPPO_PAPER_PAUSE"


@dataclass(frozen=True)
class PaperFiles:
    """The files of ``RUN_DIR/paper/``."""

    dir: Path
    state: Path
    orders: Path


@dataclass(frozen=True)
class PaperState:
    """The paper loop after a call. Times are int nanoseconds since the epoch (UTC).

    ``episode_start``: the bar the agent (and its LSTM) started at, on the first call;
    ``paper_start``: the first call's last bar, where the paper account started (flat);
    ``bars``: bars of the feed consumed (the last one is ``last_bar``); ``feed_sha256``: hash
    of those bars (:func:`feed_hash`); ``env``: the env's episode state at ``last_bar``;
    ``action``: the policy's action decided at ``last_bar``; ``lstm``: the recurrent state
    after it (:func:`lstm_to_json`); ``exposure`` / ``weights``: the position decided there;
    ``signal``: its policy signal; ``log_equity_start``: the env's log equity at
    ``paper_start``; ``orders_rows`` / ``orders_bytes``: the committed rows (header excluded)
    and length of ``orders.csv``."""

    checkpoint: str
    data: str
    episode_start: int
    paper_start: int
    bars: int
    last_bar: int
    feed_sha256: str
    env: dict[str, Any]
    action: list[float]
    lstm: dict[str, Any]
    exposure: float
    weights: list[float] | None
    signal: float
    log_equity_start: float
    orders_rows: int
    orders_bytes: int
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, allow_nan=False) + "\n"

    @property
    def log_equity(self) -> float:
        return float(self.env["_log_equity"])


def paper_files(run_dir: Path) -> PaperFiles:
    """``RUN_DIR/paper/`` (created; not a symlink) and its files; stale temporary files of a
    killed write are removed."""
    d = ensure_real_dir(run_dir / "paper")
    for stale in d.glob(".state.json.tmp-*"):
        remove_entry(stale)
    return PaperFiles(d, d / "state.json", d / "orders.csv")


def read_state(files: PaperFiles) -> PaperState | None:
    """The committed state, or ``None`` before the first call."""
    if not files.state.exists():
        return None
    try:
        doc = json.loads(read_text_nofollow(files.state))
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, not {FORMAT}")
        return PaperState(**doc)
    except (ValueError, TypeError) as exc:
        raise LiveInputError(
            f"{files.state} is not a paper state riskppo wrote ({exc}); delete {files.dir} to "
            "start the paper loop over"
        ) from None


def repair_orders(files: PaperFiles, state: PaperState | None) -> None:
    """Cut ``orders.csv`` back to its committed length (rows of a call killed before its
    commit); :class:`LiveInputError` if it is shorter than that (edited by hand)."""
    committed = 0 if state is None else state.orders_bytes
    if not files.orders.exists():
        if committed:
            raise LiveInputError(f"{files.orders} is missing but the paper state has orders")
        return
    fd = open_nofollow(files.orders, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size < committed:
            raise LiveInputError(
                f"{files.orders} holds {size} bytes but the paper state committed {committed}: "
                f"it was edited; restore it or delete {files.dir} to start over"
            )
        if size > committed:
            os.ftruncate(fd, committed)
            os.fsync(fd)
    finally:
        os.close(fd)


def _pause(point: str) -> None:
    """The test hook of the module docstring."""
    hook = os.environ.get(PAUSE_ENV, "")
    where, _, marker = hook.partition(":")
    if where == point and marker:
        Path(marker).touch()
        time.sleep(3600)


def commit(files: PaperFiles, rows: str, state: PaperState) -> None:
    """Append ``rows`` (CSV text, header not included) to ``orders.csv``, then replace
    ``state.json`` (module docstring: the rename commits both)."""
    fd = open_nofollow(files.orders, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        if os.fstat(fd).st_size == 0:
            os.write(fd, ORDERS_HEADER.encode())
        os.write(fd, rows.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    _pause("orders")
    write_bytes_atomic(files.state, state.to_json().encode(), before_rename=lambda: _pause("state"))


def feed_hash(frames: list[pd.DataFrame], bars: int) -> str:
    """SHA-256 of the first ``bars`` rows (index and every column) of each frame."""
    import hashlib

    h = hashlib.sha256()
    for frame in frames:
        rows = pd.util.hash_pandas_object(frame.iloc[:bars], index=True).to_numpy()
        h.update(np.ascontiguousarray(rows).tobytes())
    return h.hexdigest()


def lstm_to_json(state: RecurrentState) -> dict[str, Any]:
    """The recurrent state as nested lists (float32 values are exact as JSON numbers)."""

    def pair(s: LSTMState) -> list[Any]:
        return [s.h.cpu().tolist(), s.c.cpu().tolist()]

    return {"pi": pair(state.pi), "vf": [pair(s) for s in state.vf], "dtype": str(state.pi.h.dtype)}


def lstm_from_json(doc: dict[str, Any], device: torch.device) -> RecurrentState:
    """The inverse of :func:`lstm_to_json`."""
    dtype = getattr(torch, doc["dtype"].removeprefix("torch."))

    def pair(p: list[Any]) -> LSTMState:
        return LSTMState(*(torch.tensor(x, dtype=dtype, device=device) for x in p))

    return RecurrentState(pair(doc["pi"]), tuple(pair(p) for p in doc["vf"]))
