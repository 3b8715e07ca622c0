"""Checkpoints: the format and its restore, safe file I/O, size bounds, the training-state
codec and the Snapshot the façade assembles."""
