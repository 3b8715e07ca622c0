"""Nested selection among configurations inside a walk-forward (``riskppo walkforward
--candidates A.yaml B.yaml ...``).

Choosing the best of several configurations on the bars they are then judged on makes the best
look better than it is (Cawley & Talbot, "On over-fitting in model selection and subsequent
selection bias in performance evaluation", JMLR 2010; Bailey & López de Prado, "The deflated
Sharpe ratio", 2014). Here the choice is made inside each segment's training rows, so it never
reads a bar it is judged on — nested validation (Varma & Simon, BMC Bioinformatics 2006;
Pardo, *The Evaluation and Optimization of Trading Strategies*, 2008, ch. 11):

* segment ``k`` trains on rows ``[train_start, test_start)``; the last ``select_bars`` of them,
  ``[val_start, test_start)``, are its inner validation rows, the rows before them its inner
  training rows (:func:`inner_segment`);
* every candidate, for every seed, trains on the inner training rows and is backtested on the
  validation rows: a *selection cell* ``select/segKK-sS-cI/`` (``I``: the candidate's place in
  ``--candidates``), a cell like the others (a worker process, finished when its ``cell.json``
  exists, re-run by ``--resume`` otherwise);
* the candidate with the highest validation Sharpe ratio (:data:`STATISTIC_TEXT`) is the
  segment's choice, written to ``select/segKK.json`` (:func:`choose`) once all its selection
  cells have finished;
* the chosen candidate is trained again on the segment's whole training span (the usual refit
  after model selection) and trades the segment's test rows: the cell ``cells/segKK-sS/``, whose
  ``cell.json`` names the candidate.

The stitched out-of-sample record is that of the selection procedure, judged as one
configuration: the trial ledger gets one row for it (:func:`procedure_hash`) — choosing inside
the training span costs no trial. The stitched record is judged under the first candidate's risk
settings (CVaR level, horizon and limit; docs/risk.md, "Choosing among configurations").
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from riskppo.config import Config, ConfigError
from riskppo.envs.registration import data_kwargs, market_kind
from riskppo.logs import OnMessage, log_message
from riskppo.runs.ledger import config_hash, data_fingerprint
from riskppo.safefs import remove_entry
from riskppo.walkforward.cells import CELL_DONE, read_cell, write_json
from riskppo.walkforward.plan import CellJob, Segment, WalkForwardSettings, cell_name

__all__ = [
    "MIN_SELECT_BARS",
    "STATISTIC",
    "Candidate",
    "Selection",
    "check_candidates",
    "check_data",
    "check_select_bars",
    "choose",
    "chosen_job",
    "inner_segment",
    "new_selection",
    "procedure_hash",
    "read_selection",
    "selection_block",
    "selection_html",
    "selection_jobs",
    "selection_lines",
    "waits_for",
    "write_selection",
]

SELECT_DIR = "select"
CANDIDATES_DIR = "candidates"
MIN_SELECT_BARS = 3  # two returns: the least a Sharpe ratio is defined on
STATISTIC = "validation_sharpe"
STATISTIC_TEXT = (
    "the mean over the seeds of the agent's annualised Sharpe ratio of net simple returns on the "
    "segment's validation rows (the metrics table's Sharpe; an undefined one, a flat agent, "
    "counts as 0; a tie goes to the candidate named first)"
)
_SAME = "the candidates must share the env kind and the data"
COST_KEYS = ("fee", "fill", "borrow_rate")  # the trading env's keywords that set its costs


@dataclass(frozen=True)
class Candidate:
    """One configuration to choose among: ``name`` (its file's stem, made unique), ``source``
    (the file or shipped config as the user named it) and its ``config``."""

    name: str
    source: str
    config: Config


@dataclass(frozen=True)
class Selection:
    """The candidates and ``select_bars``, the number of training rows (bars) at the end of
    each segment's training span on which they are compared."""

    candidates: tuple[Candidate, ...]
    select_bars: int

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.candidates]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``walkforward.json``'s ``select``)."""
        return {
            "select_bars": self.select_bars,
            "statistic": STATISTIC,
            "candidates": [
                {"name": c.name, "source": c.source, "file": _candidate_file(i)}
                for i, c in enumerate(self.candidates)
            ],
        }


