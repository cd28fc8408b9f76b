"""Benchmarks against the naive way and the peers; run with ``python -m benchmarks``."""
