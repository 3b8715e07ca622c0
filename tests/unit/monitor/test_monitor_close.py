"""Closing a run's metrics never hangs on TensorBoard's writer thread. A ``KeyboardInterrupt``
raised inside TensorBoard's queue hand-over (a second Ctrl-C lands anywhere) can leave an event
queued while that thread sleeps until its periodic flush, two minutes later; a plain close
waited for it, so "stop at once" took minutes. The state is made here as the interrupt leaves
it: an event in the queue, counted as unfinished, and no wake-up sent."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event

from riskppo.monitor import writer
from riskppo.monitor.writer import Monitor


def test_close_returns_when_tensorboards_writer_sleeps_on_a_queued_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "CLOSE_TIMEOUT_S", 0.5)
    mon = Monitor(tmp_path)
    mon.record("train/loss", 1.5)
    mon.dump(32)
    (tensorboard,) = [f for f in mon.logger.output_formats if hasattr(f, "writer")]
    queue = tensorboard.writer.file_writer.event_writer._async_writer._byte_queue
    time.sleep(0.2)  # the writer thread has written the first row and sleeps on the queue
    with queue.mutex:  # put without the notify an interrupted put never reached
        queue._put(Event(wall_time=time.time(), step=64).SerializeToString())
        queue.unfinished_tasks += 1
    start = time.monotonic()
    mon.close()
    assert time.monotonic() - start < 10
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"train/loss": 1.5}]
    mon.close()  # a second close does nothing


def test_close_writes_every_event_when_nothing_is_stuck(tmp_path: Path) -> None:
    mon = Monitor(tmp_path)
    for step in (32, 64):
        mon.record("train/loss", step / 4)
        mon.dump(step)
    mon.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(32, 8.0), (64, 16.0)]