def _candidate_file(i: int) -> str:
    return f"{CANDIDATES_DIR}/c{i}.yaml"


def new_selection(
    sources: Sequence[str], configs: Sequence[Config], select_bars: int | None, step: int
) -> Selection:
    """The selection of ``configs`` (read from ``sources``) on ``select_bars`` rows (None: the
    segment length ``step``, in bars); each candidate is named by its file's stem (``-2``, ...
    where two stems are equal)."""
    names: list[str] = []
    for source in sources:
        stem = Path(source).name.split(".")[0] or "candidate"
        name, k = stem, 2
        while name in names:
            name, k = f"{stem}-{k}", k + 1
        names.append(name)
    cands = tuple(Candidate(n, s, c) for n, s, c in zip(names, sources, configs, strict=True))
    return Selection(cands, step if select_bars is None else select_bars)


def write_selection(run_dir: Path, sel: Selection) -> None:
    """Write each candidate's config to ``candidates/cI.yaml`` (what ``--resume`` reads)."""
    from riskppo.safefs import ensure_real_dir

    ensure_real_dir(run_dir / CANDIDATES_DIR)
    for i, c in enumerate(sel.candidates):
        c.config.to_yaml(run_dir / _candidate_file(i))


def read_selection(run_dir: Path, stored: Mapping[str, Any]) -> Selection | None:
    """The selection a run was started with (``stored``: its ``walkforward.json``), None for a
    run of one config; ``ConfigError`` (one line) when its files do not read back."""
    block = stored.get("select")
    if block is None:
        return None
    try:
        cands = tuple(
            Candidate(d["name"], d["source"], Config.from_yaml(run_dir / d["file"]))
            for d in block["candidates"]
        )
        return Selection(cands, int(block["select_bars"]))
    except (KeyError, TypeError, ValueError) as exc:  # ConfigError included
        raise ConfigError(
            f"{run_dir}: the candidates do not read back ({exc}); start a new run"
        ) from None


def check_candidates(sel: Selection, settings: WalkForwardSettings) -> None:
    """``ConfigError`` (one line naming the flag or the file) unless the candidates can be
    chosen among: at least two, one env kind (the trading env), no ``data.bars``, the same
    costs, no warm start, ``select_bars`` ≥ :data:`MIN_SELECT_BARS` (their data:
    :func:`check_data`)."""
    cands = sel.candidates
    if len(cands) < 2:
        raise ConfigError("--candidates needs at least two config files to choose among")
    first = cands[0]
    for c in cands[1:]:
        if c.config.env.id != first.config.env.id:
            raise ConfigError(
                f"--candidates: {c.source} has env.id {c.config.env.id!r}, {first.source} "
                f"{first.config.env.id!r}; {_SAME}"
            )
    market_kind(first.config.env.id, f"--candidates ({first.source})", single_asset=True)
    if settings.warm_start:
        raise ConfigError(
            "--candidates with --warm-start: the chosen candidate may change from one segment "
            "to the next, so a segment cannot start from the previous one's weights; drop "
            "--warm-start"
        )
    if sel.select_bars < MIN_SELECT_BARS:
        raise ConfigError(
            f"--select-bars must be at least {MIN_SELECT_BARS}, got {sel.select_bars}"
        )
    _check_costs(cands)
    for c in cands:
        if c.config.data.bars is not None:
            raise ConfigError(f"--candidates: {c.source} sets data.bars; walk-forward sets it")


