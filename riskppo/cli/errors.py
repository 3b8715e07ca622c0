"""How the command line reports errors: one line, what and where, what to do; and warnings,
one line each too (:func:`show_warning`; its log records: :mod:`riskppo.logs`).

An error in the user's input (config, data, run directory, checkpoint, env, a path) is one line
on stderr and exit code 2 (:func:`user_error` gives the line); anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import errno
import sys
from typing import TextIO

from riskppo.logs import one_line

# OS errors that come from the user's paths or machine (a missing or unwritable path, a full
# disk), with what to do about them; any other OSError is reported as a bug (traceback).
OS_ERROR_HINTS: dict[int, str] = {
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "check the path (a part of it is a file, not a directory)",
    errno.EISDIR: "pass a file, not a directory",
    errno.EEXIST: "remove it or choose another path",
    errno.EACCES: "check its permissions or choose another path",
    errno.EPERM: "check its permissions or choose another path",
    errno.EROFS: "choose a path on a writable file system",
    errno.ENOSPC: "free disk space or choose another path",
    errno.EDQUOT: "free disk space or choose another path",
    errno.EFBIG: "the file hit a size limit (ulimit -f or the file system's); raise it or "
    "choose another path",
    errno.EIO: "the device reported an I/O error; check the disk",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.ELOOP: "check the path (a symlink loop)",
}


def user_error(exc: BaseException) -> str | None:
    """The one-line message for an error that is the user's input (a bad or missing run
    directory, checkpoint, data file, env or path), or ``None`` for anything else (a bug:
    traceback)."""
    from riskppo.envs.market.errors import DataError

    if isinstance(exc, DataError):  # its remedy as --set options
        return f"riskppo: data error: {exc.render(cli=True)}{_advice(exc)}"
    label = user_error_label(exc)
    if label is not None:
        return f"riskppo: {label}{exc}{_advice(exc)}"
    if isinstance(exc, OSError) and exc.errno in OS_ERROR_HINTS:
        where = " → ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        what = f"{where}: {exc.strerror}" if where else str(exc.strerror or exc)
        return f"riskppo: {what}; {OS_ERROR_HINTS[exc.errno]}"
    if isinstance(exc, FileNotFoundError):  # riskppo's own, with its message
        return f"riskppo: {exc}" + ("" if ";" in str(exc) else "; check the path")
    return None


# The error types that are the user's input, by defining module and name, each with its message
# label. Matched along the exception's class hierarchy, by name: an exception of one of these
# types exists only if its module was imported, so nothing is imported to recognise it (importing
# them all would cost an error seconds: riskppo.pbt brings in the backtest and its statistics).
USER_ERRORS: dict[str, str] = {
    "riskppo.runs.lock.RunLockError": "run directory locked: ",
    "riskppo.runs.rundir.RunDirError": "",
    "riskppo.live.inputs.LiveInputError": "",
    "riskppo.safefs.UnsafePathError": "unsafe path: ",
    "riskppo.persist.files.CheckpointError": "checkpoint error: ",
    "riskppo.envs.vec.build.EnvOutputError": "env error: ",
    "riskppo.envs.vec.build.NonFiniteInputError": "env error: ",
    "gymnasium.error.UnregisteredEnv": "env error: ",
    "gymnasium.error.DeprecatedEnv": "env error: ",
    "gymnasium.error.DependencyNotInstalled": "env error: ",
    "riskppo.algo.update.NonFiniteTrainingError": "training stopped: ",
    "riskppo.demos.types.DemonstrationError": "demonstration error: ",
    "riskppo.pbt.state.ResumeError": "",
    "riskppo.nn.outputs.NonFiniteOutputError": "unusable policy: ",
    "riskppo.pbt.storage.PopulationStopped": "PBT stopped: ",
}


def user_error_label(exc: BaseException) -> str | None:
    """The label of :data:`USER_ERRORS` for ``exc``'s most specific listed class, or ``None``."""
    for cls in type(exc).__mro__:
        label = USER_ERRORS.get(f"{cls.__module__}.{cls.__qualname__}")
        if label is not None:
            return label
    return None


def _advice(exc: BaseException) -> str:
    """What to do, for the errors whose own message does not say it."""
    from gymnasium.error import UnregisteredEnv

    from riskppo.envs.market.errors import DataError

    if isinstance(exc, DataError) and exc.remedy is None:
        return (
            "; fix the file or point data.path at another one (accepted columns and formats: "
            "docs/data.md)"
        )
    if isinstance(exc, UnregisteredEnv):
        return "; check env.id (a registered Gymnasium id, or 'module:Name' that registers it)"
    return ""


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` of the command line: ``riskppo: warning: MESSAGE`` on one line,
    without Python's ``file:line: Category`` and the echoed source line."""
    cli_text = getattr(message, "cli_text", None)  # a remedy spelled as --set options
    text = cli_text() if callable(cli_text) else str(message)
    print(f"riskppo: warning: {one_line(text)}", file=file or sys.stderr)
