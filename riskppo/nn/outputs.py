"""Non-finite policy outputs at evaluation time.

A checkpoint can hold finite weights that still overflow in the forward pass (e.g. every weight
near the float32 maximum, 3e38): they load, pass the checkpoint checks, and give NaN action
distributions and value quantiles, from which the policy picks a constant action. An evaluation
or backtest built on that would look like a normal, if poor, result. ``predict`` and
``value_distribution`` therefore refuse such outputs with :class:`NonFiniteOutputError`.
"""

from __future__ import annotations

from pathlib import Path

import torch


class NonFiniteOutputError(RuntimeError):
    """The policy's outputs (action distribution, values) are NaN or infinite."""


def check_finite_outputs(source: Path | None, **outputs: torch.Tensor) -> None:
    """Raise :class:`NonFiniteOutputError` naming ``source`` (the checkpoint the weights came
    from; None: weights in memory) and each of ``outputs`` (name → tensor of any shape) that
    holds a NaN or an infinity."""
    bad = [name.replace("_", " ") for name, t in outputs.items() if not torch.isfinite(t).all()]
    if not bad:
        return
    where = f"checkpoint {source}" if source is not None else "the model in memory"
    raise NonFiniteOutputError(
        f"{where}: NaN/inf in the policy's {' and '.join(bad)}: its weights overflow or are "
        "corrupted, so nothing is evaluated with them; use another checkpoint"
    )
