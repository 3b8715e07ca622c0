"""The supervised baseline: what a user would try instead of reinforcement learning.

The agent's own features → a ridge forecast of what one unit of signal earns over the next bar →
a position in the agent's band, traded on the same bars with the same sizing, overlay, fills and
fees. Fitted on training rows only; the ridge penalty is chosen by blocked time-series
cross-validation on those rows (contiguous folds, so no fold is scored on rows interleaved with
the ones it was fitted on).

**Target.** For the decision at the close of bar ``t`` the exposure per unit of signal is the
env's sizing scale ``k_t`` and it earns the fill's returns ``new_t`` (bar ``t+1``'s session with
next-open fills) and ``old_{t+1}`` (the gap after it): ``y_t = k_t · (new_t + old_{t+1})``.

**Position.** ``s_t = clip(c + h · f_t / (2 σ_f), lo, hi)`` for the band ``[lo, hi]`` (centre
``c``, half-width ``h``) and the forecast ``f_t`` in units of its standard deviation ``σ_f`` on
the training rows: a forecast two deviations above zero takes the whole band, a zero forecast
the middle. A forecast that is nearly constant (a drift, nothing timed) sits where its sign says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from riskppo.envs.trading.env import TradingEnv

__all__ = ["RidgeForecast", "fit_ridge", "forecast_signals", "supervised_signals", "targets"]

PENALTIES: tuple[float, ...] = tuple(10.0**k for k in range(-2, 6))
"""Ridge penalties tried, per unit of rows (the penalty is ``value · n_rows``)."""


@dataclass(frozen=True)
class RidgeForecast:
    """A fitted ridge on standardised features: ``f = b + ((x − mean) / sd) · w``."""

    mean: np.ndarray  # [F]
    sd: np.ndarray  # [F]
    w: np.ndarray  # [F]
    b: float
    penalty: float  # per row
    forecast_sd: float  # sd of the forecasts on the rows it was fitted on

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Forecasts ``[T]`` of feature rows ``x`` ``[T, F]``."""
        return self.b + ((x - self.mean) / self.sd) @ self.w


def _solve(z: np.ndarray, y: np.ndarray, penalty: float) -> tuple[np.ndarray, float]:
    """Ridge on centred ``z`` ``[n, F]`` (no penalty on the intercept): ``(w, b)``."""
    zm, ym = z.mean(0), y.mean()
    zc = z - zm
    w = np.linalg.solve(zc.T @ zc + penalty * len(y) * np.eye(z.shape[1]), zc.T @ (y - ym))
    return w, float(ym - zm @ w)


def fit_ridge(x: np.ndarray, y: np.ndarray, folds: int = 5) -> RidgeForecast:
    """Ridge of ``y`` ``[n]`` on ``x`` ``[n, F]`` with the penalty of :data:`PENALTIES` whose
    blocked ``folds``-fold cross-validated squared error is least."""
    if len(y) < 2 * folds or x.shape[0] != len(y):
        raise ValueError(
            f"fit_ridge: need >= {2 * folds} rows of x and y, got {x.shape}, {y.shape}"
        )
    mean, sd = x.mean(0), x.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    z = (x - mean) / sd
    blocks = np.array_split(np.arange(len(y)), folds)

    def cv_error(penalty: float) -> float:
        err = 0.0
        for held in blocks:
            keep = np.setdiff1d(np.arange(len(y)), held)
            w, b = _solve(z[keep], y[keep], penalty)
            err += float(((z[held] @ w + b - y[held]) ** 2).sum())
        return err

    best = min(PENALTIES, key=cv_error)
    w, b = _solve(z, y, best)
    fitted = z @ w + b
    return RidgeForecast(mean, sd, w, b, best, float(fitted.std()))


def targets(env: TradingEnv) -> np.ndarray:
    """``[n_bars]`` float64 ``y_t``: what a unit of signal decided at the close of ``t`` earns
    over the next bar (see the module docstring; NaN where it is not defined)."""
    new = np.asarray(env._ret_new, dtype=np.float64)  # [n_bars - 1]: step t -> t + 1
    old = np.asarray(env._ret_old, dtype=np.float64)
    y = np.full(len(env.df), np.nan)
    m = len(new) - 1
    y[:m] = np.asarray(env._scale, dtype=np.float64)[:m] * (new[:m] + old[1:])
    return y


def forecast_signals(
    forecast: np.ndarray, forecast_sd: float, band: tuple[float, float]
) -> np.ndarray:
    """Signals ``[T]`` in ``band`` from forecasts ``[T]`` (the module docstring's map)."""
    lo, hi = band
    centre, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    unit = forecast / (2.0 * forecast_sd) if forecast_sd > 0 else np.sign(forecast) * np.inf
    return np.clip(centre + half * np.nan_to_num(unit, nan=0.0), lo, hi)


def supervised_signals(train_env: TradingEnv, env: TradingEnv) -> tuple[np.ndarray, RidgeForecast]:
    """``[n_bars]`` signals of the supervised baseline over ``env``'s frame, fitted on the
    decision bars of ``train_env``'s trading range (which must end before ``env``'s starts, or
    be the same range for an in-sample fit); the fitted forecast."""
    lo, hi = train_env.trading_range
    feats = train_env.feature_matrix.values  # features, then signal columns
    y = targets(train_env)
    rows = np.arange(lo, hi - 1)  # the last decision's target reaches past the range's end
    rows = rows[np.isfinite(y[rows]) & np.isfinite(feats[rows]).all(1)]
    model = fit_ridge(feats[rows], y[rows])
    x = env.feature_matrix.values
    f = model.predict(np.nan_to_num(x, nan=0.0))
    return forecast_signals(f, model.forecast_sd, env.signal_range), model
