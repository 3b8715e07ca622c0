"""Metrics (TensorBoard + JSON lines through SB3's logger) and alerts (R-MON).

An alert sets a ``warn/<name>`` scalar, writes one log line the first time it fires (and a count
afterwards) and appears in the summary printed at the end of training.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from collections import Counter
from pathlib import Path

from stable_baselines3.common.logger import JSONOutputFormat, KVWriter, Logger

from riskppo.algo.log import UpdateLog
from riskppo.config import Config
from riskppo.monitor.alerts import alerts
from riskppo.monitor.progress import fmt
from riskppo.safefs import append_text, open_nofollow

log = logging.getLogger("riskppo")

METRICS_FILE = "metrics.jsonl"
_TAIL_BYTES = 1 << 16  # a metrics row is a few kB: the last complete one is in this tail
CLOSE_TIMEOUT_S = 5.0  # the longest Monitor.close waits for TensorBoard's writer thread


def last_logged_step(path: Path) -> int | None:
    """``time/total_timesteps`` of the last complete row of a ``metrics.jsonl`` (``None``: no
    file or no row). Reads only the file's last :data:`_TAIL_BYTES`; never through a link."""
    if not os.path.lexists(path):
        return None
    with os.fdopen(open_nofollow(path, os.O_RDONLY), "rb") as f:
        f.seek(max(f.seek(0, os.SEEK_END) - _TAIL_BYTES, 0))
        lines = f.read().splitlines()
    for line in reversed(lines):
        try:
            step = json.loads(line).get("time/total_timesteps")
        except (ValueError, AttributeError):  # a torn or cut line, or not a row
            continue
        if isinstance(step, int | float):
            return int(step)
    return None


def check_steps_continue(run_dir: Path, start: int) -> None:
    """Refuse (``ValueError``) to train from step ``start`` into a ``run_dir`` whose
    ``metrics.jsonl`` already logged later steps: its step counter would go back."""
    logged = last_logged_step(run_dir / METRICS_FILE)
    if logged is not None and logged > start:
        raise ValueError(
            f"{run_dir / METRICS_FILE} already logs steps up to {logged:,} and this learn() "
            f"starts at step {start:,}: pass reset_num_timesteps=False to continue that run, "
            "or another run_dir for a new one"
        )


class _AppendJSON(JSONOutputFormat):
    """SB3's JSON lines writer, appending: a resumed run (or a PBT member trained interval by
    interval) keeps the lines written before, instead of truncating them."""

    def __init__(self, path: Path) -> None:
        self.file = append_text(path)  # never through a symlink; closed by KVWriter.close


