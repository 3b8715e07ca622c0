"""The walk-forward hooks of each env kind, registered on its
:class:`~riskppo.envs.registration.EnvKind` when :mod:`riskppo.walkforward` is imported (the
backtest's own hooks are :mod:`riskppo.evaluation.kinds`). Hooks are ``"module:name"`` entry
points, imported when first asked for. A kind without one takes the single-asset default of
:mod:`riskppo.walkforward.run`:

* ``rows(cfg) -> int``: bars of the data the walk-forward schedule is cut from;
* ``walkforward_cell(model, job, cfg) -> dict``: a trained cell's record and summary;
* ``walkforward_outputs(run_dir, cfg, records, cells, n_trials, trials) -> (metrics, report,
  summary)``; ``trials``: the trial ledger's block for the record, or None.
"""

from __future__ import annotations

from riskppo.envs.registration import PORTFOLIO_ID, register_hooks

__all__: list[str] = []

register_hooks(
    PORTFOLIO_ID,
    rows="riskppo.walkforward.portfolio:portfolio_rows",
    walkforward_cell="riskppo.walkforward.portfolio:portfolio_cell",
    walkforward_outputs="riskppo.walkforward.portfolio:walkforward_outputs",
)
