"""From a trained run to tomorrow's order (docs/deploy.md).

* :mod:`riskppo.live.signal` — ``riskppo signal``: the target exposure for the next bar
  after a price file's last bar, equal to the backtest's position on the same bars;
* :mod:`riskppo.live.paper` — ``riskppo paper``: a restart-safe paper-trading loop
  over a feed that grows, its state and order log kept in the run directory;
* :mod:`riskppo.live.decide` — the decision at a bar that cannot be stepped yet;
* :mod:`riskppo.live.inputs` — the run's env over a user's file.
"""
