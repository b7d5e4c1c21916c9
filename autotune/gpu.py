"""The GPU device of the tuner: CuPy arrays, CUDA-event timing, pool-measured workspace, out-of-memory skips.

Importing this module registers ``GpuDevice`` in ``autotune.tuner.DEVICES`` (it imports no CuPy: a CuPy array
is recognised by its type's module). For a CuPy input the tuner then
- keys the table by the GPU's name and compute capability (``Key.device``, e.g. "cuda:NVIDIA H200 cc9.0") and
  its multiprocessor count (``Key.threads``);
- times each run between two CUDA events recorded after a synchronise (``CudaEventTimer``);
- runs the GPU implementation of the chosen name (``convalgos.cuda.ALGORITHMS``; a tuner built with
  ``Tuner(convalgos.cuda.ALGORITHMS)`` also sees ``implicit_gemm``);
- records as a candidate's workspace the growth of CuPy's memory pool during its warm-up run (its kept buffers
  are allocated then; temporaries served by blocks already cached in the pool are not counted);
- skips a candidate that runs out of memory, with that reason, after freeing the pool's cached blocks.
"""
from __future__ import annotations

import functools
import time

from convalgos.backend import is_cupy_array

from . import tuner


class CudaEventTimer:
    """Seconds of GPU time of a call: CUDA events around it, after a synchronise."""

    def now(self) -> float:
        return time.perf_counter()

    def time(self, fn) -> float:
        import cupy
        cupy.cuda.Device().synchronize()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3


class GpuDevice(tuner.CpuDevice):
    """CuPy arrays on the current CUDA device."""

    def __init__(self):
        self.timer = CudaEventTimer()
        self.last_workspace = None

    @functools.cached_property
    def _properties(self) -> dict:
        import cupy
        return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)

    @property
    def name(self) -> str:
        props = self._properties
        gpu = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"cuda:{gpu} cc{props['major']}.{props['minor']}"

    def owns(self, x) -> bool:
        return is_cupy_array(x)

    def threads(self) -> int:
        return int(self._properties["multiProcessorCount"])

    @property
    def failures(self) -> tuple:
        import cupy
        return (cupy.cuda.memory.OutOfMemoryError,)

    def empty(self, shape, dtype):
        import cupy
        return cupy.empty(shape, dtype)

    def run(self, algorithm, x, weight, bias, p, out=None):
        import cupy
        from convalgos import cuda
        pool = cupy.get_default_memory_pool()
        before = pool.total_bytes()
        y = cuda.run(cuda.ALGORITHMS[algorithm.name], x, weight, bias, p, out)
        self.last_workspace = max(0, pool.total_bytes() - before)
        return y

    def host(self, a):
        return a.get()

    def release(self) -> None:
        import cupy
        from convalgos import cuda
        cuda.release_workspaces()
        cupy.get_default_memory_pool().free_all_blocks()


tuner.DEVICES.append(GpuDevice())
