"""Walk-forward evaluation: retrain every ``step`` bars, trade the next ``step`` bars frozen, and
judge the stitched out-of-sample record.

* :mod:`~riskppo.walkforward.plan`: the segments and the settings;
* :mod:`~riskppo.walkforward.run`: the cells (one training each) in worker processes,
  resumable, and ``riskppo walkforward``;
* :mod:`~riskppo.walkforward.select`: ``--candidates``, the choice among
  configurations inside each segment's training rows;
* :mod:`~riskppo.walkforward.analysis`: the stitched records and their statistics;
* :mod:`~riskppo.walkforward.report`: the tables, the charts and ``report.html``.

* :mod:`~riskppo.walkforward.portfolio`: the portfolio env's cells and report (its hooks are
  registered on the env kind when this package is imported, :mod:`~riskppo.walkforward.kinds`).

``from riskppo.walkforward import run_cell`` (any name of :mod:`~riskppo.walkforward.run`) is
imported on first use (PEP 562).
"""

from __future__ import annotations

from riskppo.lazy import lazy_names
from riskppo.walkforward import kinds  # noqa: F401 (registers the env kinds' walk-forward hooks)

__getattr__ = lazy_names(__name__, "riskppo.walkforward.run")
