"""The error of malformed market data, and the settings that would avoid it, spelled for whoever
reads them.

A :class:`DataError` may carry a :class:`Remedy`: settings of :func:`~riskppo.envs.load_ohlcv`
(``sort=True``) that would load the file. Its message spells them as the reader typed them:

* a caller of ``load_ohlcv``: ``pass sort=True to sort the rows by time``;
* a config (``data`` section, :meth:`DataError.in_section`): ``set data.sort=true ...``;
* the command line (:meth:`DataError.render` with ``cli=True``): ``add --set data.sort=true ...``.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple


class Remedy(NamedTuple):
    """Keyword arguments of ``load_ohlcv`` that avoid an error, and what they do.

    Attributes:
        settings: ``(name, value)`` pairs, all needed together — or, with ``alternatives``,
            each one on its own.
        effect: what they do, e.g. ``"to sort the rows by time"``.
        alternatives: the settings are alternatives (joined with "or", not "and").
    """

    settings: tuple[tuple[str, object], ...]
    effect: str
    alternatives: bool = False

    def text(self, section: str | None = None, *, cli: bool = False) -> str:
        """The remedy in the reader's words: Python keywords (``section`` None), config keys
        under ``section`` or, with ``cli``, ``--set`` options."""
        if section is None:
            verb, parts = "pass", [f"{k}={v!r}" for k, v in self.settings]
        else:
            keys = [f"{section}.{k}={_yaml_scalar(v)}" for k, v in self.settings]
            verb, parts = ("add", [f"--set {k}" for k in keys]) if cli else ("set", keys)
        joiner = " or " if self.alternatives else (" " if cli and section else ", ")
        return f"{verb} {joiner.join(parts)} {self.effect}"


def _yaml_scalar(value: object) -> str:
    """``value`` as typed in YAML or after ``--set key=``: ``true``, ``null``, ``ffill``; text
    with other characters than letters, digits and ``_.+-/:%`` in double quotes (``";"``: bare,
    a shell would end the command there and YAML could read another value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    text = str(value)
    return text if re.fullmatch(r"[\w.+\-/:%]+", text) else json.dumps(text)


class DataError(ValueError):
    """Malformed market data. The message names the source, the row (if any) and the problem,
    then the remedy (if any) in the reader's words.

    Attributes:
        source: the file path (or a label for in-memory frames).
        row: 1-based data row number of the offending row, or ``None`` for file-level problems.
        problem: what is wrong, without source, row and remedy.
        remedy: settings that would load the data, or ``None``.
        section: the config section the settings live in (``"data"``), or ``None`` when the
            reader called ``load_ohlcv`` directly.
    """

    def __init__(
        self,
        source: str,
        problem: str,
        *,
        row: int | None = None,
        when: str = "",
        remedy: Remedy | None = None,
        section: str | None = None,
    ):
        self.source = source
        self.row = row
        self.when = when
        self.problem = problem
        self.remedy = remedy
        self.section = section
        super().__init__(self.render())

    def render(self, *, cli: bool = False) -> str:
        """The one-line message; ``cli``: the remedy as ``--set`` options (when in a section)."""
        where = ""
        if self.row is not None:
            where = (
                f"data row {self.row}" + (f" (timestamp {self.when})" if self.when else "") + ": "
            )
        fix = f"; {self.remedy.text(self.section, cli=cli)}" if self.remedy else ""
        return f"{self.source}: {where}{self.problem}{fix}"

    def in_section(self, section: str) -> DataError:
        """The same error with its remedy spelled as keys of config section ``section``."""
        return DataError(
            self.source,
            self.problem,
            row=self.row,
            when=self.when,
            remedy=self.remedy,
            section=section,
        )


class DataWarning(UserWarning):
    """Data that loads but is probably not what was meant. Its :attr:`detail` has the parts of a
    :class:`DataError` (source, row, problem, remedy) and spells them the same way."""

    def __init__(self, detail: DataError) -> None:
        self.detail = detail
        super().__init__(detail.render())

    def in_section(self, section: str) -> DataWarning:
        """The same warning with its remedy spelled as keys of config section ``section``."""
        return DataWarning(self.detail.in_section(section))

    def cli_text(self) -> str:
        """The message with its remedy as ``--set`` options (the command line shows this)."""
        return self.detail.render(cli=True)


@contextmanager
def data_warnings_in(section: str) -> Iterator[None]:
    """Load data inside: each :class:`DataWarning` it raises is raised again (on leaving) with
    its remedy spelled as keys of config section ``section``; other warnings pass unchanged."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        message = w.message.in_section(section) if isinstance(w.message, DataWarning) else w.message
        warnings.warn_explicit(message, w.category, w.filename, w.lineno)
