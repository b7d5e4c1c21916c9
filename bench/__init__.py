"""Benchmarks (``python -m bench.<name>``), each writing its record under ``bench/results``. This package
imports nothing, so that a benchmark's child process imports numpy, torch or convalgos first, as the order under
test asks (``bench/orders.py``)."""
