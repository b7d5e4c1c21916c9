"""OpenBLAS reads OPENBLAS_THREAD_TIMEOUT when numpy loads it, and pytest may load numpy before any test module
imports convalgos: set it here first (convalgos would otherwise warn that numpy came first)."""
import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")
