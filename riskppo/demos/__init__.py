"""Demonstration sets for behaviour cloning: their types and their safetensors and Parquet
files."""
