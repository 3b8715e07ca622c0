"""Observations given to ``predict`` of a model that normalises them: normalising raw ones, and
noticing raw ones passed as if they were normalised.

A model trained with ``env.normalize_obs`` acts on ``clip((x - μ) / sqrt(σ² + ε), ±clip_obs)``
(SB3's ``VecNormalize``, statistics frozen at the model's); :func:`normalize_observations` is that
map, float for float.

:class:`RawObservationCheck` decides, over the observations passed to ``predict``, between "these
are normalised" (each entry ``x ~ N(0, 1)``) and "these are raw" (``x ~ N(μ, σ²)``, the
normaliser's own statistics) by the log-likelihood ratio of the two Gaussian models, summed
over the entries and observations seen as a CUSUM (Page 1954: the sum restarts from 0 when it
goes negative, so raw observations after many normalised ones are still noticed): raw once it
passes :data:`DECIDE`; an entry beyond ``±clip_obs`` is raw at once (normalisation clips
there). Entries with ``μ ≈ 0`` and ``σ ≈ 1`` say nothing and add about nothing. It stops looking
once it has warned, or after :data:`MAX_ROWS` observations.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import numpy as np

__all__ = ["DECIDE", "MAX_ROWS", "RawObservationCheck", "normalize_observations", "warn_if_raw"]

DECIDE = 20.0  # log-likelihood ratio: e^20 to 1 either way
MAX_ROWS = 100_000  # observations looked at before the check stops (a few µs each)
EPSILON = 1e-8  # VecNormalize's default epsilon, the one riskppo's normaliser uses


def normalize_observations(
    obs: np.ndarray, rms: Any, clip_obs: float, epsilon: float = EPSILON
) -> np.ndarray:
    """``clip((obs - mean) / sqrt(var + epsilon), ±clip_obs)`` as float32 (``obs`` ``[..., D]``,
    ``rms.mean`` / ``rms.var`` ``[D]``): SB3 ``VecNormalize.normalize_obs`` with frozen
    statistics; ``obs`` unchanged when ``rms`` is ``None`` (no normalisation)."""
    x = np.asarray(obs)
    if rms is None:
        return x
    z = np.clip((x - rms.mean) / np.sqrt(rms.var + epsilon), -clip_obs, clip_obs)
    return np.asarray(z, dtype=np.float32)


def raw_log_likelihood_ratio(obs: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """``Σ log N(x; μ, σ²) - log N(x; 0, 1)`` over every entry of ``obs`` ``[B, D]`` (> 0:
    more likely raw). Entries with ``σ² = 0`` are left out (a constant input says nothing)."""
    x = np.asarray(obs, dtype=np.float64).reshape(-1, len(mean))
    keep = var > 0
    x, mu, v = x[:, keep], mean[keep], var[keep]
    raw = -0.5 * (x - mu) ** 2 / v - 0.5 * np.log(v)
    normalised = -0.5 * x**2
    return float(np.sum(raw - normalised))


class RawObservationCheck:
    """Accumulates the evidence of :func:`raw_log_likelihood_ratio` over ``predict`` calls
    (module docstring); :meth:`observe` returns why the observations look raw, once, else
    ``None``."""

    def __init__(self) -> None:
        self.llr = 0.0
        self.rows = 0
        self.done = False

    def observe(
        self, obs: np.ndarray, mean: np.ndarray, var: np.ndarray, clip_obs: float
    ) -> str | None:
        """Look at ``obs`` ``[B, D]`` (what was passed to ``predict``); the reason they look raw
        the first time the evidence decides so, else ``None``."""
        if self.done:
            return None
        x = np.asarray(obs, dtype=np.float64).reshape(-1, len(mean))
        big = np.abs(x) > clip_obs * (1 + 1e-6)
        if big.any():
            self.done = True
            j = int(np.argwhere(big)[0][1])
            return (
                f"entry {j} is {x[big][0]:.4g}, beyond the normalised range ±{clip_obs:g} "
                "(env.clip_obs)"
            )
        self.llr = max(0.0, self.llr + raw_log_likelihood_ratio(x, mean, var))
        self.rows += len(x)
        if self.llr > DECIDE:
            self.done = True
            return (
                "they fit the normaliser's raw mean and scale far better than mean 0 and scale 1 "
                f"(log-likelihood ratio {self.llr:.0f} after {self.rows} observation(s))"
            )
        self.done = self.rows >= MAX_ROWS
        return None


_CHECKS: weakref.WeakKeyDictionary[Any, RawObservationCheck] = weakref.WeakKeyDictionary()


def warn_if_raw(
    model: Any, obs: np.ndarray, rms: Any, clip_obs: float, stacklevel: int = 4
) -> None:
    """One ``UserWarning`` per ``model`` (a normalising one: ``rms`` not ``None``) the first time
    the observations passed to its ``predict`` look raw (:class:`RawObservationCheck`);
    ``stacklevel`` 4 names the line that called ``predict`` (through ``given_obs``)."""
    if rms is None:
        return
    check = _CHECKS.setdefault(model, RawObservationCheck())
    why = check.observe(obs, rms.mean, rms.var, clip_obs)
    if why is not None:
        warnings.warn(
            f"predict: observations look un-normalised ({why}), but this model normalises them "
            "(env.normalize_obs): pass predict(obs, raw=True) for raw env observations",
            UserWarning,
            stacklevel=stacklevel,
        )
