"""The simulator's shared arrays (``convalgos/gpu_simulator.py``): every thread of a block gets the same array
from one ``cuda.shared.array`` line, and two lines are two arrays, even with the threads switching at every
fresh NumPy array (where the simulator's own look-up-then-keep let two threads each make one: issue 40)."""
import sys
import time

import numpy as np
import pytest

from convalgos.arrays import simulator_enabled
from convalgos.gpu_compiler import cuda

pytestmark = pytest.mark.skipif(not simulator_enabled(), reason="the simulator's shared arrays only")

THREADS = 8


@cuda.jit
def sum_two_shared_arrays(out):
    a = cuda.shared.array(THREADS, np.int64)
    b = cuda.shared.array(THREADS, np.int64)
    t = cuda.threadIdx.x
    a[t], b[t] = t, 100 * t
    cuda.syncthreads()
    total = 0
    for i in range(THREADS):
        total += a[i] + b[i]
    out[t] = total


def test_every_thread_sees_every_threads_writes_with_switches_at_every_array(monkeypatch):
    empty = np.empty

    def yielding_empty(*args, **kwargs):
        made = empty(*args, **kwargs)
        time.sleep(0)                     # another thread runs now, between the array made and kept
        return made

    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        results = []
        for _ in range(10):               # each launch makes its shared arrays afresh
            out = np.zeros(THREADS, np.int64)
            monkeypatch.setattr(np, "empty", yielding_empty)
            sum_two_shared_arrays[1, THREADS](out)
            monkeypatch.setattr(np, "empty", empty)
            results.append(out.tolist())
    finally:
        sys.setswitchinterval(saved)
    assert results == [[101 * sum(range(THREADS))] * THREADS] * 10