def _check_costs(cands: Sequence[Candidate]) -> None:
    """``ConfigError`` unless the candidates trade under the same costs (:data:`COST_KEYS`, a
    key left out at the env's default): the stitched record is judged under one fee, fill and
    borrow rate (the random-timing null's), and a lower fee is no configuration to choose."""
    from riskppo.envs.trading.env import TradingEnv

    params = inspect.signature(TradingEnv.__init__).parameters

    def costs(c: Candidate) -> dict[str, Any]:
        return {k: c.config.env.kwargs.get(k, params[k].default) for k in COST_KEYS}

    first = costs(cands[0])
    for c in cands[1:]:
        if costs(c) != first:
            raise ConfigError(
                f"--candidates: {c.source} trades under other costs than {cands[0].source} "
                f"({costs(c)} vs {first}); the candidates must share env.kwargs "
                f"{', '.join(COST_KEYS)}"
            )


def check_data(sel: Selection) -> int:
    """The number of rows the candidates trade (the rows the segments are cut from);
    ``ConfigError`` naming the file when a candidate trades another file or other rows, or is
    the same configuration as another."""
    from riskppo.envs.trading.factory import trading_range

    spans = []
    for c in sel.candidates:
        df, _, _ = trading_range(part="train", **data_kwargs(c.config.data))
        spans.append((len(df), str(df.index[0]), str(df.index[-1])))
    prints = [data_fingerprint(c.config) for c in sel.candidates]
    first = sel.candidates[0]
    for c, span, fp in zip(sel.candidates[1:], spans[1:], prints[1:], strict=True):
        if fp != prints[0] or span != spans[0]:
            what = "another file" if fp != prints[0] else f"other rows ({span[0]} from {span[1]})"
            raise ConfigError(
                f"--candidates: {c.source} trades {what} than {first.source} ({spans[0][0]} rows "
                f"from {spans[0][1]}); {_SAME}"
            )
    seen: dict[str, str] = {}
    for c in sel.candidates:  # on the same data: the ledger's configurations
        digest = config_hash(c.config, "walkforward")
        if digest in seen:
            raise ConfigError(
                f"--candidates: {c.source} is the same configuration as {seen[digest]} (seeds "
                "are not configurations: --seeds); drop one"
            )
        seen[digest] = c.source
    return spans[0][0]


def check_select_bars(segments: Sequence[Segment], select_bars: int) -> None:
    """``ConfigError`` unless every segment keeps at least ``select_bars`` inner training rows
    after its ``select_bars`` validation rows (bars)."""
    for seg in segments:
        train = seg.test_start - seg.train_start
        if train - select_bars < select_bars:
            raise ConfigError(
                f"--select-bars {select_bars} leaves {max(train - select_bars, 0)} rows to "
                f"train on in segment {seg.index} (of its {train} training rows); it must leave "
                "at least as many as it validates on: lower --select-bars or raise --initial "
                "(or --train-bars)"
            )


def inner_segment(seg: Segment, select_bars: int) -> Segment:
    """Segment ``seg``'s selection split as a segment: train on rows
    ``[train_start, test_start - select_bars)``, decide on the rows from there to
    ``test_start - 2``, the last position settling at row ``test_start - 1``'s close; its frame
    ends before ``seg``'s first test row, which no selection cell reads."""
    val_start = seg.test_start - select_bars
    return Segment(seg.index, seg.train_start, val_start, seg.test_start - 1, seg.test_start)


def select_cell_dir(run_dir: Path, seg: Segment, seed: int, i: int) -> Path:
    """The selection cell of candidate ``i`` in segment ``seg`` with ``seed``."""
    return run_dir / SELECT_DIR / f"{cell_name(seg, seed)}-c{i}"


def choice_path(run_dir: Path, seg: Segment) -> Path:
    return run_dir / SELECT_DIR / f"{seg.name}.json"


def is_selection_cell(job: CellJob) -> bool:
    return job.cell_dir.parent.name == SELECT_DIR


def selection_jobs(
    run_dir: Path, sel: Selection, seg: Segment, seeds: Sequence[int]
) -> list[CellJob]:
    """Segment ``seg``'s selection cells: every candidate with every seed, its full training
    budget (``total_timesteps``) on the inner training rows."""
    inner = inner_segment(seg, sel.select_bars)
    return [
        CellJob(
            c.config,
            inner,
            seed,
            c.config.total_timesteps,
            select_cell_dir(run_dir, seg, seed, i),
            None,
            extra={"candidate": c.name, "role": "validation"},
        )
        for seed in seeds
        for i, c in enumerate(sel.candidates)
    ]


