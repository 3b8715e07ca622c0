"""The ``riskppo`` command line (design §1.3).

``riskppo train`` with no arguments trains the default agent
(``riskppo/configs/trading_googl.yaml``)
and writes everything into one run directory: the resolved config, TensorBoard events,
``metrics.jsonl``, checkpoints, ``alerts.jsonl`` (only when a training alert fires) and the
final evaluation/report.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from riskppo import __version__
from riskppo.cli.args import (
    DEFAULT_CONFIG,
    DEFAULT_PBT_CONFIG,
    RUN_DIR_HELP,
    add_command,
    add_ledger,
    add_set,
    bench_parser,
    config_help,
    paper_parser,
    pbt_parser,
    positive_int,
    record_parser,
    signal_parser,
    universe_parser,
    walkforward_parser,
)
from riskppo.cli.bench import cmd_bench
from riskppo.cli.errors import show_warning, user_error
from riskppo.config import Config, ConfigError, apply_overrides
from riskppo.config.bundled import bundled_dir
from riskppo.envs.registration import env_kind
from riskppo.logs import configure_terminal
from riskppo.runs.interrupt import interrupt_signal, signal_name
from riskppo.runs.jobs import Backend
from riskppo.runs.processes import die_with_parent_if_asked


def preset_path(name: str) -> Path:
    """Path of a config shipped inside the package (``riskppo/configs``)."""
    return bundled_dir() / name


def load_config(
    path: str | None, overrides: Sequence[str], default: str = DEFAULT_CONFIG
) -> Config:
    cfg = Config.from_yaml(path or preset_path(default))
    return apply_overrides(cfg, list(overrides))


def read_data_early(cfg: Config) -> Config:
    """``cfg``, after reading the data it names as its env will (kept for that env): a missing
    or malformed file answers in a second, before the model's libraries load."""
    kind = env_kind(cfg.env.id)
    if kind is not None:
        kind.read_data(cfg.data, cfg.env.kwargs)
    return cfg


