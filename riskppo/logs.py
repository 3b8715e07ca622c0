"""How riskppo's log records and warnings look on a terminal: in the command line, and in the
worker processes it spawns (PBT members, walk-forward cells).

The library logs to the ``riskppo`` logger, warns through :mod:`warnings` and configures neither;
a Python user's own set-up decides. The command line shows both as one line each, like its
errors: ``riskppo: warning: …``, ``riskppo: error: …``, ``riskppo: …`` for information
(its ``warnings.showwarning``: :func:`riskppo.cli.errors.show_warning`). Another library's log
record keeps its level and name (``WARNING matplotlib: …``).

The library prints nothing but the training output a Python user asks for (SB3's ``verbose``
and ``progress_bar``); the command line prints (docs/design.md, Layout). What a function finds
it returns; a line for its user while it runs (a damaged file it makes again, the population it
starts) goes to its ``on_message`` argument (:data:`OnMessage`), by default :func:`log_message`;
the command line passes ``print``, so the line reads as it did and appears when it did.

A spawned worker starts with Python's default logging (its records would print bare, or not at
all); :func:`current_setup` in the parent and :func:`apply` first thing in the worker give it the
parent's levels and format. Its warnings are sent to the parent to be shown there
(:mod:`riskppo.runs.processes`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "LogSetup",
    "OnMessage",
    "TerminalFormatter",
    "apply",
    "configure_terminal",
    "current_setup",
    "log_message",
    "one_line",
]

OnMessage = Callable[[str], None]
"""A function's ``on_message``: takes each line it has for its user while it runs."""


def log_message(message: str) -> None:
    """The default ``on_message``: an INFO record of the ``riskppo`` logger, shown where a Python
    user's own logging set-up shows it (``logging.basicConfig(level=logging.INFO)``)."""
    logging.getLogger("riskppo").info(message)


# a riskppo record's label after "riskppo: ", by its level (none below WARNING)
_LABELS = ((logging.ERROR, "error: "), (logging.WARNING, "warning: "))


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join(text.split())


def _is_riskppo(record: logging.LogRecord) -> bool:
    return record.name == "riskppo" or record.name.startswith("riskppo.")


class TerminalFormatter(logging.Formatter):
    """riskppo's records as ``riskppo: warning: MESSAGE`` (``error:`` at ERROR and above, no
    label below WARNING), whitespace folded to one line; other loggers' as ``LEVEL name: MESSAGE``.
    A logged exception's traceback is kept below its line."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if _is_riskppo(record):
            label = next((text for lv, text in _LABELS if record.levelno >= lv), "")
            line = f"riskppo: {label}{one_line(message)}"
        else:
            line = f"{record.levelname} {record.name}: {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


@dataclass(frozen=True)
class LogSetup:
    """The terminal logging of a process, to be repeated in the workers it spawns.

    ``level``: the root logger's level (other libraries' records); ``riskppo_level``: the
    ``riskppo`` logger's."""

    level: int
    riskppo_level: int


def configure_terminal(verbose: bool) -> None:
    """The command line's logging: riskppo's records from INFO (DEBUG with ``verbose``), other
    libraries' from WARNING (DEBUG with ``verbose``), one line each on stderr."""
    level = logging.DEBUG if verbose else logging.WARNING
    apply(LogSetup(level=level, riskppo_level=min(level, logging.INFO)))


def apply(setup: LogSetup | None) -> None:
    """Show log records on stderr as ``setup`` says (None: leave Python's defaults). Like
    :func:`logging.basicConfig`, a root logger that already has handlers (the user's own set-up,
    or a second call) keeps them and its level; the ``riskppo`` logger's level is always set."""
    if setup is None:
        return
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(TerminalFormatter())
        root.addHandler(handler)
        root.setLevel(setup.level)
    logging.getLogger("riskppo").setLevel(setup.riskppo_level)


def current_setup() -> LogSetup | None:
    """This process's terminal logging if :func:`apply` set it up (the command line), else None:
    a library user's workers keep Python's defaults."""
    root = logging.getLogger()
    if not any(isinstance(h.formatter, TerminalFormatter) for h in root.handlers):
        return None
    return LogSetup(level=root.level, riskppo_level=logging.getLogger("riskppo").level)