class Monitor:
    """Collects scalars for one update, dumps them, and keeps the alert counts."""

    def __init__(self, run_dir: str | Path | None, *, tensorboard: bool = True) -> None:
        formats: list[KVWriter] = []
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            formats.append(_AppendJSON(self.run_dir / METRICS_FILE))
            if tensorboard:
                from stable_baselines3.common.logger import TensorBoardOutputFormat

                formats.append(TensorBoardOutputFormat(str(self.run_dir)))
        self.logger = Logger(str(self.run_dir) if self.run_dir else None, formats)
        # Closed when the Monitor is collected, too: a model dropped without close() must not
        # keep TensorBoard's writer thread and metrics.jsonl open.
        self._close = weakref.finalize(self, self.logger.close)
        self.alerts: Counter[str] = Counter()
        self.alert_messages: dict[str, str] = {}
        self.latest: dict[str, float] = {}

    def record(self, key: str, value: float) -> None:
        value = float(value)
        self.latest[key] = value
        self.logger.record(key, value)

    def record_many(self, prefix: str, values: dict[str, float]) -> None:
        for k, v in values.items():
            self.record(f"{prefix}{k}", v)

    def alert(self, name: str, message: str) -> None:
        """Fire ``warn/<name>``; the first occurrence is logged, later ones only counted."""
        self.alerts[name] += 1
        self.record(f"warn/{name}", 1.0)
        if name not in self.alert_messages:
            self.alert_messages[name] = message
            log.warning("warn/%s: %s", name, message)
            if self.run_dir is not None:
                with append_text(self.run_dir / "alerts.jsonl") as f:
                    f.write(json.dumps({"alert": name, "message": message}) + "\n")

    def dump(self, step: int) -> None:
        self.logger.dump(step)

    def summary(self) -> str:
        if not self.alerts:
            return "no alerts"
        lines = ["alerts during training:"]
        for name, count in self.alerts.most_common():
            lines.append(f"  warn/{name} ×{count}: {self.alert_messages[name]}")
        return "\n".join(lines)

    def close(self) -> None:
        """Flush and close ``metrics.jsonl`` and TensorBoard's writer, waiting at most
        :data:`CLOSE_TIMEOUT_S`. TensorBoard's writer hands events to its own thread through a
        queue; a ``KeyboardInterrupt`` raised inside that hand-over (a second Ctrl-C lands
        anywhere) can leave an event queued with that thread asleep until its next periodic
        flush (two minutes), and a plain close would wait for it. Past the limit the close
        goes on in a daemon thread and this returns: a process that is stopping is not held
        up, and only the events still queued may be lost."""
        if not self._close.alive:
            return
        closer = threading.Thread(target=self._close, name="riskppo-monitor-close", daemon=True)
        closer.start()
        closer.join(CLOSE_TIMEOUT_S)
        if closer.is_alive():
            log.warning(
                "the TensorBoard writer did not finish within %g s; the events it still holds "
                "may be lost (metrics.jsonl is complete up to the last logged update)",
                CLOSE_TIMEOUT_S,
            )


def log_update(mon: Monitor, log: UpdateLog, cfg: Config, fps: float) -> None:
    """Record one iteration's scalars and raise its alerts (:mod:`riskppo.monitor.alerts`);
    dump every ``monitor.log_interval`` updates, and with ``monitor.verbose >= 1`` print the
    :func:`update_line` then (as SB3 prints its table at each dump with ``verbose=1``)."""
    for key, value in log.scalars():
        mon.record(key, value)
    mon.record("time/fps", fps)
    for a in alerts(log, cfg.monitor, cfg.critic.scale_cap):
        mon.alert(a.name, a.message)
    if log.n_updates % cfg.monitor.log_interval == 0:
        mon.dump(log.num_timesteps)
        if cfg.monitor.verbose >= 1:
            print(update_line(log, fps), flush=True)


def update_line(log: UpdateLog, fps: float) -> str:
    """One update as one line: the update, the steps so far, fps, the rollout's mean episode
    return and length, and the update's main training scalars (``-``: none this update; the
    names are those of ``metrics.jsonl`` without their section)::

        update 4  steps 256  fps 1,148  ep_rew_mean 22.73  ep_len_mean 22.7  loss 0.412 ...
    """
    losses = log.losses
    fields: list[tuple[str, float | None, str]] = [
        ("steps", log.num_timesteps, ","),
        ("fps", fps, ",.0f"),
        ("ep_rew_mean", log.ep_rew_mean, ".4g"),
        ("ep_len_mean", log.ep_len_mean, ".4g"),
        ("loss", losses.loss if losses else None, ".4g"),
        ("entropy", losses.entropy if losses else None, ".4g"),
        ("approx_kl", losses.approx_kl_k3 if losses else None, ".3g"),
        ("clip_fraction", losses.clip_fraction if losses else None, ".3g"),
        ("explained_variance", log.estimate.explained_variance, ".3g"),
    ]
    if log.risk is not None:
        fields.append(("cvar_pred", log.risk.cvar_pred, ".4g"))
    return f"update {log.n_updates}" + "".join(
        f"  {name} {fmt(value, spec)}" for name, value, spec in fields
    )