def default_run_dir(cfg: Config, prefix: str = "") -> Path:
    """``runs/<time>-[<prefix>-]<env>[-<data>]-s<seed>``; ``<data>`` (trading only) names the
    data actually used: the stem of ``data.path``'s file, else the bundled dataset (and its
    stock: ``sp500_AAPL``)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[/:]", "_", cfg.env.id)  # 'riskppo/Trading-v0', 'module:Name-v1'
    if getattr(env_kind(cfg.env.id), "single_asset", False):
        d = cfg.data
        data = (
            Path(d.path).name.split(".")[0]
            if d.path
            else "_".join(filter(None, (d.dataset, d.symbol)))
        )
        name += f"-{re.sub(r'[^A-Za-z0-9_-]+', '_', str(data or 'data'))}"
    return Path("runs") / f"{stamp}-{prefix + '-' if prefix else ''}{name}-s{cfg.seed}"


def cmd_train(args: argparse.Namespace) -> int:
    """``riskppo train``; stopped by Ctrl-C or SIGTERM, it saves a checkpoint, prints what it
    saved and the command that resumes it, and exits 130 / 143
    (:func:`riskppo.cli.runner._learn`)."""
    # the config is read and checked before torch loads: a mistyped key answers at once
    checked = None if args.resume else read_data_early(load_config(args.config, args.set or []))
    from riskppo.cli.runner import Interrupted, resume_run, train_run, with_periodic_checkpoints

    progress_bar = not args.no_progress
    try:
        if args.resume:
            run_dir = Path(args.resume)
            check_resume_args(args, run_dir)
            resume_run(
                run_dir, progress_bar=progress_bar, overrides=args.set or [], ledger=_ledger(args)
            )
        else:
            assert checked is not None  # read above whenever there is no --resume
            cfg = with_periodic_checkpoints(checked)
            run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(cfg)
            try:
                train_run(
                    cfg, run_dir, progress_bar=progress_bar, force=args.force, ledger=_ledger(args)
                )
            except Exception:
                if not args.run_dir:  # a directory riskppo named, left with nothing in it
                    _drop_if_empty(run_dir)
                raise
    except Interrupted as stopped:
        print(stopped, file=sys.stderr)
        return stopped.exit_code
    from riskppo.cli.backtest import print_flat_warning

    print_flat_warning(run_dir / "backtest_test")
    return 0


def _ledger(args: argparse.Namespace) -> Path | None:
    """The trial ledger that ``--ledger``/``--no-ledger`` name
    (:func:`~riskppo.runs.ledger.ledger_path`)."""
    from riskppo.runs.ledger import ledger_path, open_ledger

    path = ledger_path(args.ledger, enabled=not args.no_ledger)
    return open_ledger(path) if path is not None else None  # a bad path stops before training


def _drop_if_empty(run_dir: Path) -> None:
    """Remove ``run_dir`` if it holds nothing but its (released) lock file: a run that failed
    before writing anything leaves no empty ``runs/<time>-…/`` behind."""
    from riskppo.runs.lock import LOCK_NAME

    try:
        if {p.name for p in run_dir.iterdir()} <= {LOCK_NAME}:
            (run_dir / LOCK_NAME).unlink(missing_ok=True)
            run_dir.rmdir()
    except OSError:
        pass  # gone already, or not ours to clean: leave it


def check_resume_args(args: argparse.Namespace, run_dir: Path) -> None:
    """``--resume`` continues a run in place with its own config: any flag that would change
    the config or move the run is refused (a run's checkpoints and metrics stay together),
    but for ``--set total_timesteps=N``, which trains it on to N steps."""
    others = [s for s in args.set or [] if s.partition("=")[0].strip() != "total_timesteps"]
    if args.config or others or args.force:
        raise ConfigError(
            "--resume continues a run with its own config; drop --config/--set/--force "
            "(only --set total_timesteps=N may go with it: it trains the run on to N steps)"
        )
    if args.run_dir and Path(args.run_dir) != run_dir:
        raise ConfigError(
            f"--resume continues {run_dir} in place; drop --run-dir {args.run_dir} (to branch a "
            "run off, copy its directory and resume the copy)"
        )


def cmd_eval(args: argparse.Namespace) -> int:
    """``riskppo eval``: writes its report into the run directory, so it holds the run's lock
    (a run still training is refused, not evaluated half-way)."""
    return _under_run_lock(args, "riskppo eval", _cmd_eval)


def _under_run_lock(
    args: argparse.Namespace, what: str, command: Callable[[argparse.Namespace], int]
) -> int:
    """Run ``command`` holding the lock of ``args.run_dir`` (R-REL-9); a missing directory has
    nothing to lock, and the command's own error names it."""
    from riskppo.runs.lock import lock_run

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        return command(args)
    with lock_run(run_dir, what):
        return command(args)


def _cmd_eval(args: argparse.Namespace) -> int:
    from riskppo.cli.runner import robustness_run
    from riskppo.evaluation.summary import evaluation_summary, format_evaluation, write_evaluation

    if args.attack:
        from riskppo.evaluation.robustness import check_attack_args

        attacks = [a.strip() for a in args.attack.split(",") if a.strip()]
        eps = parse_floats(args.eps, "--eps")
        check_attack_args(attacks, eps)  # before the model is loaded
        robustness_run(
            Path(args.run_dir),
            attacks,
            eps,
            n_episodes=args.episodes,
            steps=args.pgd_steps,
            split=args.split,
        )
        return 0
    run_dir = Path(args.run_dir)
    summary = evaluation_summary(run_dir, n_episodes=args.episodes, split=args.split)
    table = format_evaluation(summary)
    json_path, txt_path = write_evaluation(run_dir, summary, table)
    print(table)
    print(f"riskppo eval: written to {json_path} and {txt_path.name}")
    return 0


def parse_floats(text: str, option: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{option} expects comma-separated numbers, got {text!r}") from None


def cmd_backtest(args: argparse.Namespace) -> int:
    """``riskppo backtest``: writes ``backtest_<split>/`` into the run, under the run's lock."""
    from riskppo.cli.backtest import cmd_backtest as run

    return _under_run_lock(args, "riskppo backtest", run)


def cmd_signal(args: argparse.Namespace) -> int:
    """``riskppo signal``: reads the run, writes only ``--json OUT``
    (:mod:`riskppo.live.signal`)."""
    from riskppo.cli.live import cmd_signal as run

    return run(args)


def cmd_paper(args: argparse.Namespace) -> int:
    """``riskppo paper``: writes ``RUN_DIR/paper/``, under the run's lock
    (:mod:`riskppo.live.paper`)."""
    from riskppo.cli.live import cmd_paper as run

    return _under_run_lock(args, "riskppo paper", run)


def cmd_record(args: argparse.Namespace) -> int:
    """``riskppo record``: a demonstration file for ``bc.source: file`` (R-ALG-12)."""
    if args.run and (args.config or args.set):
        raise ConfigError("--run records with the run's own config; drop --config/--set")
    # the config is read and checked before torch loads: a mistyped key answers at once
    cfg = None if args.run else load_config(args.config, args.set or [])
    from riskppo.demos.files import check_demonstration_suffix
    from riskppo.runs.record import record_run, record_strategy, write_demonstrations
    from riskppo.runs.rundir import check_belongs, latest_checkpoint

    check_demonstration_suffix(args.out)  # before anything is recorded

    if cfg is None:
        run = Path(args.run)
        checkpoint = latest_checkpoint(run)
        if (run / "config.yaml").exists():  # the run's own checkpoint, not one copied in
            check_belongs(checkpoint, Config.from_yaml(run / "config.yaml"))
        demos = record_run(checkpoint, args.steps)
        source = f"run {args.run}"
    else:
        demos = record_strategy(cfg, args.strategy, args.steps)
        source = f"strategy {args.strategy}"
    path = write_demonstrations(Path(args.out), demos, source)
    T, N = demos.shape
    print(f"riskppo record: {N} sequence(s) x {T} steps of {source} → {path}")
    return 0


def cmd_pbt(args: argparse.Namespace) -> int:
    from riskppo.runs.lock import lock_run

    overrides = list(args.set or [])
    if args.backend:
        overrides.append(f"pbt.backend={args.backend}")
    if args.resume:
        run_dir = Path(args.resume)
        if args.run_dir and Path(args.run_dir) != run_dir:
            raise ConfigError("--resume names the run directory; drop --run-dir")
        if not (run_dir / "config.yaml").is_file():
            from riskppo.pbt.state import ResumeError

            raise ResumeError(f"{run_dir} is not a PBT run (no config.yaml); nothing to resume")
        # the run's own config; --config/--set may only repeat it (checked against the run)
        cfg = apply_overrides(Config.from_yaml(args.config or run_dir / "config.yaml"), overrides)
    else:
        cfg = read_data_early(load_config(args.config, overrides, default=DEFAULT_PBT_CONFIG))
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(cfg, prefix="pbt")
    if args.ray_address is not None and cfg.pbt.backend != "ray":
        raise ConfigError("--ray-address needs the Ray backend (--backend ray, pbt.backend=ray)")
    ledger = _ledger(args)
    with lock_run(run_dir, "riskppo pbt"):
        try:
            return _finish_pbt(cfg, run_dir, args, ledger)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the workers are ended
            return _stopped(exc, "pbt", "the finished rounds are kept", run_dir)


def _finish_pbt(cfg: Config, run_dir: Path, args: argparse.Namespace, ledger: Path | None) -> int:
    from riskppo.pbt import run_pbt
    from riskppo.pbt.local import summary_lines

    progress, resume = not args.no_progress, bool(args.resume)
    summary = run_pbt(
        cfg,
        run_dir,
        progress_bar=progress,
        resume=resume,
        on_message=print,
        ray_address=args.ray_address,
    )
    for line in summary_lines(summary, run_dir):
        print(line)
    if "best_checkpoint" in summary and summary["best_checkpoint"] is None:  # all failed
        first = summary["failures"][0] if summary.get("failures") else None
        cause = f"; first: m{first['member']}: {first['reason']}" if first else ""
        print(
            f"riskppo pbt: no member finished a round ({summary.get('n_failures', 0)} failed "
            f"interval(s){cause}); details in {run_dir / 'pbt_summary.json'}",
            file=sys.stderr,
        )
        return 1
    from riskppo.cli.backtest import print_flat_warning
    from riskppo.evaluation.kinds import backtest_report
    from riskppo.evaluation.trials import TrialSpec

    trial = TrialSpec(ledger, cfg, "pbt")  # the search is one configuration
    artifacts = backtest_report(cfg.env.id, Path(summary["best_dir"]), "test", trial)
    if artifacts is not None:  # the best member's test backtest (trading and portfolios)
        print(f"riskppo pbt: best member's test backtest report → {artifacts.report}")
        print_flat_warning(artifacts.out_dir, prefix="riskppo pbt")
    return 0


def cmd_universe(args: argparse.Namespace) -> int:
    """``riskppo universe``: the agent on each sp500 stock (and seed); exit 1 if a cell failed."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.resume or args.run_dir or Path("runs") / f"{stamp}-universe")
    try:
        results = _run_universe(args, run_dir)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: its cells stopped at a checkpoint
        kept = "finished cells are kept and running ones stopped at a checkpoint"
        return _stopped(exc, "universe", kept, run_dir)
    return 1 if any(r.error is not None for r in results) else 0


def _run_universe(args: argparse.Namespace, run_dir: Path) -> list[Any]:
    """The universe ``args`` name in ``run_dir``: resumed, or started there."""
    if args.resume:
        given = [f for f in ("config", "set", "symbols", "seeds", "run_dir") if getattr(args, f)]
        if given:
            flags = "/".join(f"--{f.replace('_', '-')}" for f in given)
            raise ConfigError(f"--resume continues a universe as it was started; drop {flags}")
    # the config is read and checked before torch loads: a mistyped key answers at once
    cfg = None if args.resume else load_config(args.config, args.set or [])
    from riskppo.cli.universe import resume_universe, run_universe

    run = {
        "workers": args.workers,
        "progress_bar": not args.no_progress,
        "ledger": _ledger(args),
        "backend": Backend(args.backend, args.ray_address),  # where the cells run
    }
    if cfg is None:
        return resume_universe(run_dir, **run)
    symbols = {"symbols": args.symbols} if args.symbols else {}
    return run_universe(cfg, run_dir, **symbols, seeds=args.seeds or [0], **run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="riskppo", description="Risk-aware recurrent distributional PPO"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--version", action="version", version=f"riskppo {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_train_parser, _eval_parser, _backtest_parser):
        add(sub)
    for arguments, command in (
        (walkforward_parser, cmd_walkforward),
        (record_parser, cmd_record),
        (pbt_parser, cmd_pbt),
        (universe_parser, cmd_universe),
        (bench_parser, cmd_bench),
        (signal_parser, cmd_signal),
        (paper_parser, cmd_paper),
    ):
        arguments(sub).set_defaults(func=command)
    return parser


SPLIT_HELP = "trading data period: train, val (validation) or test (default: %(default)s)"


def _train_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "train",
        "train an agent (default: the bundled default config)",
        "Train an agent and write everything into one run directory: config.yaml, "
        "metrics.jsonl and TensorBoard events, checkpoints, alerts.jsonl (only when an alert "
        "fires), eval.json on the validation period and, for a trading run, the backtest of "
        "the test period (backtest_test/report.html).",
    )
    p.add_argument("--config", help=config_help(DEFAULT_CONFIG))
    add_set(p)
    p.add_argument("--run-dir", help="run directory (default: runs/<time>-<env>-s<seed>)")
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its latest checkpoint, with its own config; "
        "--set total_timesteps=N trains it on to N steps",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="--run-dir already holds a run: delete that run's files and start clean",
    )
    add_ledger(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)


def _eval_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "eval",
        "evaluate a trained run",
        "Evaluate the newest good checkpoint of a run with the deterministic policy: a table "
        "of episode-return statistics, also written to RUN_DIR/evaluation[_SPLIT].json and "
        ".txt; with --attack, the return under observation attacks (robustness.json, a plot).",
    )
    p.add_argument("run_dir", help=RUN_DIR_HELP)
    p.add_argument(
        "--episodes",
        type=positive_int,
        default=10,
        help="episodes to run; a trading period that every episode replays from its first bar "
        "is run once (default: %(default)s)",
    )
    p.add_argument(
        "--attack",
        metavar="NAMES",
        help="robustness evaluation under observation attacks: comma-separated from "
        "random, pgd (MAD: max policy KL), critic (min predicted return)",
    )
    p.add_argument(
        "--eps",
        default="0.01,0.05,0.1",
        help="attack radii, comma-separated (L∞, normalised obs; default: %(default)s)",
    )
    p.add_argument(
        "--pgd-steps",
        type=positive_int,
        default=10,
        help="PGD steps per attacked step (default: %(default)s)",
    )
    p.add_argument(
        "--split",
        choices=("train", "val", "test"),
        default="val",
        help=SPLIT_HELP.replace(" (default", "; ignored for other envs (default"),
    )
    p.set_defaults(func=cmd_eval)


def _backtest_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "backtest",
        "backtest a trained trading agent against its baselines (buy-and-hold, supervised, ...)",
        "Backtest a trading (or portfolio) run on one data period against buy-and-hold, "
        "vol-targeted buy-and-hold, an SMA crossover and a supervised forecast (a portfolio "
        "run: skfolio's allocations), after costs: RUN_DIR/backtest_SPLIT/ with report.html, "
        "metrics.json and plots.",
    )
    p.add_argument("run_dir", help=RUN_DIR_HELP)
    p.add_argument("--split", choices=("train", "val", "test"), default="test", help=SPLIT_HELP)
    add_ledger(p)
    p.set_defaults(func=cmd_backtest)


def _walkforward_configs(args: argparse.Namespace) -> list[Config]:
    """The configs of ``riskppo walkforward`` (none with ``--resume``; ``--candidates``: one
    per file, each with ``--set``), read and checked before torch and pandas load: a mistyped
    key answers at once."""
    if args.resume and (args.config or args.set or args.candidates):
        raise ConfigError(
            "--resume continues a run with its own config; drop --config/--set/--candidates"
        )
    if args.candidates and args.config:
        raise ConfigError("--candidates replaces --config: name every configuration after it")
    if args.select_bars is not None and not args.candidates:
        raise ConfigError("--select-bars needs --candidates")
    if args.resume:
        return []
    if not args.candidates:
        return [read_data_early(load_config(args.config, args.set or []))]
    configs = []
    for path in args.candidates:
        try:
            configs.append(load_config(path, args.set or []))
        except ConfigError as exc:
            raise ConfigError(f"--candidates: {exc}") from None
    return [read_data_early(cfg) for cfg in configs]


def cmd_walkforward(args: argparse.Namespace) -> int:
    """``riskppo walkforward``: see :mod:`riskppo.walkforward.run`."""
    configs = _walkforward_configs(args)
    backend = Backend(args.backend, args.ray_address)  # where the cells run
    from riskppo.walkforward.plan import WalkForwardSettings
    from riskppo.walkforward.run import walk_forward
    from riskppo.walkforward.select import new_selection

    try:
        settings = WalkForwardSettings(
            initial=args.initial,
            step=args.step,
            window=args.window,
            train_bars=args.train_bars,
            seeds=tuple(args.seeds),
            warm_start=args.warm_start,
            warm_steps=args.warm_steps,
            workers=args.workers,
        )
    except ValueError as exc:  # a combination argparse cannot check (e.g. repeated seeds)
        raise ConfigError(str(exc)) from None
    selection = None
    if args.candidates:
        selection = new_selection(args.candidates, configs, args.select_bars, settings.step)
    if not configs:
        run_dir = Path(args.resume)
    else:
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(configs[0], prefix="wf")
    try:
        done = walk_forward(
            None if selection is not None or not configs else configs[0],
            run_dir,
            settings,
            resume=bool(args.resume),
            progress_bar=not args.no_progress,
            n_trials=args.trials,
            ledger=_ledger(args),
            selection=selection,
            on_message=print,
            backend=backend,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the workers are ended
        return _stopped(exc, "walkforward", "finished cells are kept", run_dir)
    print(done.summary)
    print(f"riskppo walkforward: report → {done.report}")
    if done.took is not None:
        print(done.took)
    return 0


def _stopped(exc: KeyboardInterrupt, command: str, kept: str, run_dir: Path) -> int:
    """Say on stderr that ``riskppo COMMAND`` was stopped, what is ``kept`` and how to continue;
    return the shell's status for the signal (130 for Ctrl-C, 143 for SIGTERM)."""
    signum = interrupt_signal(exc)
    print(
        f"riskppo {command}: stopped by {signal_name(signum)}; {kept} — continue with "
        f"`riskppo {command} --resume {run_dir}`",
        file=sys.stderr,
    )
    return 128 + signum


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent_if_asked()  # a cell of `riskppo universe` dies with the universe
    args = build_parser().parse_args(argv)
    # riskppo's own log at INFO; other libraries' (matplotlib's font cache, ...) only from WARNING
    configure_terminal(args.verbose)
    with warnings.catch_warnings():  # restored on return: library users keep Python's format
        warnings.showwarning = show_warning
        return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command. An error in the user's input (config, data, run directory,
    checkpoint, env, a path) is one line on stderr and exit code 2; anything else is a bug and
    keeps its traceback."""
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"riskppo: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("riskppo: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        message = user_error(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2
