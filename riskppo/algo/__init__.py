"""The algorithm: training state, one iteration (collect → estimate → PopArt rescale → update),
rollout buffer, CVaR constraint, loss terms, BC sources and the typed update log."""
