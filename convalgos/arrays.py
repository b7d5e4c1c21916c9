"""Where arrays live: NumPy on the CPU, CuPy on a GPU, and whether the GPU side can run here.

Everything that asks "which array module?" or "is there a GPU?" asks this module, so CuPy is imported in one
place and only when needed: ``import convalgos`` works with no CuPy, no driver and no GPU. Which backend (and
registry) owns an array is ``backends.py``'s question; torch tensors in and out are ``interop.py``'s.

The GPU side runs on CuPy arrays with a CUDA driver, or under the Numba CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1`` set before numba is first imported), where NumPy arrays stand in for CuPy's.
"""
from __future__ import annotations

import functools
import os

import numpy as np

GPU_MISSING = ("convalgos.cuda needs CuPy and a CUDA driver, or NUMBA_ENABLE_CUDASIM=1 for the simulator "
               "(install the extra: pip install 'convalgos[gpu]' for CUDA 12, 'convalgos[gpu-cu13]' for CUDA 13)")


class GPUUnavailableError(RuntimeError):
    """GPU use without CuPy and a driver (and not under the simulator)."""


def is_cupy_array(x) -> bool:
    """True for a CuPy array, decided without importing CuPy."""
    return type(x).__module__.split(".")[0] == "cupy"


def array_module(x):
    """``cupy`` for a CuPy array, else ``numpy`` (the module whose functions answer for ``x``)."""
    if is_cupy_array(x):
        import cupy
        return cupy
    return np


def simulator_enabled() -> bool:
    """True when the Numba CUDA simulator is switched on for this process."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@functools.lru_cache(maxsize=1)
def cupy_available() -> bool:
    """True when CuPy imports and sees a CUDA device."""
    try:
        import cupy
        return bool(cupy.cuda.is_available())
    except Exception:  # ImportError, or a CUDA runtime error without a driver
        return False


@functools.lru_cache(maxsize=1)
def driver_available() -> bool:
    """True when Numba's CUDA target finds a driver and a device (never under the simulator)."""
    if simulator_enabled():
        return False
    try:
        from .gpu_compiler import driver_found
        return driver_found()
    except Exception:
        return False


def gpu_available() -> bool:
    """True when the GPU side can run here: the simulator, or CuPy with a driver."""
    return simulator_enabled() or (cupy_available() and driver_available())


def require_gpu() -> None:
    """Raise ``GPUUnavailableError`` with how to fix it when the GPU side cannot run here."""
    if not gpu_available():
        raise GPUUnavailableError(GPU_MISSING)


def require_device_array(name: str, a) -> None:
    """A GPU algorithm's operand must be a CuPy array (NumPy stands in only under the simulator)."""
    if is_cupy_array(a) or (simulator_enabled() and isinstance(a, np.ndarray)):
        return
    where = "a CuPy array" if not simulator_enabled() else "a CuPy or (under the simulator) NumPy array"
    raise TypeError(f"{name} must be {where}, got {type(a).__module__}.{type(a).__name__}")
