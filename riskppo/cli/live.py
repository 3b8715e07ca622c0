"""``riskppo signal`` and ``riskppo paper``: what the command line prints of tomorrow's order
(docs/deploy.md). The decisions and the paper account are
:mod:`riskppo.live.signal` and :mod:`riskppo.live.paper`."""

from __future__ import annotations

import argparse
import csv
import math

import pandas as pd

from riskppo.live.inputs import check_feed

__all__ = ["cmd_paper", "cmd_signal"]


def cmd_signal(args: argparse.Namespace) -> int:
    """``riskppo signal RUN_DIR --data FILE [--start TIME] [--json OUT]``."""
    check_feed(args.run_dir, args.data, args.start)  # before the model's libraries load
    from riskppo.live.signal import signal, write_signal

    record = signal(args.run_dir, args.data, start=args.start)
    print(f"riskppo signal: {args.run_dir} on {args.data}")
    for line in record.lines():
        print(f"  {line}")
    if args.json:
        print(f"riskppo signal: written to {write_signal(record, args.json)}")
    return 0


def _order_line(row: str) -> str:
    """An ``orders.csv`` row (time,asset,from,to,reason) for a terminal."""
    from riskppo.live.signal import bar_time

    when, asset, old, new, reason = next(csv.reader([row]))
    move = f"{float(old):+.4f} → {float(new):+.4f}"
    return f"{bar_time(pd.Timestamp(when))} {asset}: {move} ({reason})"


def cmd_paper(args: argparse.Namespace) -> int:
    """``riskppo paper RUN_DIR --data FEED``; exit 1 when the check finds a mismatch."""
    check_feed(args.run_dir, args.data)  # before the model's libraries load
    from riskppo.live.paper import paper_step
    from riskppo.live.signal import bar_time

    report = paper_step(args.run_dir, args.data)
    s = report.state
    last = bar_time(pd.Timestamp(s.last_bar))
    if report.new_bars == 0:
        print(f"riskppo paper: no new bars in {args.data} since {last}")
    elif s.orders_rows == len(report.rows) and s.paper_start == s.last_bar:
        print(
            f"riskppo paper: warmed up on {report.new_bars} bars from "
            f"{bar_time(pd.Timestamp(s.episode_start))}; the paper account starts at {last}"
        )
    else:
        print(f"riskppo paper: {report.new_bars} new bar(s) up to {last}")
    for row in report.rows:
        print(f"  order {_order_line(row)}")
    equity = math.exp(s.log_equity - s.log_equity_start)
    print(
        f"riskppo paper: target exposure {s.exposure:+.6f} from the bar after {last}; "
        f"equity {equity:.6f} since {bar_time(pd.Timestamp(s.paper_start))}; {s.orders_rows} "
        "order row(s) "
        "in total"
    )
    print(f"riskppo paper: {report.check}")
    return 0 if report.ok else 1
