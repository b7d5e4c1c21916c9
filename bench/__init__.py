"""Benchmarks (``python -m bench.<name>``). convalgos is imported first, before any benchmark imports numpy or
torch: it sets OMP_WAIT_POLICY, GOMP_SPINCOUNT and OPENBLAS_THREAD_TIMEOUT, which those libraries read once
when they load (see convalgos/__init__.py for what each costs when they come first)."""
import convalgos  # noqa: F401
