"""The trial ledger: every judged trading record on a market, so the verdict knows how many
configurations were tried on that data (docs/risk.md, "How many trials").

A ledger is a directory (default ``runs/ledger`` beside the runs, ``$RISKPPO_LEDGER`` or
``--ledger PATH`` elsewhere) holding

* ``ledger.jsonl``: one JSON object per judged record (:class:`LedgerRow`), appended with
  ``O_APPEND`` in one ``write`` and ``fsync``-ed, so concurrent processes (walk-forward workers,
  universe cells) never interleave rows and a process killed at any point leaves at most one
  torn last line, which readers skip with a warning (the next append starts on a new line);
* ``returns/<row id>.npz``: that record's out-of-sample per-bar returns (the account's simple
  returns; rows written before November 2026 hold log returns) and bar times
  (``numpy`` arrays, no pickle), written atomically before its row — what the probability of
  backtest overfitting needs (:func:`riskppo.stats.probability_of_backtest_overfitting`).

A **configuration** is the config with the keys that do not change what is learned or how it is
judged removed (:data:`RUN_ONLY_KEYS`: the seed, devices and threads, logging, checkpoints, and
where the data lives — the data is identified by its fingerprint instead), plus the judging
protocol (a walk-forward's schedule). Seeds of one configuration are one configuration; another
learning rate, feature list or training budget is another.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import math
import os
import secrets
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from riskppo.config import Config
from riskppo.config.data import PORTFOLIO_ID
from riskppo.persist.files import sha256
from riskppo.runs.rundir import RunDirError
from riskppo.safefs import (
    UnsafePathError,
    ensure_real_dir,
    fsync_dir,
    open_nofollow,
    write_bytes_atomic,
)
from riskppo.stats import PBO, probability_of_backtest_overfitting, sharpe

__all__ = [
    "DEFAULT_LEDGER",
    "LEDGER_ENV",
    "RUN_ONLY_KEYS",
    "Judged",
    "LedgerError",
    "LedgerRow",
    "SameBars",
    "Trials",
    "bar_times",
    "config_hash",
    "count_trials",
    "data_fingerprint",
    "ledger_path",
    "open_ledger",
    "read_ledger",
    "record_trial",
]

LEDGER_ENV = "RISKPPO_LEDGER"
DEFAULT_LEDGER = Path("runs") / "ledger"
ROWS_FILE = "ledger.jsonl"
RETURNS_DIR = "returns"
# config keys that are not part of "a configuration" (dotted; a section name drops the section)
RUN_ONLY_KEYS: tuple[str, ...] = (
    "seed",
    "device",
    "num_threads",
    "compile",
    "cuda_graphs",
    "env.vec_env",
    "env.step_timeout",
    "monitor",
    "checkpoint",
    "data.path",
    "data.dataset",
    "data.symbol",
    "prior_trials",
)
PBO_MAX_BLOCKS = 16  # Bailey et al. (2017) use S = 16
PBO_MIN_BLOCK_BARS = 20  # fewer bars per block and a block's Sharpe ratio is mostly noise


class LedgerError(RunDirError):
    """The trial ledger cannot be used (its path is a file, a row cannot be written)."""


def ledger_path(option: str | None, *, enabled: bool = True) -> Path | None:
    """The ledger directory a command uses: none with ``--no-ledger`` (``enabled=False``) or
    ``RISKPPO_LEDGER=off``; else ``--ledger PATH``, else ``$RISKPPO_LEDGER``, else
    :data:`DEFAULT_LEDGER` (relative to the working directory, like the default run
    directories)."""
    if not enabled:
        return None
    if option:
        return Path(option)
    env = os.environ.get(LEDGER_ENV, "").strip()
    if env.lower() == "off":
        return None
    return Path(env) if env else DEFAULT_LEDGER


def data_fingerprint(cfg: Config) -> str:
    """``sha256:<hex>`` of the bytes of ``data.path``'s file (a copy elsewhere is the same
    data), or ``<dataset>[<symbol>]:sha256:<hex>`` of the bundled dataset's file; for the
    portfolio env, whose assets are in ``env.kwargs``, :func:`portfolio_fingerprint`."""
    from riskppo.envs.market.datasets import dataset_path

    d = cfg.data
    assets = portfolio_assets(cfg)
    if assets is not None:
        return portfolio_fingerprint(assets)
    if d.path:
        return f"sha256:{sha256(Path(d.path))}"
    name = str(d.dataset) + (f"[{d.symbol.upper()}]" if d.symbol else "")
    return f"{name}:sha256:{sha256(dataset_path(str(d.dataset)))}"


class PortfolioAssets(NamedTuple):
    """Where a portfolio config's assets come from when they are in ``env.kwargs``: a bundled
    ``dataset`` and its ``symbols`` (upper case, in the order given; empty: all), or ``files``
    (each asset's ``paths`` in order, or the one ``table``)."""

    dataset: str | None
    symbols: tuple[str, ...]
    files: tuple[str, ...]

    @property
    def label(self) -> str:
        """The ledger's name of the data (``prior_trials`` keys): ``SP500[AAPL,KO]``, or the
        files' names joined by ``+``."""
        if self.dataset:
            which = f"[{','.join(self.symbols)}]" if self.symbols else ""
            return self.dataset.upper() + which
        return "+".join(Path(f).name for f in self.files) or "portfolio"


def portfolio_assets(cfg: Config) -> PortfolioAssets | None:
    """The assets of a portfolio config whose ``data`` section names no data; None otherwise."""
    d, kw = cfg.data, cfg.env.kwargs
    if cfg.env.id != PORTFOLIO_ID or d.path or d.dataset:
        return None
    files = [kw["table"]] if kw.get("table") else list(kw.get("paths") or ())
    return PortfolioAssets(
        str(kw["dataset"]) if kw.get("dataset") else None,
        tuple(str(x).upper() for x in kw.get("symbols") or ()),
        tuple(str(f) for f in files),
    )


def portfolio_fingerprint(assets: PortfolioAssets) -> str:
    """``<label>:sha256:<hex>`` of the bundled dataset's file, or ``sha256:<hex>`` of the asset
    files' digests in order: a copy elsewhere is the same data, another order another."""
    from riskppo.envs.market.datasets import dataset_path

    if assets.dataset:
        which = f"[{','.join(assets.symbols)}]" if assets.symbols else ""
        return f"{assets.dataset}{which}:sha256:{sha256(dataset_path(assets.dataset))}"
    digests = ",".join(sha256(Path(f)) for f in assets.files)
    return f"sha256:{hashlib.sha256(digests.encode()).hexdigest()}"


def _drop(tree: dict[str, Any], dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.get(key, {})
        if not isinstance(tree, dict):
            return
    tree.pop(leaf, None)


def config_hash(cfg: Config, kind: str, protocol: Mapping[str, Any] | None = None) -> str:
    """SHA-256 (hex) of the configuration: ``cfg`` without :data:`RUN_ONLY_KEYS` (and without
    its ``pbt`` section unless ``kind == "pbt"``), the ``kind`` of judgement (``"train"``,
    ``"walkforward"``, ``"pbt"``) and its ``protocol`` (e.g. a walk-forward's schedule)."""
    tree = cfg.to_dict()
    for key in (*RUN_ONLY_KEYS, *(() if kind == "pbt" else ("pbt",))):
        _drop(tree, key)
    payload = {"kind": kind, "config": tree, "protocol": dict(protocol or {})}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Judged:
    """A judged out-of-sample record, as the ledger needs it: ``returns`` are the agent's
    per-bar net simple returns ``[T]`` indexed by bar time; ``periods_per_year`` annualises its
    Sharpe ratio."""

    data: str  # :func:`data_fingerprint`
    data_label: str  # the data's name, for people ("GOOGL", "prices.csv")
    config: str  # :func:`config_hash`
    kind: str
    returns: pd.Series
    periods_per_year: float
    run_dir: str


@dataclass(frozen=True)
class LedgerRow:
    """One line of ``ledger.jsonl``. ``first``/``last``: ISO times of the record's first and
    last bar; ``sharpe``: its annual Sharpe ratio (None if undefined); ``returns``: its
    returns file, relative to the ledger."""

    id: str
    data: str
    data_label: str
    config: str
    kind: str
    first: str
    last: str
    n_bars: int
    sharpe: float | None
    periods_per_year: float
    returns: str
    run_dir: str
    time: str

    @classmethod
    def from_json(cls, obj: Any) -> LedgerRow:
        """``ValueError`` unless ``obj`` is a row written by :func:`record_trial`."""
        names = {f.name for f in fields(cls)}
        if not isinstance(obj, dict) or not names <= set(obj):
            raise ValueError("not a ledger row")
        row = cls(**{k: obj[k] for k in names})
        for stamp in (row.first, row.last):
            pd.Timestamp(stamp)  # ValueError if it does not parse
        return row

    def overlaps(self, other: LedgerRow) -> bool:
        a0, a1 = pd.Timestamp(self.first), pd.Timestamp(self.last)
        return a0 <= pd.Timestamp(other.last) and pd.Timestamp(other.first) <= a1


def bar_times(index: pd.Index) -> np.ndarray:
    """Bar times as int64 nanoseconds (UTC for tz-aware times)."""
    times = pd.DatetimeIndex(index)
    if times.tz is not None:
        times = times.tz_convert("UTC").tz_localize(None)
    return np.asarray(times.asi8, dtype=np.int64)


def _row_for(judged: Judged, row_id: str) -> LedgerRow:
    r = judged.returns
    times = pd.DatetimeIndex(r.index)
    value = sharpe(r.to_numpy(dtype=np.float64), judged.periods_per_year)
    return LedgerRow(
        id=row_id,
        data=judged.data,
        data_label=judged.data_label,
        config=judged.config,
        kind=judged.kind,
        first=times[0].isoformat(),
        last=times[-1].isoformat(),
        n_bars=len(r),
        sharpe=float(value) if math.isfinite(value) else None,
        periods_per_year=float(judged.periods_per_year),
        returns=f"{RETURNS_DIR}/{row_id}.npz",
        run_dir=judged.run_dir,
        time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )


def _same_judgement(a: LedgerRow, b: LedgerRow) -> bool:
    """One run judged again (a resumed run, a repeated backtest): not a new row."""
    keys = ("data", "config", "run_dir", "first", "last", "n_bars")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def _append_line(path: Path, line: str) -> None:
    """Append ``line`` as one ``write`` with ``O_APPEND`` and ``fsync`` it; start it on a new
    line when the file ends in a torn row (a writer killed mid-row). An exclusive ``flock``
    (released by the kernel if the writer dies) keeps another writer's row whole while the
    tail is read: without it a row still being copied in looks torn."""
    fd = open_nofollow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        torn_tail = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        data = (("\n" if torn_tail else "") + line + "\n").encode("utf-8")
        written = os.write(fd, data)
        if written != len(data):
            raise LedgerError(f"{path}: short write ({written} of {len(data)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_returns(ledger: Path, row: LedgerRow, returns: pd.Series) -> None:
    buffer = io.BytesIO()
    values = returns.to_numpy(dtype=np.float64)
    np.savez(buffer, time=bar_times(returns.index), returns=values)
    write_bytes_atomic(ledger / row.returns, buffer.getvalue())


def open_ledger(ledger: Path) -> Path:
    """Create ``ledger`` (and its returns directory) or check it is a real directory:
    :class:`LedgerError` if not. Commands call it first, so a bad ``--ledger`` stops before
    any training."""
    try:
        ensure_real_dir(ledger)
        ensure_real_dir(ledger / RETURNS_DIR)
    except (FileExistsError, NotADirectoryError, UnsafePathError):
        raise LedgerError(
            f"trial ledger {ledger} is not a directory; pass --ledger DIR (or --no-ledger)"
        ) from None
    return ledger


@dataclass(frozen=True)
class LedgerRead:
    """The rows of a ledger that read back, and how many lines did not (torn or damaged)."""

    rows: list[LedgerRow]
    skipped: int


def read_ledger(ledger: Path) -> LedgerRead:
    """Every row of ``ledger`` (none if it does not exist yet); a line that is not a row (a
    torn last write, a damaged copy) is skipped with one warning naming the file and lines."""
    path = ledger / ROWS_FILE
    if not path.exists():
        return LedgerRead([], 0)
    with os.fdopen(open_nofollow(path, os.O_RDONLY), "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)  # no row of a live writer read half-written
        raw = f.read()
    rows, bad = [], []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append(LedgerRow.from_json(json.loads(line.decode("utf-8"))))
        except (ValueError, TypeError, UnicodeDecodeError):
            bad.append(number)
    if bad:
        warnings.warn(
            f"trial ledger {path}: skipped {len(bad)} line(s) that are not whole rows (line "
            f"{', '.join(map(str, bad[:5]))}{', …' if len(bad) > 5 else ''}; a write cut short)",
            stacklevel=2,
        )
    return LedgerRead(rows, len(bad))


@dataclass(frozen=True)
class ConfigTrials:
    """One configuration judged on the data: its rows' mean annual Sharpe ratio (None if none
    is defined), how many rows (seeds, reruns), and its latest run directory."""

    config: str
    kind: str
    sharpe: float | None
    rows: int
    run_dir: str


@dataclass(frozen=True)
class Trials:
    """What the ledger says about a judged record: the configurations judged on the same data
    over an overlapping span (the judged one included), the variance (ddof = 1) of their annual
    Sharpe ratios (None with fewer than two defined), and PBO over the configurations with
    records on exactly the same bars (None with fewer than two, or too few bars); ``same_bars``:
    those records (for the test of superior predictive ability; not in :meth:`to_dict`);
    ``prior``: configurations judged on this data before the ledger could see them (the judged
    config's ``prior_trials``), which the verdict's N adds to :attr:`n_configs`."""

    ledger: str
    configs: list[ConfigTrials]
    sharpe_var: float | None
    pbo: PBO | None
    skipped: int
    same_bars: SameBars | None = None
    prior: int = 0

    @property
    def n_configs(self) -> int:
        return len(self.configs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the PBO's per-split arrays left out)."""
        pbo = None
        if self.pbo is not None:
            p = self.pbo
            pbo = {
                "pbo": p.pbo,
                "n_configs": p.n_configs,
                "n_bars": p.n_bars,
                "n_blocks": p.n_blocks,
                "n_splits": p.n_splits,
                "slope": p.slope if math.isfinite(p.slope) else None,
                "intercept": p.intercept,
                "prob_oos_loss": p.prob_oos_loss,
            }
        return {
            "ledger": self.ledger,
            "n_configs": self.n_configs,
            "prior_trials": self.prior,
            "sharpe_var": self.sharpe_var,
            "configs": [asdict(c) for c in self.configs],
            "pbo": pbo,
            "skipped_lines": self.skipped,
        }


def _group(rows: Sequence[LedgerRow]) -> dict[str, list[LedgerRow]]:
    """Rows by configuration, in the order each configuration first appears."""
    groups: dict[str, list[LedgerRow]] = {}
    for row in rows:
        groups.setdefault(row.config, []).append(row)
    return groups


def _config_trials(config: str, rows: list[LedgerRow]) -> ConfigTrials:
    values = [r.sharpe for r in rows if r.sharpe is not None and math.isfinite(r.sharpe)]
    mean = float(np.mean(values)) if values else None
    return ConfigTrials(config, rows[-1].kind, mean, len(rows), rows[-1].run_dir)


def _load_returns(ledger: Path, row: LedgerRow) -> tuple[np.ndarray, np.ndarray] | None:
    """``(times, returns)`` of a row's returns file, or None if it does not read back."""
    try:
        with np.load(ledger / row.returns, allow_pickle=False) as z:
            return np.asarray(z["time"]), np.asarray(z["returns"], dtype=np.float64)
    except (OSError, KeyError, ValueError):
        return None


@dataclass(frozen=True)
class SameBars:
    """The records of the configurations judged on exactly one record's bars: ``configs`` ``[K]``
    (their hashes, in ledger order) and ``returns`` ``[T, K]`` (per-bar simple returns; the seeds
    of one configuration averaged bar by bar: capital split equally over them) at ``times``
    ``[T]`` (int64 nanoseconds, UTC for tz-aware bars)."""

    configs: list[str]
    returns: np.ndarray
    times: np.ndarray


def _same_bars(ledger: Path, judged: LedgerRow, rows: Sequence[LedgerRow]) -> SameBars | None:
    """The configurations with a record on exactly ``judged``'s bars, ``judged``'s included
    (None if its own record does not read back or a record is not finite)."""
    mine = _load_returns(ledger, judged)
    if mine is None:
        return None
    span = ("first", "last", "n_bars")
    same = [r for r in rows if all(getattr(r, k) == getattr(judged, k) for k in span)]
    columns: dict[str, list[np.ndarray]] = {}
    for config, group in _group(same).items():
        for row in group:
            got = mine if row.id == judged.id else _load_returns(ledger, row)
            if (
                got is not None
                and np.array_equal(got[0], mine[0])
                and got[1].shape == mine[1].shape
            ):
                columns.setdefault(config, []).append(got[1])
    matrix = np.column_stack([np.mean(v, axis=0) for v in columns.values()])
    if not np.isfinite(matrix).all():
        return None
    return SameBars(list(columns), matrix, mine[0])


def _pbo(judged: LedgerRow, same: SameBars | None) -> PBO | None:
    """PBO over the configurations with a record on exactly ``judged``'s bars."""
    blocks = min(PBO_MAX_BLOCKS, 2 * (judged.n_bars // (2 * PBO_MIN_BLOCK_BARS)))
    if same is None or len(same.configs) < 2 or blocks < 2:
        return None
    return probability_of_backtest_overfitting(same.returns, n_blocks=blocks)


def count_trials(ledger: Path, judged: LedgerRow, read: LedgerRead) -> Trials:
    """The :class:`Trials` of ``judged`` (a row of ``read``) among the ledger's rows: same data
    fingerprint, overlapping span."""
    rows = [r for r in read.rows if r.data == judged.data and r.overlaps(judged)]
    if not any(r.id == judged.id for r in rows):
        rows.append(judged)
    configs = [_config_trials(c, g) for c, g in _group(rows).items()]
    values = [c.sharpe for c in configs if c.sharpe is not None]
    var = float(np.var(values, ddof=1)) if len(values) >= 2 else None
    same = _same_bars(ledger, judged, rows)
    return Trials(str(ledger), configs, var, _pbo(judged, same), read.skipped, same)


def record_trial(ledger: Path, judged: Judged) -> Trials:
    """Append ``judged`` to ``ledger`` (its returns file first, then its row; nothing if this
    run's same judgement is there already) and count the trials on its data."""
    if len(judged.returns) < 2:
        raise ValueError("a judged record needs at least 2 bars")
    open_ledger(ledger)
    row = _row_for(judged, f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(6)}")
    before = read_ledger(ledger)
    known = next((r for r in before.rows if _same_judgement(r, row)), None)
    if known is not None and _load_returns(ledger, known) is not None:
        return count_trials(ledger, known, before)
    _write_returns(ledger, row, judged.returns)
    line = json.dumps(asdict(row), sort_keys=True, allow_nan=False, ensure_ascii=False)
    _append_line(ledger / ROWS_FILE, line)
    fsync_dir(ledger)
    return count_trials(ledger, row, LedgerRead([*before.rows, row], before.skipped))
