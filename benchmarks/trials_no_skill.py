"""Does the trial ledger stop a user from finding an edge by trying configurations? No-skill
configurations on seeded no-edge markets, each recorded in a real trial ledger.

Each repetition draws a fresh seeded market with no edge — a GARCH(1, 1)-t random walk
(``riskppo.envs.market.planted.ar_market`` with ``phi = 0``; ``--bars`` daily bars) at zero
drift (``zero``) or falling (``falling``: ``--fall``, an annual log drift of −20% by default) —
written as a user's CSV and traded through the shipped GOOGL configuration's env (its sizing,
risk overlay, next-open fill and fees). Then ``max(--configs)`` no-skill configurations are
judged one after another on the record ``riskppo train`` judges (the test split, the last 15%
of the bars; ``--judged long``: the last 85%, a walk-forward-length record):

* half are smooth random signals in the agent's band [0.25, 1] at a random span (3–100 bars,
  ``riskppo.stats.null.random_signals``), half momentum or reversal rules over a random
  lookback (2–120 bars: the top of the band when the past move has the rule's sign, its floor
  else). Neither knows anything about a return after its decision bar;
* each is held through the agent env's own tables (``riskppo.evaluation.timing_null.EnvTables``:
  exactly the positions and net returns the env books; checked against the env at start) and
  recorded through the real ledger code (``riskppo.evaluation.trials.judge_trials`` →
  ``riskppo.runs.ledger.record_trial``) in a fresh ledger directory per repetition, the data
  fingerprint that of the market's CSV file.

After the K-th configuration (K in ``--configs``) the user picks the one with the best Sharpe
ratio and reads its verdict: judged again through the ledger (as a repeated ``riskppo
backtest`` does: no new row, N = the configurations on the data now), the verdict's own paired
test (``riskppo.stats.paired_sharpe_test``, seed 0) against vol-targeted buy-and-hold under the
same overlay, and ``riskppo.stats.verdict(test, N, ...)`` — the functions
``riskppo.evaluation.verdict.statistics_block`` calls for its verdict (the rest of that block,
random-timing null and bootstrap intervals, would cost seconds per verdict;
``--check-block R`` runs the whole block on the first R repetitions and checks it says the
same). Per K and market the share of repetitions in which the best one's verdict claims an edge
(one-sided p adjusted for N below 0.05), with Monte Carlo standard errors:

* ``N = 1``: no ledger, what a user saw before it;
* ``as printed``: the verdict the best configuration's own run printed when it ran (N = the
  configurations judged up to it);
* ``ledger N``: the verdict read after all K, N = K from the ledger;
* ``SPA``: Hansen's (2005) test of superior predictive ability over the K records on the same
  bars (``riskppo.stats.superior_ability``, as the ledger's trials block computes it) — does any
  of them beat the benchmark — at 5%;

and the mean probability of backtest overfitting (CSCV, Bailey, Borwein, López de Prado & Zhu
2017) the ledger computed over the K configurations. Measured figures: docs/results.md, "Trying
configurations until one beats the benchmark".

``--population BARS`` prints instead, on one long path per market, a few fixed no-skill
configurations' Sharpe ratio minus the benchmark's: on a falling market many are above it (an
exposure that varies independently of the returns pulls a Sharpe ratio towards zero).

    python benchmarks/trials_no_skill.py --reps 200 --configs 1 5 20
    python benchmarks/trials_no_skill.py --population 60000 --seed 5
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BenchError, BenchParser, int_at_least, positive_int, run_main, table

MARKETS = ("zero", "falling")
JUDGED = {"test": "0.7,0.15,0.15", "long": "0.1,0.05,0.85"}  # data.split of each judged record
CONFIG = "trading_googl"
ALPHA = 0.05
TEST_SEED = 0  # the seed statistics_block gives the verdict's test (backtest_run's default)


@dataclass
class Tally:
    """What the repetitions of one (market, K) cell found."""

    reps: int = 0
    claim_n1: int = 0  # the best one's verdict with N = 1
    claim_printed: int = 0  # as its own run printed it (N = configurations up to it)
    claim_ledger: int = 0  # read after all K (N from the ledger)
    loses_less: int = 0  # of those, worded "loses less than" (both Sharpe ratios negative)
    claim_spa: int = 0  # SPA p < 0.05 over the K records
    spa_reps: int = 0
    pbo: list[float] = field(default_factory=list)
    n_used: list[int] = field(default_factory=list)  # the ledger's N of each verdict
    best_diff: list[float] = field(default_factory=list)  # best one's Sharpe − benchmark's
    block_checked: int = 0  # verdicts also read from statistics_block (--check-block)
    block_agreed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "reps": self.reps,
            "claim_n1": self.claim_n1,
            "claim_printed": self.claim_printed,
            "claim_ledger": self.claim_ledger,
            "loses_less": self.loses_less,
            "claim_spa": self.claim_spa,
            "spa_reps": self.spa_reps,
            "mean_pbo": float(np.mean(self.pbo)) if self.pbo else None,
            "pbo_reps": len(self.pbo),
            "ledger_n": sorted(set(self.n_used)),
            "mean_best_diff": float(np.mean(self.best_diff)) if self.best_diff else None,
            "block_checked": self.block_checked,
            "block_agreed": self.block_agreed,
        }


def config_signals(
    k: int, rng: np.random.Generator, close: np.ndarray, first_bar: int, steps: int, band: Any
) -> tuple[str, np.ndarray]:
    """The ``k``-th no-skill configuration: its name and its signals ``[steps]`` at decision
    bars ``first_bar .. first_bar + steps − 1``; each is a function of bars up to its decision
    bar (a rule) or of nothing in the market at all (random timing)."""
    from riskppo.stats.null import random_signals

    lo, hi = band
    if k % 2 == 0:
        span = float(math.exp(rng.uniform(math.log(3.0), math.log(100.0))))
        seed = int(rng.integers(2**31))
        return f"timing(span={span:.1f})", random_signals(1, steps, (lo, hi), span, seed)[0]
    lookback = int(rng.integers(2, 121))
    sign = 1 if rng.random() < 0.5 else -1
    logc = np.log(close)
    bars = np.arange(first_bar, first_bar + steps)
    move = logc[bars] - logc[np.maximum(bars - lookback, 0)]
    name = f"{'momentum' if sign > 0 else 'reversal'}({lookback})"
    return name, np.where(sign * move > 0, hi, lo)


@dataclass(frozen=True)
class Market:
    """One repetition's market in the agent's env: its config (``data.path``: the CSV whose
    bytes are the ledger's data fingerprint), the judged record's bar times, the env's tables
    over them, the benchmark's per-bar net log returns, the closes, the first decision bar, the
    agent's band and the benchmark's name."""

    cfg: Any
    index: Any
    tables: Any
    bench_log: np.ndarray
    close: np.ndarray
    first_bar: int
    band: tuple[float, float]
    benchmark: str


@functools.cache
def shipped_config() -> Any:
    """The shipped GOOGL configuration, read once."""
    from riskppo.config import Config
    from riskppo.config.bundled import resolve_config_path

    return Config.from_yaml(resolve_config_path(CONFIG))


def make_market(kind: str, bars: int, seed: int, fall: float, judged: str, folder: Path) -> Market:
    """The seeded no-edge market of ``kind``, written to ``folder`` as a CSV and opened as
    ``riskppo train`` opens a user's file (the shipped GOOGL configuration)."""
    from riskppo.config import apply_overrides
    from riskppo.envs.market.planted import ar_market
    from riskppo.evaluation.backtest import _agent_env, _run_baseline
    from riskppo.evaluation.baselines import buy_and_hold_policy
    from riskppo.evaluation.references import VT_BH_OVERLAY, choose_benchmark
    from riskppo.evaluation.timing_null import env_tables

    drift = {"zero": 0.0, "falling": fall}[kind]
    df, _ = ar_market(bars, phi=0.0, drift=drift, seed=seed)
    path = folder / f"{kind}_{seed}.csv"
    df.to_csv(path)
    cfg = apply_overrides(
        shipped_config(),
        [f"data.path={path}", "data.dataset=null", f"data.split=[{JUDGED[judged]}]"],
    )
    _, env = _agent_env(cfg, "test")
    first, _ = env.trading_range
    bench = _run_baseline(env, buy_and_hold_policy(), first)
    tables = env_tables(env, first, len(bench))
    overlay = env.overlay is not None
    return Market(
        cfg=cfg,
        index=bench.index,
        tables=tables,
        bench_log=bench["log_return"].to_numpy(np.float64),
        close=env.df["close"].to_numpy(np.float64),
        first_bar=first,
        band=tuple(map(float, env.signal_range)),  # type: ignore[arg-type]
        benchmark=choose_benchmark({VT_BH_OVERLAY}, overlay).name,
    )


def check_tables(market: Market) -> None:
    """The tables book what the env books: one random signal stepped through the env (up to
    the env's float32 action round trip)."""
    from riskppo.evaluation.backtest import _agent_env, _run_baseline
    from riskppo.stats.null import random_signals

    _, env = _agent_env(market.cfg, "test")
    signals = random_signals(1, len(market.index), market.band, 10.0, 1)[0]
    frame = _run_baseline(env, lambda bar: float(signals[bar - market.first_bar]), market.first_bar)
    got = market.tables.returns(signals)
    if not np.allclose(got, frame["log_return"].to_numpy(), rtol=0, atol=1e-9):
        raise RuntimeError("the env's tables do not book what the env books")


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def one_repetition(
    kind: str,
    rep: int,
    *,
    configs: Sequence[int],
    bars: int,
    seed: int,
    fall: float,
    judged: str,
    spa: bool,
    check_block: bool = False,
) -> dict[int, dict[str, Any]]:
    """One market and its sequence of ``max(configs)`` no-skill configurations; per K in
    ``configs`` the verdicts of the best of the first K."""
    import pandas as pd

    from riskppo import stats
    from riskppo.evaluation.trials import TrialSpec, judge_trials, spa_entry, trials_block
    from riskppo.evaluation.verdict import honest_text

    market_seed = seed * 100_003 + rep
    rng = np.random.default_rng([seed, rep, 7])
    out: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="trials_no_skill_") as tmp:
        folder = Path(tmp)
        m = make_market(kind, bars, market_seed, fall, judged, folder)
        bench_simple = np.expm1(m.bench_log)
        bench_sharpe = stats.sharpe(bench_simple, 252.0)
        ledger = folder / "ledger"
        steps = len(m.index)
        sharpes: list[float] = []
        logs: list[np.ndarray] = []
        printed_n: list[int] = []
        specs: list[TrialSpec] = []
        sigs: list[np.ndarray] = []
        for k in range(max(configs)):
            name, signals = config_signals(k, rng, m.close, m.first_bar, steps, m.band)
            log_r = m.tables.returns(signals)
            spec = TrialSpec(ledger, config_id=_hash(f"{kind}/{rep}/{k}/{name}"))
            run_dir = folder / f"config{k}"
            trials = judge_trials(spec, pd.Series(log_r, index=m.index), 252.0, run_dir, m.cfg)
            assert trials is not None
            printed_n.append(trials.n_configs)
            sharpes.append(stats.sharpe(np.expm1(log_r), 252.0))
            logs.append(log_r)
            sigs.append(signals)
            specs.append(spec)
            if k + 1 not in configs:
                continue
            best = int(np.nanargmax(sharpes))
            again = judge_trials(  # the user reads the best one's verdict now: no new row
                specs[best],
                pd.Series(logs[best], index=m.index),
                252.0,
                folder / f"config{best}",
                m.cfg,
            )
            assert again is not None
            block = trials_block(again, 1)
            assert block is not None
            n = int(block["n_trials"])
            test = stats.paired_sharpe_test(
                np.expm1(logs[best]), bench_simple, 252.0, seed=TEST_SEED
            )
            v1 = stats.verdict(test, 1, m.benchmark)
            vp = stats.verdict(test, printed_n[best], m.benchmark)
            vn = stats.verdict(test, n, m.benchmark)
            row: dict[str, Any] = {
                "n": n,
                "best": best,
                "claim_n1": v1.claim,
                "claim_printed": vp.claim,
                "claim_ledger": vn.claim,
                "loses_less": vn.claim
                and honest_text(vn.text, vn.claim, sharpes[best], bench_sharpe, name=m.benchmark)
                != vn.text,
                "p": test.p_one_sided,
                "diff": test.diff,
                "pbo": again.pbo.pbo if again.pbo is not None else None,
                "spa_p": None,
            }
            if spa and k + 1 >= 2:
                entry = spa_entry(
                    again,
                    pd.Series(bench_simple, index=m.index),
                    252.0,
                    p_sidak=vn.p_adjusted,
                    benchmark_name=m.benchmark,
                    seed=TEST_SEED,
                )
                row["spa_p"] = entry["p"] if entry is not None else None
            if check_block:
                row["block_agrees"] = block_agrees(m, sigs[best], logs[best], again, vn)
            out[k + 1] = row
    return out


