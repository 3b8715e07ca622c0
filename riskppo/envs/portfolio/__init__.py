"""Portfolios: many aligned assets, target weights, portfolio sizing and its risk overlay
(:class:`~riskppo.envs.portfolio.env.PortfolioEnv`; docs/portfolio.md)."""
