"""The package version (one place; ``riskppo.__version__`` re-exports it)."""

__version__ = "0.1.0"
