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
    for kinds, label in _user_errors():
        if isinstance(exc, kinds):
            return f"riskppo: {label}{exc}{_advice(exc)}"
    if isinstance(exc, OSError) and exc.errno in OS_ERROR_HINTS:
        where = " → ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        what = f"{where}: {exc.strerror}" if where else str(exc.strerror or exc)
        return f"riskppo: {what}; {OS_ERROR_HINTS[exc.errno]}"
    if isinstance(exc, FileNotFoundError):  # riskppo's own, with its message
        return f"riskppo: {exc}" + ("" if ";" in str(exc) else "; check the path")
    return None


def _user_errors() -> list[tuple[type[BaseException] | tuple[type[BaseException], ...], str]]:
    """The error types that are the user's input, each with its message label."""
    from gymnasium.error import DependencyNotInstalled, DeprecatedEnv, UnregisteredEnv

    from riskppo.algo.update import NonFiniteTrainingError
    from riskppo.demos.files import DemonstrationError
    from riskppo.envs.vec.build import EnvOutputError, NonFiniteInputError
    from riskppo.live.inputs import LiveInputError
    from riskppo.nn.outputs import NonFiniteOutputError
    from riskppo.pbt.state import ResumeError
    from riskppo.pbt.storage import PopulationStopped
    from riskppo.persist.checkpoint import CheckpointError
    from riskppo.runs.lock import RunLockError
    from riskppo.runs.rundir import RunDirError
    from riskppo.safefs import UnsafePathError

    return [
        (RunLockError, "run directory locked: "),
        (RunDirError, ""),
        (LiveInputError, ""),
        (UnsafePathError, "unsafe path: "),
        (CheckpointError, "checkpoint error: "),
        ((EnvOutputError, NonFiniteInputError), "env error: "),
        ((UnregisteredEnv, DeprecatedEnv, DependencyNotInstalled), "env error: "),
        (NonFiniteTrainingError, "training stopped: "),
        (DemonstrationError, "demonstration error: "),
        (ResumeError, ""),
        (NonFiniteOutputError, "unusable policy: "),
        (PopulationStopped, "PBT stopped: "),
    ]


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
