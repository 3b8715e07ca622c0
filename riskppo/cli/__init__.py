"""The ``riskppo`` command line (design §1.3): everything that is the application, above the
library. The library returns results; only this package prints them (docs/design.md, Layout).

* :mod:`~riskppo.cli.main`: the parser, the commands and :func:`main`;
* :mod:`~riskppo.cli.args`: the subcommands' arguments and the help texts they share;
* :mod:`~riskppo.cli.errors`: one-line errors and warnings;
* :mod:`~riskppo.cli.runner`: ``riskppo train`` / ``eval --attack``: train or resume a run, then
  its evaluation and backtest report;
* :mod:`~riskppo.cli.universe`: ``riskppo universe``, one ``riskppo train`` process per cell;
* :mod:`~riskppo.cli.bench`: ``riskppo bench``;
* :mod:`~riskppo.cli.config_doc`: writes docs/config.md (``python -m riskppo.cli.config_doc``).

``python -m riskppo.cli ARGS`` is ``riskppo ARGS``.
"""

from __future__ import annotations

from riskppo.cli.main import main

__all__ = ["main"]
