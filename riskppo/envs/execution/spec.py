"""The keywords every bar env takes (:class:`~riskppo.envs.TradingEnv`,
:class:`~riskppo.envs.portfolio.env.PortfolioEnv`), in one spec: each env's constructor names them
(its signature is what ``env.kwargs`` is checked against), :meth:`BarSpec.of` reads and checks
them once, and :class:`~riskppo.envs.execution.bar_env.BarEnv` keeps them.

Each check raises one ``ValueError`` naming the argument (:mod:`riskppo.envs.execution.args`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from riskppo.envs.execution.args import validate_scalars, validate_sizing
from riskppo.envs.execution.overlay import RiskOverlay
from riskppo.envs.market.signals import check_signal_names

__all__ = ["BAR_KEYWORDS", "BarSpec"]


@dataclass(frozen=True)
class BarSpec:
    """The shared keywords of a bar env, checked; units as in the envs' docstrings.

    ``window``: bars per observation; ``features`` / ``signals``: the observed columns;
    ``fee`` per unit traded, ``borrow_rate`` a year per unit short; ``fill``: the fill mode
    (:mod:`riskppo.envs.execution.fills`); ``reward_scale``; ``episode_length`` (steps),
    ``random_start``, ``start`` / ``end`` (the trading range,
    :mod:`riskppo.envs.execution.episode_range`); ``bars_per_year``; ``sizing``, ``vol_target``
    (annual), ``vol_span`` (bars), ``max_leverage`` (:mod:`riskppo.envs.execution.sizing`);
    ``long_only``, ``min_signal`` (the action's range; ``min_signal`` is checked by each env,
    which knows its actions, and kept as given); ``overlay``
    (:mod:`riskppo.envs.execution.overlay`); ``ruin_equity``; ``render_mode`` (none)."""

    window: int
    features: tuple[str, ...]
    signals: tuple[str, ...]
    fee: float
    borrow_rate: float
    fill: str
    reward_scale: float
    episode_length: int | None
    random_start: bool
    start: Any
    end: Any
    bars_per_year: float
    sizing: str
    vol_target: float
    vol_span: int
    max_leverage: float
    long_only: bool
    min_signal: float
    overlay: RiskOverlay | None
    ruin_equity: float | None
    render_mode: None

    @classmethod
    def of(cls, env: str, arguments: Mapping[str, Any]) -> BarSpec:
        """The spec of an env's constructor ``arguments`` (its ``locals()``: the keywords of
        :data:`BAR_KEYWORDS` are read, the others left); ``env`` names the class in messages."""
        a = {name: arguments[name] for name in BAR_KEYWORDS}
        if a["render_mode"] is not None:
            raise ValueError(f"{env} has no render modes, got render_mode={a['render_mode']!r}")
        validate_scalars(
            window=a["window"],
            fee=a["fee"],
            borrow_rate=a["borrow_rate"],
            reward_scale=a["reward_scale"],
            bars_per_year=a["bars_per_year"],
            episode_length=a["episode_length"],
            ruin_equity=a["ruin_equity"],
        )
        validate_sizing(a["sizing"], a["vol_target"], a["vol_span"], a["max_leverage"])
        length, overlay = a["episode_length"], a["overlay"]
        a.update(
            window=int(a["window"]),
            features=tuple(a["features"]),
            signals=check_signal_names(a["signals"]),
            fee=float(a["fee"]),
            borrow_rate=float(a["borrow_rate"]),
            reward_scale=float(a["reward_scale"]),
            episode_length=None if length is None else int(length),
            random_start=bool(a["random_start"]),
            bars_per_year=float(a["bars_per_year"]),
            vol_target=float(a["vol_target"]),
            vol_span=int(a["vol_span"]),
            max_leverage=float(a["max_leverage"]),
            long_only=bool(a["long_only"]),
            overlay=None if overlay is None else RiskOverlay.of(overlay),
        )
        return cls(**a)


BAR_KEYWORDS: tuple[str, ...] = tuple(f.name for f in fields(BarSpec))
"""The keywords of :class:`BarSpec`, in its order."""
