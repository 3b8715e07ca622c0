"""Portfolio evaluation: skfolio baselines, the backtest, and the report of one run's backtest
and of a walk-forward's stitched record (docs/portfolio.md; the walk-forward's cells are
:mod:`riskppo.walkforward.portfolio`)."""
