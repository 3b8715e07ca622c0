"""Portfolio evaluation: skfolio baselines, the backtest, the walk-forward cells and report
(docs/portfolio.md)."""
