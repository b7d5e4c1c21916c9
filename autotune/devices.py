"""The devices the tuner runs on: each is one of convalgos' backends (``convalgos.backends``, the one table of
which arrays a backend owns, its array module and its registry) with what timing on it needs.

A device answers, for the tuner:

- ``owns(x)``: is ``x`` one of its arrays? (``device_of`` asks each device in ``DEVICES`` in turn; the
  answer is its backend's);
- ``algorithms``: its backend's registry, name -> Algorithm, asked with its own ``supports``,
  ``workspace_bytes`` and ``flops``: the CPU's is ``convalgos.ALGORITHMS``, the GPU's
  ``convalgos.cuda.ALGORITHMS``; ``xp``: its array module;
- ``name`` (part of the table's key), ``kind`` ("cpu" or "cuda": which heuristics apply), ``layout(x)`` and
  ``threads()`` (also in the key);
- ``timer``: how a run is timed (wall clock on the CPU; on the GPU host and GPU time apart, ``time_both``:
  ``race.py`` says what the race does with them);
- ``run(algorithm, op, a, b, p, out, bias, prepared)``: one pass through ``convalgos.run``; ``last_workspace``: bytes
  the last run newly allocated, where the device can see it (the GPU's memory pool), else None;
- ``host(a)``: a NumPy view or copy of a result, for the reference check;
- ``release(algorithm)``: free what a failed candidate left behind;
- ``before_candidate()``: called before each candidate's checked run while tuning (the GPU frees its memory
  pool's cached blocks, so the previous candidate's temporaries neither hide this one's workspace growth nor
  hold memory it may need).

``SimulatedGpuDevice`` runs the GPU registry on NumPy arrays under the Numba CUDA simulator, so the GPU tuning
path is tested without a GPU (``Tuner(devices=[SimulatedGpuDevice()])``).
"""
from __future__ import annotations

import functools
import time

import numba
import numpy as np

import convalgos
from convalgos.backends import BACKENDS

from .graph import refuse_in_capture
from .measure import Timer
from .race.clock import wake_pool


class CpuDevice:
    """NumPy arrays on the CPU, run by the CPU registry."""

    name = "cpu"
    kind = "cpu"
    last_workspace = None
    backend = BACKENDS["cpu"]

    def __init__(self):
        self.timer = Timer()

    @functools.cached_property
    def algorithms(self) -> dict:
        """The backend's registry, resolved once (the GPU's is imported at first use, not at every call)."""
        return self.backend.registry

    @functools.cached_property
    def xp(self):
        """The backend's array module, resolved once."""
        return self.backend.xp

    def owns(self, x) -> bool:
        return self.backend.owns(x)

    def layout(self, x) -> str:
        if x.flags.c_contiguous:
            return "contiguous"
        return "channels_last" if x.transpose(0, 2, 3, 1).flags.c_contiguous else "strided"

    def threads(self) -> int:
        return numba.get_num_threads()

    def run(self, algorithm, op, a, b, p, out=None, bias=None, prepared=None):
        return convalgos.run(algorithm, op, a, b, p, out, bias, prepared=prepared, xp=self.xp)

    def host(self, a):
        return np.asarray(a)

    def release(self, algorithm) -> None:
        algorithm.release()

    def before_candidate(self) -> None:
        """Nothing to drop on the CPU (kept buffers are the algorithms' own, counted in their workspace)."""

    @staticmethod
    def wake() -> None:
        """Before each timed run: wake Numba's worker pool, as the layers before a conv do in a step
        (``race/clock.py``)."""
        wake_pool()


class CudaEventTimer:
    """Seconds of a call on the GPU: ``time`` (warm-ups) the events around it after a synchronise, the host's
    issue time included where it is the longer; ``time_both`` the host time to issue it (no synchronise
    inside) and the GPU time of its kernels, with the stream held busy (``convalgos.cuda.hold_stream``) while
    the host issues them, so that the start event completes only when the host is done and no host time leaks
    into the GPU time. The hold lasts twice the last host time measured, or half the previous hold when that is
    longer (a slower candidate after a faster one), plus ``HOLD_MARGIN``, at most ``HOLD_MOST``."""

    HOLD_MARGIN, HOLD_MOST = 50e-6, 0.1

    def __init__(self):
        self._hold = 1e-3

    def now(self) -> float:
        return time.perf_counter()

    def time(self, fn) -> float:
        host, gpu = self._events(fn, hold=False)
        return gpu

    def time_both(self, fn) -> tuple[float, float]:
        host, gpu = self._events(fn, hold=True)
        self._hold = min(max(2 * host, self._hold / 2) + self.HOLD_MARGIN, self.HOLD_MOST)
        return host, gpu

    def _events(self, fn, hold: bool) -> tuple[float, float]:
        refuse_in_capture("host", "the tuner's timing synchronises with the device")
        import cupy
        from convalgos.cuda import hold_stream
        cupy.cuda.Device().synchronize()
        if hold:
            hold_stream(self._hold)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        began = time.perf_counter()
        fn()
        host = time.perf_counter() - began
        end.record()
        end.synchronize()
        return host, cupy.cuda.get_elapsed_time(start, end) / 1e3