def stored_choice(
    run_dir: Path, sel: Selection, seg: Segment, on_message: OnMessage = log_message
) -> dict[str, Any] | None:
    """Segment ``seg``'s choice as written by :func:`choose`; None when it is not there yet. A
    file that does not read back is removed (with a line saying so to ``on_message``): it is
    made again."""
    path = choice_path(run_dir, seg)
    if not path.is_file():
        return None
    try:
        choice = json.loads(path.read_text())
        if choice["segment"] != seg.index or choice["chosen"] not in sel.names:
            raise ValueError("not this segment's choice")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        on_message(
            f"riskppo walkforward: {SELECT_DIR}/{path.name} does not read back ({exc}); "
            "choosing again"
        )
        remove_entry(path)
        return None
    return dict(choice)


def waits_for(
    run_dir: Path,
    sel: Selection,
    seg: Segment,
    seeds: Sequence[int],
    on_message: OnMessage = log_message,
) -> tuple[Path, ...]:
    """The files segment ``seg``'s test cells wait for: its selection cells' ``cell.json``
    (none once its choice is made; ``on_message``: :func:`stored_choice`'s)."""
    if stored_choice(run_dir, sel, seg, on_message) is not None:
        return ()
    return tuple(
        select_cell_dir(run_dir, seg, seed, i) / CELL_DONE
        for seed in seeds
        for i in range(len(sel.candidates))
    )


def choose(
    run_dir: Path,
    sel: Selection,
    seg: Segment,
    seeds: Sequence[int],
    on_message: OnMessage = log_message,
) -> dict[str, Any]:
    """Segment ``seg``'s choice: the stored one, or made from its finished selection cells by
    :data:`STATISTIC_TEXT` and written to ``select/segKK.json`` (atomically, so every seed's
    test cell, on ``--resume`` too, trades the same candidate). Its row ranges ``[a, b)`` are
    the rows each part reads: ``inner_train_rows``, ``validation_rows`` (the last one only
    settles the last position) and ``test_rows`` (the segment's test backtest's).
    ``on_message``: :func:`stored_choice`'s."""
    stored = stored_choice(run_dir, sel, seg, on_message)
    if stored is not None:
        return stored
    by_seed: dict[str, dict[str, float | None]] = {}
    summary: dict[str, Any] = {}
    for i, c in enumerate(sel.candidates):
        by_seed[c.name] = {}
        for seed in seeds:
            cell = read_cell(select_cell_dir(run_dir, seg, seed, i))
            if cell is None:
                raise RuntimeError(f"selection cell {cell_name(seg, seed)}-c{i} has not finished")
            summary = cell[0]
            by_seed[c.name][str(seed)] = summary["metrics"]["agent"].get("sharpe")
    scores = {n: float(np.mean([v or 0.0 for v in d.values()])) for n, d in by_seed.items()}
    best = max(range(len(sel.candidates)), key=lambda i: (scores[sel.names[i]], -i))
    inner = inner_segment(seg, sel.select_bars)
    choice = {
        "segment": seg.index,
        "chosen": sel.names[best],
        "statistic": STATISTIC,
        "sharpe": scores,
        "sharpe_by_seed": by_seed,
        "inner_train_rows": [inner.train_start, inner.test_start],
        "validation_rows": [inner.test_start, inner.settle_end],
        "test_rows": [seg.test_start, seg.settle_end],
        "validation_start": summary["start"],
        "validation_end": summary["end"],
        "validation_bars": summary["bars"],
    }
    write_json(choice_path(run_dir, seg), choice)
    return choice