def block_agrees(m: Market, signals: np.ndarray, log_r: np.ndarray, trials: Any, v: Any) -> bool:
    """Whether ``riskppo.evaluation.verdict.statistics_block`` on the record's strategy frames
    (the configuration as the agent, the full signal in the same env as its benchmark) with the
    ledger's ``trials`` gives the verdict ``v`` this script read."""
    import pandas as pd

    from riskppo.evaluation.references import VT_BH_OVERLAY
    from riskppo.evaluation.verdict import statistics_block

    full = np.ones_like(signals)
    frames = {
        name: pd.DataFrame(
            {"position": m.tables.exposures(s), "signal": s, "log_return": r}, index=m.index
        )
        for name, s, r in (("agent", signals, log_r), (VT_BH_OVERLAY, full, m.bench_log))
    }
    block = statistics_block(
        frames, 252.0, fee=m.tables.fee, trials=trials, overlay=True, tables=m.tables
    )
    got = block["verdict"]
    return bool(got["claim"] == v.claim and math.isclose(got["p_adjusted"], v.p_adjusted))


def simulate(
    reps: int,
    *,
    configs: Sequence[int] = (1, 5, 20),
    markets: Sequence[str] = MARKETS,
    bars: int = 1250,
    seed: int = 0,
    fall: float = -0.20,
    judged: str = "test",
    spa: bool = True,
    check_block: int = 0,
    progress: bool = False,
) -> dict[str, dict[int, Tally]]:
    """The claim rates of the best of K no-skill configurations, per market kind and K:
    ``{market: {K: Tally}}``. Deterministic for a fixed ``seed``. ``check_block``: on the
    first that many repetitions also read each verdict from ``statistics_block``."""
    configs = sorted(set(configs))
    result = {kind: {k: Tally() for k in configs} for kind in markets}
    t0 = time.perf_counter()
    for kind in markets:
        for rep in range(reps):
            rows = one_repetition(
                kind, rep, configs=configs, bars=bars, seed=seed, fall=fall, judged=judged,
                spa=spa, check_block=rep < check_block,
            )  # fmt: skip
            for k, row in rows.items():
                t = result[kind][k]
                t.reps += 1
                t.claim_n1 += row["claim_n1"]
                t.claim_printed += row["claim_printed"]
                t.claim_ledger += row["claim_ledger"]
                t.loses_less += row["loses_less"]
                t.n_used.append(row["n"])
                if "block_agrees" in row:
                    t.block_checked += 1
                    t.block_agreed += row["block_agrees"]
                if math.isfinite(row["diff"]):
                    t.best_diff.append(row["diff"])
                if row["pbo"] is not None:
                    t.pbo.append(row["pbo"])
                if row["spa_p"] is not None:
                    t.spa_reps += 1
                    t.claim_spa += row["spa_p"] < ALPHA
            if progress and (rep + 1) % max(1, reps // 10) == 0:
                print(
                    f"  {kind}: {rep + 1}/{reps} repetitions, {time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    return result


def population_differences(bars: int, seed: int, fall: float) -> dict[str, tuple[float, dict]]:
    """Per market kind: the benchmark's Sharpe ratio and each of a few fixed no-skill
    configurations' Sharpe ratio minus it, on one path of ``bars`` bars judged over its last 85%
    (long enough for the population values): 0.25-or-1 rules over 5, 20 and 60 bars, random
    timings at spans 5 and 30, and an iid random 0.25-or-1 exposure without fees (the Sharpe
    ratio's own pull towards zero)."""
    import dataclasses

    from riskppo import stats
    from riskppo.stats.null import random_signals

    out = {}
    for kind in MARKETS:
        with tempfile.TemporaryDirectory() as tmp:
            m = make_market(kind, bars, seed, fall, "long", Path(tmp))
        bench = stats.sharpe(np.expm1(m.bench_log), 252.0)
        logc = np.log(m.close)
        at = np.arange(m.first_bar, m.first_bar + len(m.index))
        signals: dict[str, tuple[np.ndarray, Any]] = {}
        for lookback in (5, 20, 60):
            move = logc[at] - logc[np.maximum(at - lookback, 0)]
            for sign, name in ((1, "momentum"), (-1, "reversal")):
                signals[f"{name}({lookback})"] = (np.where(sign * move > 0, 1.0, 0.25), m.tables)
        for span in (5, 30):
            timing = random_signals(1, len(m.index), m.band, float(span), 3)[0]
            signals[f"timing(span={span})"] = (timing, m.tables)
        coin = np.random.default_rng(1).random(len(m.index)) < 0.5
        free = dataclasses.replace(m.tables, fee=0.0)
        signals["iid 0.25-or-1, no fees"] = (np.where(coin, 1.0, 0.25), free)
        diffs = {
            name: stats.sharpe(np.expm1(tables.returns(sig)), 252.0) - bench
            for name, (sig, tables) in signals.items()
        }
        out[kind] = (bench, diffs)
    return out


def rate(count: int, n: int) -> str:
    """``count / n`` in percent with its Monte Carlo standard error (and the count)."""
    if n == 0:
        return "–"
    p = count / n
    se = math.sqrt(p * (1 - p) / n)
    return f"{100 * p:.1f}% ± {100 * se:.1f} ({count})"


def mean_se(values: list[float], spec: str = ".2f") -> str:
    if not values:
        return "–"
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
    return f"{np.mean(values):{spec}} ± {se:{spec}}"


def report(result: dict[str, dict[int, Tally]]) -> str:
    header = ["market", "K", "reps", "N = 1", "as printed", "ledger N", "of those 'loses less'",
              "SPA", "mean PBO", "best − bench Sharpe"]  # fmt: skip
    rows = []
    for kind, cells in result.items():
        for k, t in cells.items():
            rows.append([
                kind, str(k), str(t.reps), rate(t.claim_n1, t.reps),
                rate(t.claim_printed, t.reps), rate(t.claim_ledger, t.reps), str(t.loses_less),
                rate(t.claim_spa, t.spa_reps), mean_se(t.pbo), mean_se(t.best_diff),
            ])  # fmt: skip
    return table(rows, header)


def main() -> None:
    parser = BenchParser(
        prog="trials_no_skill.py",
        description="The best of K no-skill configurations on a no-edge market: how often its "
        "verdict claims an edge with N = 1 and with the trial ledger's N.",
    )
    parser.add_argument(
        "--reps",
        type=int_at_least(2),
        default=100,
        help="repetitions (markets) per market kind (default 100)",
    )
    parser.add_argument(
        "--configs",
        type=positive_int,
        nargs="+",
        default=[1, 5, 20],
        help="the numbers of configurations K tried (default 1 5 20)",
    )
    parser.add_argument(
        "--bars",
        type=int_at_least(500),
        default=1250,
        help="daily bars of each market (default 1250)",
    )
    parser.add_argument(
        "--markets",
        nargs="+",
        choices=MARKETS,
        default=list(MARKETS),
        help="zero drift, falling drift (default both)",
    )
    parser.add_argument(
        "--fall",
        type=float,
        default=-0.20,
        help="the falling market's annual log drift (default -0.20)",
    )
    parser.add_argument(
        "--judged",
        choices=sorted(JUDGED),
        default="test",
        help="the judged record: the test split riskppo train judges (last 15%%), "
        "or the last 85%% ('long', a walk-forward's length) (default test)",
    )
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="base seed (default 0)")
    parser.add_argument("--no-spa", action="store_true", help="skip the SPA column (faster)")
    parser.add_argument(
        "--check-block",
        type=int_at_least(0),
        default=2,
        metavar="R",
        help="on the first R repetitions also read each verdict from the whole "
        "statistics_block and check it agrees (default 2)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--population",
        type=int_at_least(2000),
        default=None,
        metavar="BARS",
        help="instead: fixed no-skill configurations' Sharpe ratio minus the benchmark's on one "
        "path of BARS bars per market (e.g. 60000; at most about 68,000 daily bars fit)",
    )
    args = parser.parse_args()
    if not args.fall < 0:
        raise BenchError(f"--fall {args.fall}: a falling market needs a negative drift")
    if args.population is not None:
        for kind, (bench, diffs) in population_differences(
            args.population, args.seed, args.fall
        ).items():
            cells = "; ".join(f"{name} {d:+.3f}" for name, d in diffs.items())
            print(f"{kind}: benchmark Sharpe {bench:+.3f}; minus it: {cells}")
        return

    # arch's block-length estimate divides by zero on a rule that held the full signal
    # throughout (its record is the benchmark's); the SPA handles that column itself
    warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning, r"arch\.")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        probe = make_market("zero", args.bars, 10**6, args.fall, args.judged, Path(tmp))
        check_tables(probe)
    result = simulate(
        args.reps, configs=args.configs, markets=args.markets, bars=args.bars, seed=args.seed,
        fall=args.fall, judged=args.judged, spa=not args.no_spa, check_block=args.check_block,
        progress=True,
    )  # fmt: skip
    elapsed = time.perf_counter() - t0
    print(
        f"trials_no_skill: {args.reps} repetitions per market, {args.bars} bars, judged record: "
        f"{args.judged} ({len(probe.index)} bars), configurations {sorted(set(args.configs))}, "
        f"seed {args.seed}, falling drift {args.fall:+.0%}/year"
    )
    print(
        "verdict: the ledger's N (riskppo.evaluation.trials.judge_trials / trials_block) with "
        "riskppo.stats.paired_sharpe_test + riskppo.stats.verdict, the functions "
        "statistics_block calls; claim = Šidák-adjusted one-sided p < 0.05 against "
        f"{probe.benchmark}; ± Monte Carlo SE (count)"
    )
    print(report(result))
    print(
        "N = 1: the best one's verdict without a ledger; as printed: by its own run (N = the "
        "configurations up to it); ledger N: read again after all K (N = K); 'loses less': "
        "ledger-N claims where both Sharpe ratios are negative (the verdict line says 'loses "
        "less than'); SPA: Hansen's p < 0.05 over the K records; PBO: CSCV over the K records"
    )
    checked = sum(t.block_checked for c in result.values() for t in c.values())
    agreed = sum(t.block_agreed for c in result.values() for t in c.values())
    if checked:
        print(f"statistics_block gave the same verdict (claim, adjusted p) on {agreed} of "
              f"{checked} verdicts checked")  # fmt: skip
    print(f"{elapsed:.0f} s")
    if args.json is not None:
        payload = {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "seconds": elapsed,
            "result": {m: {str(k): t.to_dict() for k, t in c.items()} for m, c in result.items()},
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_main(main))
