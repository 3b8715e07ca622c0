"""Monitoring: alert rules on the update log, the metrics writer and the progress bar."""
