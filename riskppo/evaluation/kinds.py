"""The backtest hooks of each env kind, registered on its
:class:`~riskppo.envs.registration.EnvKind` (registration from above: the env registry names the
hooks, the evaluation layer fills them; :mod:`riskppo.evaluation`'s package import runs this;
the walk-forward's hooks are :mod:`riskppo.walkforward.kinds`).

Hooks are ``"module:name"`` entry points, imported when first asked for, so registering them
imports nothing heavy:

* ``backtest(model, part)``: the agent and the baselines over one part of the data;
* ``backtest_run(run_dir, split)``: the backtest of a run directory, with its report.
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
    backtest="riskppo.evaluation.portfolio.backtest:portfolio_backtest",
    backtest_run="riskppo.evaluation.portfolio.run:portfolio_backtest_run",
)