class GpuDevice(CpuDevice):
    """CuPy arrays on the current CUDA device, run by the GPU registry.

    - keyed by the GPU's name and compute capability (``name``, e.g. "cuda:NVIDIA H200 cc9.0") and its
      multiprocessor count (``threads``);
    - a run is timed between two CUDA events recorded after a synchronise;
    - a candidate's workspace is the growth of CuPy's memory pool during its warm-up run (its kept buffers
      are allocated then; temporaries served by blocks already in the pool are not counted);
    - before each candidate's checked run, and after a failed candidate (out of memory, or any other error),
      the pool's cached blocks are freed.
    """

    kind = "cuda"
    backend = BACKENDS["cuda"]

    def __init__(self):
        self.timer = CudaEventTimer()
        self.last_workspace = None

    @functools.cached_property
    def _pool(self):
        import cupy
        return cupy.get_default_memory_pool()

    @functools.cached_property
    def _properties(self) -> dict:
        import cupy
        return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)

    @property
    def name(self) -> str:
        props = self._properties
        gpu = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"cuda:{gpu} cc{props['major']}.{props['minor']}"

    def layout(self, x) -> str:
        return "contiguous" if x.flags.c_contiguous else "strided"

    def threads(self) -> int:
        return int(self._properties["multiProcessorCount"])

    def run(self, algorithm, op, a, b, p, out=None, bias=None, prepared=None):
        pool = self._pool
        before = pool.total_bytes()
        result = convalgos.run(algorithm, op, a, b, p, out, bias, prepared=prepared, xp=self.xp)
        self.last_workspace = max(0, pool.total_bytes() - before)
        return result

    def host(self, a):
        return to_host(a)

    def release(self, algorithm) -> None:
        import cupy
        algorithm.release()
        cupy.get_default_memory_pool().free_all_blocks()

    def before_candidate(self) -> None:
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()

    @staticmethod
    def wake() -> None:
        """Nothing to wake: the host issues a GPU call's launches from the calling thread."""


class SimulatedGpuDevice(CpuDevice):
    """The GPU registry on NumPy arrays, under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): the GPU
    tuning path without a GPU. Wall-clock timed; never in ``DEVICES`` (it would claim every NumPy array)."""

    name = "cuda:simulator"
    kind = "cuda"

    @functools.cached_property
    def algorithms(self) -> dict:
        return BACKENDS["cuda"].registry

    def threads(self) -> int:
        return 1

    def run(self, algorithm, op, a, b, p, out=None, bias=None, prepared=None):
        """As the CPU's, but a read-only operand (a torch tensor read through DLPack) is copied first: the
        simulator copies every NumPy argument of a launch back, as if from the device, and a read-only array
        refuses that. On a GPU the operands are CuPy arrays, and nothing is copied."""
        a, b = (x if x is None or x.flags.writeable else np.array(x) for x in (a, b))
        return convalgos.run(algorithm, op, a, b, p, out, bias, prepared=prepared)


def to_host(a) -> np.ndarray:
    """A NumPy array of ``a`` (NumPy, or CuPy: a copy to the host, which a CUDA graph's capture refuses)."""
    refuse_in_capture("host", "a device array copied to the host")
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


#: the devices ``device_of`` asks, in order.
DEVICES = [CpuDevice(), GpuDevice()]


def device_of(x, devices=None):
    """The device whose arrays ``x`` is: the one place array types are told apart."""
    devices = DEVICES if devices is None else devices
    for device in devices:
        if device.owns(x):
            return device
    raise TypeError(f"arrays must belong to a known device ({[d.kind for d in devices]}), "
                    f"got {type(x).__module__}.{type(x).__name__}")
