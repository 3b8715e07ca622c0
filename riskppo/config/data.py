"""Configuration sections of the data, adversarial training and population-based training
(re-exported by :mod:`riskppo.config.sections`)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Literal, cast

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from riskppo.config.base import _Section

# The stocks of the bundled "sp500" dataset (skfolio's load_sp500_dataset), one dataset each.
SP500_SYMBOLS: tuple[str, ...] = (
    "AAPL", "AMD", "BAC", "BBY", "CVX", "GE", "HD", "JNJ", "JPM", "KO",
    "LLY", "MRK", "MSFT", "PEP", "PFE", "PG", "RRC", "UNH", "WMT", "XOM",
)  # fmt: skip

# The CSV field separators data files may use, by each accepted spelling (a tab and "|" are hard
# to type after --set): riskppo.envs.market.csvfile reads them.
SEPARATORS = {",": ",", ";": ";", "\t": "\t", "|": "|", "tab": "\t", "\\t": "\t", "pipe": "|"}


def normalize_sep(sep: str | None) -> str | None:
    """The separator character ``sep`` names (``tab``, ``\\t`` and ``pipe`` included); None:
    detected. ValueError for anything else."""
    if sep is None:
        return None
    found = SEPARATORS.get(sep.lower()) if isinstance(sep, str) else None
    if found is None:
        raise ValueError(
            f"unknown field separator {sep!r}: one of ',', ';', tab, pipe ('|'), or null to "
            "detect it from the header"
        )
    return found


TRADING_ID = "riskppo/Trading-v0"  # the trading env's Gymnasium id (riskppo.envs.registration)
PORTFOLIO_ID = "riskppo/Portfolio-v0"  # the many-asset portfolio env (riskppo.envs.portfolio)


def signal_names(signals: object) -> tuple[str, ...]:
    """``signals`` (a list of a file's own column names) as a tuple of distinct, non-empty names;
    ``ValueError`` naming the bad one (a single name is refused with the list to write)."""
    if isinstance(signals, str):
        raise ValueError(f"must be a list of column names, e.g. [{signals}]")
    names = tuple(cast(Iterable[object], signals))
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{name!r} is not a column name")
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise ValueError(f"column {dup!r} is named twice")
    return cast(tuple[str, ...], names)


class DataConfig(_Section):
    """Trading data source (R-TRADE-1)."""

    dataset: Literal["googl", "eurusd", "sp500"] | None = Field(
        "googl",
        description="bundled data for riskppo/Trading-v0: googl (GOOGL daily OHLCV "
        "2009-2018, from gym-anytrading), eurusd (EURUSD hourly OHLCV 2017, gym-anytrading), "
        "sp500 (daily closes of 20 US stocks, from skfolio; needs data.symbol); ignored when "
        "data.path is set",
    )
    path: str | None = Field(
        None,
        description="your own bars: a CSV (.csv, .csv.gz/.bz2/.zip/.xz, .txt) or Parquet "
        "(.parquet, .pq) file; wins over data.dataset (docs/data.md)",
    )
    symbol: str | None = Field(
        None,
        validate_default=True,
        description="dataset sp500 only (required there): the stock, one of "
        + ", ".join(SP500_SYMBOLS),
    )
    split: tuple[float, float, float] = Field(
        (0.7, 0.15, 0.15),
        description="fractions of the rows, in time order, for train, validation and test; "
        "three positive numbers summing to 1",
    )
    nan_policy: Literal["raise", "ffill"] = Field(
        "raise",
        description="data.path only: raise on a missing value, or forward-fill runs of at most "
        "ffill_limit bars",
    )
    ffill_limit: int = Field(5, ge=0, description="longest NaN run nan_policy='ffill' fills")
    sort: bool = Field(False, description="data.path only: sort rows by time (unsorted raises)")
    timestamp_format: str | None = Field(
        None,
        description="data.path only: strftime format of the time column ('%d/%m/%Y'), or an "
        "epoch unit (s, ms, us, ns); default: ISO 8601 and the common formats are tried",
    )
    dayfirst: bool | None = Field(
        None,
        description="data.path only: read 01/02/2017 as 1 February (true) or 2 January (false); "
        "default: the order under which the timestamps increase",
    )
    adjusted: bool = Field(
        False,
        description="data.path (and portfolio paths) only: trade the file's Adj Close, adjusted "
        "for splits and dividends, with open/high/low scaled by the same factor; the file must "
        "have an Adj Close column",
    )
    sep: str | None = Field(
        None,
        description="data.path (and portfolio files): the CSV field separator: ',', ';', tab or "
        "pipe ('|'); default: ',', or the one the header line shows when it is one column on ',' "
        "(docs/data.md)",
    )
    decimal: Literal[".", ","] | None = Field(
        None,
        description="data.path (and portfolio files): the decimal mark of the numbers; default: "
        "'.', or ',' for a file not separated by ',' whose numbers have decimal commas "
        "(1.234,5: '.' only as thousands separator)",
    )
    signals: tuple[str, ...] = Field(
        (),
        description="your own numeric columns of the data.path file (or of the DataFrame passed "
        "as df=), named exactly, observed raw after the features: a value is known at its bar's "
        "close; missing values follow nan_policy; portfolios: per asset (docs/data.md)",
    )
    bars: tuple[int, int, int, int] | None = Field(
        None,
        description="[start, train_end, val_end, end] row positions (0-based, ends exclusive) "
        "instead of split: train on rows start..train_end-1, validate on train_end..val_end-1 "
        "(none when equal), test on val_end..end-1; rows from end on are never read "
        "(walk-forward segments)",
    )

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if abs(sum(self.split) - 1.0) > 1e-9 or min(self.split) <= 0:
            raise ValueError(f"split={self.split} must be three positive fractions summing to 1")
        if self.bars is not None:
            start, train_end, val_end, end = self.bars
            if not 0 <= start < train_end <= val_end < end:
                raise ValueError(
                    f"bars={list(self.bars)} must be [start, train_end, val_end, end] with "
                    "0 <= start < train_end <= val_end < end"
                )
        return self

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, path: str | None) -> str | None:
        """A relative path is relative to the working directory when the config is made and
        kept absolute, so a run directory's ``config.yaml`` finds the data from anywhere."""
        if path is None:
            return None
        if not path.strip():
            raise ValueError("empty; give the path of a CSV or Parquet file, or null")
        return os.path.abspath(os.path.expanduser(path))

    @field_validator("signals", mode="before")
    @classmethod
    def _signal_list(cls, signals: object) -> object:
        """A list of distinct column names (a single name is refused with the list to write)."""
        return signal_names(signals) if isinstance(signals, str | list | tuple) else signals

    @field_validator("sep")
    @classmethod
    def _known_sep(cls, sep: str | None) -> str | None:
        """One of the separators :func:`~riskppo.envs.load_ohlcv` reads, as that character."""
        return normalize_sep(sep)

    @field_validator("symbol")
    @classmethod
    def _check_symbol(cls, symbol: str | None, info: ValidationInfo) -> str | None:
        """Required (and one of :data:`SP500_SYMBOLS`, any case) for dataset sp500 without a
        path; refused for the other datasets."""
        dataset = info.data.get("dataset")
        if dataset != "sp500":
            if symbol is not None:
                raise ValueError(f"applies to data.dataset=sp500 only, not {dataset!r}; remove it")
            return None
        valid = ", ".join(SP500_SYMBOLS)
        if symbol is None:
            if info.data.get("path") is None:
                raise ValueError(f"required with data.dataset=sp500: one of {valid}")
            return None
        if symbol.upper() not in SP500_SYMBOLS:
            raise ValueError(f"not a stock of data.dataset=sp500; valid symbols: {valid}")
        return symbol.upper()


class AdversarialConfig(_Section):
    """State-adversarial regulariser (SA-PPO, Zhang et al. 2020; R-ADV).

    Adds ``kappa * max_{|ŝ-s|_inf <= eps} KL(π(·|s) ‖ π(·|ŝ))`` to the policy loss, the max
    approximated by ``pgd_steps`` signed-gradient steps in *normalised* observation space. ε ramps
    linearly from 0 to ``eps`` over ``eps_warmup_updates`` updates. ``kappa = 0`` switches it off.
    """

    kappa: float = Field(0.0, ge=0, description="weight of the SA-PPO regulariser; 0 = off")
    eps: float = Field(
        0.05,
        ge=0,
        description="radius of the L-infinity ball of observation perturbations, in "
        "normalised observation units",
    )
    eps_warmup_updates: int = Field(
        0,
        ge=0,
        description="updates over which eps ramps linearly from 0; 0 = full eps from the start",
    )
    pgd_steps: int = Field(
        3, ge=1, description="signed-gradient steps that search for the worst perturbation"
    )
    pgd_step_size: float | None = Field(
        None, gt=0, description="PGD step as a fraction of eps; None = 2.5/pgd_steps"
    )


# Hyperparameters PBT may tune (R-PBT-1): dotted config paths.
TUNABLE = (
    "ppo.learning_rate",
    "ppo.ent_coef",
    "ppo.clip_range",
    "ppo.vf_coef",
    "ppo.gae_lambda",
    "risk.cvar_limit",
    "risk.lambda_lr",
    "adversarial.kappa",
    "adversarial.eps",
)


class HyperparamSpec(_Section):
    """Bounds of one tuned hyperparameter. ``log``: resampled log-uniformly (needs low > 0)."""

    low: float = Field(description="lower bound of the tuned value")
    high: float = Field(description="upper bound of the tuned value (> low)")
    log: bool = Field(True, description="resample log-uniformly (needs low > 0); false: uniformly")

    @model_validator(mode="after")
    def _check(self) -> HyperparamSpec:
        if self.high <= self.low:
            raise ValueError(f"high={self.high} must be > low={self.low}")
        if self.log and self.low <= 0:
            raise ValueError(f"log=true needs low > 0 (got low={self.low}); set log: false")
        return self


def _default_pbt_space() -> dict[str, HyperparamSpec]:
    return {
        "ppo.learning_rate": HyperparamSpec(low=1e-5, high=3e-3),
        "ppo.ent_coef": HyperparamSpec(low=1e-4, high=5e-2),
    }


class PBTConfig(_Section):
    """Population-based training (R-PBT; Jaderberg et al. 2017), used by ``riskppo pbt``.

    Every ``ready_updates`` updates each member is evaluated (``metric``); the bottom
    ``quantile`` of the population copies a member of the top ``quantile`` (exploit) and perturbs
    its hyperparameters (explore: × one of ``perturb_factors``, or with ``resample_prob`` a fresh
    draw), always within the declared bounds. ``quantile: 0`` never exploits — the same budget
    as independent runs, the baseline PBT is compared with.

    Trading and portfolio envs (R-PBT-4): a member is *feasible* when its validation
    horizon-CVaR meets the CVaR limit (``selection_cvar_limit``) and it is in the market on at
    least ``min_market_share`` of the validation bars; feasible members score ``metric``, the
    others rank below every feasible member, ordered by violation (see
    :func:`riskppo.pbt.member.constrained_score`).
    """

    backend: Literal["local", "ray"] = Field(
        "local",
        description="local: worker processes on this machine; ray: Ray Tune (pip install "
        "riskppo[ray])",
    )
    population: int = Field(4, ge=2, description="members trained together")
    ready_updates: int = Field(
        5, ge=1, description="updates each member trains between two evaluations (one round)"
    )
    quantile: float = Field(
        0.25,
        ge=0,
        le=0.5,
        description="share of the population that exploits (bottom) and is copied (top) "
        "each round; 0 = never exploit (independent runs)",
    )
    resample_prob: float = Field(
        0.25,
        ge=0,
        le=1,
        description="chance that explore draws a hyperparameter afresh from its bounds "
        "instead of multiplying it by a perturb factor",
    )
    perturb_factors: tuple[float, float] = Field(
        (0.8, 1.2),
        description="the two factors explore multiplies a hyperparameter by (one chosen at "
        "random), clipped to its bounds",
    )
    optimizer_strategy: Literal["copy", "reset"] = Field(
        "copy", description="exploit: copy the source's optimizer state, or reset it"
    )
    metric: Literal[
        "auto", "mean_return", "cvar", "sharpe", "sortino", "calmar", "cvar_95", "annual_return"
    ] = Field(
        "auto",
        description="auto: validation-period Sharpe for the trading and portfolio envs (feasible "
        "members first, see min_market_share), mean evaluation return otherwise",
    )
    min_market_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="trading, portfolio: a member is feasible only if in the market on at least "
        "this share of validation bars; flat or infeasible members rank below every feasible one",
    )
    selection_cvar_limit: float | None = Field(
        None,
        description="trading, portfolio: the limit on the validation horizon-CVaR members are "
        "selected against; None = the risk.cvar_limit PBT starts from (fixed for the whole "
        "population, also when risk.cvar_limit is tuned); no limit if that is None too",
    )
    eval_episodes: int = Field(
        10, ge=1, description="episodes a member is evaluated on each round (non-trading envs)"
    )
    workers: int | None = Field(None, ge=1, description="parallel members; None = min(pop, cores)")
    max_failures: int = Field(
        2,
        ge=0,
        description="failed intervals a member may restart from: local backend, a "
        "member whose worker dies or raises scores -inf that round and restarts from its last "
        "recorded checkpoint; after max_failures + 1 failures it is frozen and the rest go on "
        "(0: frozen at its first failure). Ray backend: restarts of a failed trial",
    )
    hyperparams: dict[str, HyperparamSpec] = Field(
        default_factory=_default_pbt_space,
        description="the tuned hyperparameters: dotted config key -> {low, high, log}; keys "
        "from the tunable list below",
    )

    @model_validator(mode="after")
    def _check(self) -> PBTConfig:
        unknown = sorted(set(self.hyperparams) - set(TUNABLE))
        if unknown:
            raise ValueError(f"cannot tune {unknown}; tunable: {list(TUNABLE)}")
        if not self.hyperparams:
            raise ValueError("hyperparams must name at least one tunable hyperparameter")
        if min(self.perturb_factors) <= 0:
            raise ValueError(f"perturb_factors={self.perturb_factors} must be positive")
        return self
