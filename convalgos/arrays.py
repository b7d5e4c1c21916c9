"""Where arrays live: NumPy on the CPU, CuPy on a GPU, and whether the GPU side can run here.

Everything that asks "which array module?" or "is there a GPU?" asks this module, so CuPy is imported in one
place and only when needed: ``import convalgos`` works with no CuPy, no driver and no GPU. Which backend (and
registry) owns an array is ``backends.py``'s question; torch tensors in and out are ``interop.py``'s.

The GPU side runs on CuPy arrays with a CUDA driver, or under the Numba CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1`` set before numba is first imported), where NumPy arrays stand in for CuPy's.
Where it cannot, ``gpu_problem`` says why and how to fix it, every cause at once (no CuPy, no device, no driver
for Numba, numba-cuda's target failing to load or compile), asked once per process: ``require_gpu`` raises it,
and the tuner asks before it tunes a GPU key, so a broken GPU side is one error, not one per algorithm.
"""
from __future__ import annotations

import functools
import os

import numpy as np

GPU_NEEDS = "convalgos.cuda needs CuPy and a CUDA driver, or NUMBA_ENABLE_CUDASIM=1 for the simulator"
GPU_MISSING = (f"{GPU_NEEDS} (install the extra: pip install 'convalgos[gpu]' for CUDA 12, 'convalgos[gpu-cu13]' "
               f"for CUDA 13)")
#: the fix for a missing CuPy, named in ``gpu_problem``
INSTALL_GPU = ("pip install -e '.[gpu]' for CUDA 12 (driver >= 525) or '.[gpu-cu13]' for CUDA 13 (driver >= 580), "
               "one of them, as nvidia-smi's CUDA version says")


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


def _cupy_problem() -> str | None:
    try:
        import cupy
    except ImportError as e:
        return f"CuPy is not installed ({e}): {INSTALL_GPU}"
    if not cupy_available():
        return (f"CuPy {cupy.__version__} finds no CUDA device or driver (check nvidia-smi and "
                f"CUDA_VISIBLE_DEVICES; or run without a GPU: NUMBA_ENABLE_CUDASIM=1, the simulator)")
    return None


def _target_problem() -> str | None:
    try:
        from .gpu_compiler import target_problem
    except Exception as e:  # noqa: BLE001 - numba-cuda failing to import at all is the answer too
        return f"numba-cuda's CUDA target failed to import ({type(e).__name__}: {e}): {INSTALL_GPU}"
    return target_problem()


@functools.lru_cache(maxsize=1)
def gpu_problem() -> str | None:
    """Why the GPU side cannot run here and how to fix each cause, in one message; None when it can."""
    problems = [] if simulator_enabled() else [_cupy_problem()]
    if not simulator_enabled() and not driver_available():
        problems.append("Numba's CUDA target finds no CUDA driver or device")
    problems.append(_target_problem())
    problems = [p for p in problems if p]
    if not problems:
        return None
    return f"{GPU_NEEDS}. Here: " + "; ".join(problems)


def require_gpu() -> None:
    """Raise ``GPUUnavailableError`` with why and how to fix it when the GPU side cannot run here."""
    problem = gpu_problem()
    if problem:
        raise GPUUnavailableError(problem)


def require_device_array(name: str, a) -> None:
    """A GPU algorithm's operand must be a CuPy array (NumPy stands in only under the simulator)."""
    if is_cupy_array(a) or (simulator_enabled() and isinstance(a, np.ndarray)):
        return
    where = "a CuPy array" if not simulator_enabled() else "a CuPy or (under the simulator) NumPy array"
    raise TypeError(f"{name} must be {where}, got {type(a).__module__}.{type(a).__name__}")
