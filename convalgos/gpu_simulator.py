"""The Numba CUDA simulator's shared arrays, made one per line and launch for all of a block's threads.

The simulator runs a block's threads as Python threads. ``cuda.shared.array`` there (``FakeCUDAShared.array``,
numba-cuda 0.30.4 and numba 0.68) keeps one NumPy array per launch and calling line: it looks the line up and,
finding nothing, makes an array with ``np.empty`` and keeps it. The look-up and the keep are two steps with
nothing held between them, so two threads of a launch's first block that reach the line together can each find
nothing and each make an array: the later keep wins, and the other thread works on an array of its own. What it
writes there no other thread reads; what it reads there is ``np.empty``'s leftover memory, not the others'
writes. A kernel then gives a wrong answer that no barrier prevents: a normwise error of 1e31 or NaN where the
thread writing the output read its own U or V tile (``bench/gpu_check.py --simulate``, the fused Winograds'
first case, 2 runs in 10 on an Intel Xeon, issue 40). It needs a thread switch right after the ``np.empty``
while another thread of the block is about to look the line up: likeliest, as we read it, in a process's first
launch of a kernel, where each thread's ``traceback.extract_stack`` first reads the kernel's source file (the
interpreter let go during the reads), so the first block's threads arrive at the line together. Forced by a
switch at every fresh array (``tests/gpu/test_gpu_simulator.py``), it came in every one of 5 fresh processes.

``serialise_shared_arrays`` replaces that method, once per process, with one that holds a lock over the look-up
and the keep. It keys the kept arrays as the original does (the caller's file and line), so the original's one
documented limit stays (two ``cuda.shared.array`` calls on one line are one array), and it reads the caller's
frame directly instead of extracting the whole stack. The dynamic shared array (shape 0, one buffer made before
the threads start) and ``alignment`` (refused) go to the original. Nothing changes on a GPU. Remove this when
numba-cuda serialises its shared arrays itself.
"""
from __future__ import annotations

import functools
import sys
import threading

import numpy as np

_keeping = threading.Lock()


def serialise_shared_arrays() -> None:
    """Make the simulator's ``cuda.shared.array`` hand every thread of a launch the same array (docstring)."""
    from numba.cuda.simulator import kernelapi
    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "serialised", False):
        return
    original = shared.array

    @functools.wraps(original)
    def array(self, shape, dtype, alignment=None):
        if alignment is not None:                # refused by numba-cuda's; numba's own takes no alignment
            return original(self, shape, dtype, alignment)
        if shape == 0:
            return original(self, shape, dtype)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        line = (caller.f_code.co_filename, caller.f_lineno)
        with _keeping:
            kept = self._allocations.get(line)
            if kept is None:
                kept = self._allocations[line] = np.empty(shape, dtype)
        return kept

    array.serialised = True
    shared.array = array