def chosen_job(job: CellJob, sel: Selection, choice: Mapping[str, Any]) -> CellJob:
    """Test cell ``job`` with the chosen candidate's config and training budget, its
    ``cell.json`` naming the candidate and the validation figures it was chosen on."""
    c = sel.candidates[sel.names.index(choice["chosen"])]
    keep = ("sharpe", "validation_rows", "validation_start", "validation_end")
    extra = {"candidate": c.name, "selection": {k: choice[k] for k in keep}}
    return dataclasses.replace(job, config=c.config, steps=c.config.total_timesteps, extra=extra)


def procedure_hash(sel: Selection, protocol: Mapping[str, Any]) -> str:
    """The ledger's configuration hash of the selection procedure: SHA-256 (hex) of the sorted
    candidates' walk-forward configuration hashes (each with the schedule ``protocol``) and
    the selection settings — the same candidates in another order are the same procedure."""
    hashes = sorted(config_hash(c.config, "walkforward", protocol) for c in sel.candidates)
    payload = {
        "kind": "walkforward-select",
        "candidates": hashes,
        "select": {"select_bars": sel.select_bars, "statistic": STATISTIC},
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def selection_block(
    run_dir: Path,
    sel: Selection,
    segments: Sequence[Segment],
    protocol: Mapping[str, Any],
    on_message: OnMessage = log_message,
) -> dict[str, Any]:
    """``metrics.json``'s ``selection``: the candidates (with their configuration hashes), the
    settings, every segment's choice and how often each candidate was chosen
    (``on_message``: :func:`stored_choice`'s)."""
    choices = []
    for seg in segments:
        choice = stored_choice(run_dir, sel, seg, on_message)
        if choice is None:
            raise RuntimeError(f"segment {seg.index} has no choice ({choice_path(run_dir, seg)})")
        choices.append(choice)
    return {
        "candidates": [
            {
                "name": c.name,
                "source": c.source,
                "config_hash": config_hash(c.config, "walkforward", protocol),
            }
            for c in sel.candidates
        ],
        "select_bars": sel.select_bars,
        "statistic": STATISTIC,
        "statistic_text": STATISTIC_TEXT,
        "procedure_hash": procedure_hash(sel, protocol),
        "segments": choices,
        "chosen_count": {n: sum(ch["chosen"] == n for ch in choices) for n in sel.names},
    }


def selection_lines(block: Mapping[str, Any] | None) -> list[str]:
    """The printed lines: how often each candidate was chosen, and the choices in order."""
    if not block:
        return []
    n = len(block["segments"])
    counts = ", ".join(f"{k} in {v}/{n}" for k, v in block["chosen_count"].items())
    return [
        f"selection among {len(block['candidates'])} configurations on each segment's last "
        f"{block['select_bars']} training bars (validation Sharpe): chosen {counts} segments; "
        "the ledger counts the procedure as one configuration",
        "  chosen per segment: " + " ".join(ch["chosen"] for ch in block["segments"]),
    ]


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def selection_html(block: Mapping[str, Any] | None) -> str:
    """The report's section: per segment its validation bars, each candidate's validation
    Sharpe ratio and the choice; how often each was chosen."""
    if not block:
        return ""
    names = [c["name"] for c in block["candidates"]]
    head = ["segment", "validation bars", *(f"{n} Sharpe" for n in names), "chosen"]
    rows = [
        [
            str(ch["segment"]),
            f"{ch['validation_start'][:10]} → {ch['validation_end'][:10]}",
            *(_ratio(ch["sharpe"].get(n)) for n in names),
            ch["chosen"],
        ]
        for ch in block["segments"]
    ]
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    lines = selection_lines(block)
    note = (
        f"Each segment chose among its candidates on the last {block['select_bars']} bars of "
        f"its training rows, by {block['statistic_text']}; the chosen one was trained again on "
        "all the segment's training rows and traded its test bars. No test bar was read by the "
        "choice, so the stitched record is one configuration: the selection procedure."
    )
    return (
        f"<section><h2>Selection among configurations</h2><p>{html.escape(lines[0])}.</p>"
        f'<table class="metrics"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
        f"<p>{html.escape(note)}</p></section>"
    )
