"""The backtest hooks of each env kind, registered on its
:class:`~riskppo.envs.registration.EnvKind` (registration from above: the env registry names the
hooks, the evaluation layer fills them; :mod:`riskppo.evaluation`'s package import runs this;
the walk-forward's hooks are :mod:`riskppo.walkforward.kinds`).

Hooks are ``"module:name"`` entry points, imported when first asked for, so registering them
imports nothing heavy:

* ``backtest(model, part)``: the agent and the baselines over one part of the data;
* ``backtest_run(run_dir, split, *, trial)``: the backtest of a run directory, with its report,
  recorded in ``trial``'s ledger (:func:`backtest_report` looks it up for an env id).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from riskppo.envs.registration import PORTFOLIO_ID, TRADING_ID, env_kind, register_hooks

if TYPE_CHECKING:
    from riskppo.evaluation.trials import TrialSpec

__all__ = ["backtest_report"]

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


def backtest_report(env_id: str, run_dir: Path, split: str, trial: TrialSpec | None) -> Any:
    """The ``backtest_run`` hook of ``env_id``'s kind on ``run_dir``'s ``split``, recorded in
    ``trial``'s ledger: artifacts with ``verdict()``, ``report`` and ``out_dir``; None for an
    env without a backtest (a control task)."""
    kind = env_kind(env_id)
    if kind is None or "backtest_run" not in kind.hooks:
        return None
    return kind.hook("backtest_run")(run_dir, split, trial=trial)
