"""The evaluation hooks of each env kind, registered on its
:class:`~riskppo.envs.registration.EnvKind` (registration from above: the env registry names the
hooks, the evaluation layer fills them; :mod:`riskppo.evaluation`'s package import runs this).

Hooks are ``"module:name"`` entry points, imported when first asked for, so registering them
imports nothing heavy. A kind without a hook takes the single-asset default where there is one
(:mod:`riskppo.evaluation.walkforward.run`):

* ``rows(cfg) -> int``: bars of the data the walk-forward schedule is cut from;
* ``backtest(model, part)``: the agent and the baselines over one part of the data;
* ``backtest_run(run_dir, split)``: the backtest of a run directory, with its report;
* ``walkforward_cell(model, job, cfg) -> dict``: a trained cell's record and summary;
* ``walkforward_outputs(run_dir, cfg, records, cells, n_trials) -> (metrics, report, summary)``.
"""

from __future__ import annotations

from riskppo.envs.registration import PORTFOLIO_ID, TRADING_ID, register_hooks

__all__: list[str] = []

register_hooks(
    TRADING_ID,
    backtest="riskppo.evaluation.backtest:backtest",
    backtest_run="riskppo.evaluation.backtest:backtest_run",
)
register_hooks(
    PORTFOLIO_ID,
    rows="riskppo.evaluation.portfolio.walkforward:portfolio_rows",
    backtest="riskppo.evaluation.portfolio.backtest:portfolio_backtest",
    backtest_run="riskppo.evaluation.portfolio.run:portfolio_backtest_run",
    walkforward_cell="riskppo.evaluation.portfolio.walkforward:portfolio_cell",
    walkforward_outputs="riskppo.evaluation.portfolio.walkforward:walkforward_outputs",
)
