"""Metrics (TensorBoard + JSON lines through SB3's logger) and alerts (R-MON).

An alert sets a ``warn/<name>`` scalar, writes one log line the first time it fires (and a count
afterwards) and appears in the summary printed at the end of training.
"""

from __future__ import annotations

import json
import logging
import math
import re
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import JSONOutputFormat, KVWriter, Logger

log = logging.getLogger("riskppo")

# The value critics' gradient norms as the update logs them: one per critic head, named after
# its parameter group (``critic1``, ``critic2``, …; riskppo.train.update.param_groups). The risk
# head is left out: its gradient is legitimately 0 in a minibatch where no segment finished.
CRITIC_GRAD_NORM = re.compile(r"critic\d+_grad_norm")


class _AppendJSON(JSONOutputFormat):
    """SB3's JSON lines writer, appending: a resumed run (or a PBT member trained interval by
    interval) keeps the lines written before, instead of truncating them."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "a")  # noqa: SIM115  (closed by KVWriter.close)


class Monitor:
    """Collects scalars for one update, dumps them, and keeps the alert counts."""

    def __init__(self, run_dir: str | Path | None, *, tensorboard: bool = True) -> None:
        formats: list[KVWriter] = []
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            formats.append(_AppendJSON(self.run_dir / "metrics.jsonl"))
            if tensorboard:
                from stable_baselines3.common.logger import TensorBoardOutputFormat

                formats.append(TensorBoardOutputFormat(str(self.run_dir)))
        self.logger = Logger(str(self.run_dir) if self.run_dir else None, formats)
        # Closed when the Monitor is collected, too: a model dropped without close() must not
        # keep TensorBoard's writer thread and metrics.jsonl open (issue 16, item 9).
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
                with open(self.run_dir / "alerts.jsonl", "a") as f:
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
        self._close()  # closes the logger once


def check_alerts(mon: Monitor, thresholds: Any, metrics: dict[str, float], discrete: bool) -> None:
    """Evaluate the R-MON alert rules on one update's metrics (keys without namespace)."""
    t = thresholds
    g = metrics.get
    if g("log_ratio_clamp_frac", 0.0) > t.log_ratio_clamp_frac:
        mon.alert(
            "log_ratio_clamp",
            f"log-ratio clamp fraction {g('log_ratio_clamp_frac'):.3f} > "
            f"{t.log_ratio_clamp_frac} (policy moved far from the behaviour policy; lower lr)",
        )
    if g("grad_norm_pre_clip", 0.0) > t.grad_norm_pre_clip:
        mon.alert(
            "grad_norm_pre_clip",
            f"pre-clip gradient norm {g('grad_norm_pre_clip'):.1f} > {t.grad_norm_pre_clip}",
        )
    c1, c2 = g("critic1_grad_norm"), g("critic2_grad_norm")
    if c1 is not None and c2 is not None:
        ratio = c1 / max(c2, 1e-12)
        mon.record("train/critics_grad_ratio", ratio)
        if ratio > t.critics_grad_ratio_high or ratio < t.critics_grad_ratio_low:
            mon.alert(
                "critic_grad_imbalance",
                f"twin-critic gradient ratio {ratio:.3g} outside "
                f"[{t.critics_grad_ratio_low}, {t.critics_grad_ratio_high}]",
            )
    for key in sorted(k for k in metrics if CRITIC_GRAD_NORM.fullmatch(k)):
        norm = metrics[key]
        if norm < t.critic_grad_vanishing:
            mon.alert("critic_grad_vanishing", f"{key} = {norm:.2e} (vanishing critic gradient)")
    ent = g("entropy")
    if ent is not None and discrete and ent < t.entropy_discrete:
        mon.alert("entropy_collapse", f"mean policy entropy {ent:.4f} < {t.entropy_discrete}")
    ent_dim = g("entropy_per_dim")
    if ent_dim is not None and not discrete and ent_dim < t.entropy_continuous_per_dim:
        mon.alert(
            "entropy_collapse",
            f"per-dimension entropy {ent_dim:.3f} < {t.entropy_continuous_per_dim}",
        )
    for key in ("loss", "policy_loss", "value_loss"):
        v = g(key)
        if v is not None and (not math.isfinite(v) or abs(v) > t.loss_max):
            mon.alert("loss_out_of_range", f"{key} = {v:.4g} (NaN or > {t.loss_max})")
    if g("bc_loss_ratio", 0.0) > t.bc_loss_ratio:
        mon.alert(
            "bc_loss_ratio",
            f"behaviour-cloning loss is {g('bc_loss_ratio'):.2f} of the total "
            f"(> {t.bc_loss_ratio})",
        )
