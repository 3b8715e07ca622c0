"""The single-asset trading env and what it is made of.

* :mod:`~riskppo.envs.trading.env`: :class:`TradingEnv`, one asset's bars as a Gymnasium env;
* :mod:`~riskppo.envs.execution.args`: its argument checks;
* :mod:`~riskppo.envs.execution.sizing`: volatility-targeted position sizing;
* :mod:`~riskppo.envs.execution.overlay`: the pre-trade risk overlay (also the portfolio env's);
* :mod:`~riskppo.envs.execution.fills`: when a decision fills and what one step earns;
* :mod:`~riskppo.envs.trading.batch` and :mod:`~riskppo.envs.trading.vec`: n episodes of one
  env stepped as array operations, and the vector env around them;
* :mod:`~riskppo.envs.trading.strategies`: the baselines' and teachers' target exposures.

``TradingEnv`` is imported lazily (PEP 562): importing a part (the sizing, say) does not build the
env's module, whose features module itself imports the sizing.
"""

from __future__ import annotations

from riskppo.lazy import lazy_names

__all__ = ["TradingEnv"]
__getattr__ = lazy_names(__name__, "riskppo.envs.trading.env", frozenset(__all__))


def __dir__() -> list[str]:
    return __all__
