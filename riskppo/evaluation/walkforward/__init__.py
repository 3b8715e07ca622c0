"""Walk-forward evaluation: retrain every ``step`` bars, trade the next ``step`` bars frozen, and
judge the stitched out-of-sample record.

* :mod:`~riskppo.evaluation.walkforward.plan`: the segments and the settings;
* :mod:`~riskppo.evaluation.walkforward.run`: the cells (one training each) in worker processes,
  resumable, and ``riskppo walkforward``;
* :mod:`~riskppo.evaluation.walkforward.select`: ``--candidates``, the choice among
  configurations inside each segment's training rows;
* :mod:`~riskppo.evaluation.walkforward.analysis`: the stitched records and their statistics;
* :mod:`~riskppo.evaluation.walkforward.report`: the tables, the charts and ``report.html``.

``from riskppo.evaluation.walkforward import run_cell`` (any name of
:mod:`~riskppo.evaluation.walkforward.run`, the module this package was before) still works,
imported on first use (PEP 562).
"""

from __future__ import annotations

from riskppo.lazy import lazy_names

__getattr__ = lazy_names(__name__, "riskppo.evaluation.walkforward.run")
