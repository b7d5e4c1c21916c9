"""The device-operation counter: how many GPU operations the library issues, by name, on a GPU and in the
simulator alike.

    >>> with convalgos.cuda.count_ops() as ops:
    ...     model(x)
    >>> ops.total, ops.by_name                    # 41, {"direct.forward": 20, "cublas.gemm": 12, ...}

Every operation the library puts on a stream is recorded at the point where it is issued:

- a Numba kernel launch, by ``gpu_base.launch`` (named ``<module tail>.<kernel factory>``, say
  ``im2col.gpu_kernels.im2col_kernel``), so no launch is missed;
- a library call (cuBLAS, cuFFT) or an array-module kernel (a CuPy copy, fill or reduction), by the code that
  calls it: ``record("cublas.gemm")`` beside the call, since no hook sees those.

On a GPU the count is what a profiler would list as the library's kernels (a cuBLAS call may run more than one
kernel: torch.profiler's count beside it in ``bench.gpu_check`` shows by how much). Under the simulator the same
calls run on NumPy and are counted the same way, so tests pin each layer's count without a GPU. Counting costs
one dict update per operation while a counter is open and a global read otherwise. Counters nest: an operation
counts in every open counter.
"""
from __future__ import annotations

import contextlib
from collections import Counter

#: the counters open now (innermost last)
_OPEN: list["OpCounts"] = []


class OpCounts:
    """Operations counted while a ``count_ops`` block ran: ``total`` and ``by_name``."""

    def __init__(self):
        self.by_name: Counter = Counter()

    @property
    def total(self) -> int:
        """All operations counted."""
        return sum(self.by_name.values())

    def __repr__(self) -> str:
        return f"<{self.total} device operations: {dict(self.by_name.most_common())}>"


@contextlib.contextmanager
def count_ops():
    """Count the device operations issued inside the block (module docstring)."""
    counts = OpCounts()
    _OPEN.append(counts)
    try:
        yield counts
    finally:
        _OPEN.remove(counts)


def record(name: str, n: int = 1) -> None:
    """Count ``n`` operations called ``name`` in every open counter (nothing when none is open)."""
    for counts in _OPEN:
        counts.by_name[name] += n
