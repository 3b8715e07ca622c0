"""Market data: OHLCV files and bundled datasets, their checks, splits and folds."""
