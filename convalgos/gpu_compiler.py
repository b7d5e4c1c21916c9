"""The one door to the CUDA compiler: every GPU kernel in convalgos (and autotune) is compiled and launched
through the names here, so that a move to another CUDA compiler changes this file only.

    >>> from convalgos.gpu_compiler import cuda, numba_dtype
    >>> @cuda.jit
    ... def kernel(x): ...

What the kernels use of it: ``cuda.jit``, ``cuda.grid``/``gridsize``, ``threadIdx``/``blockIdx``/``blockDim``,
``cuda.shared.array`` and ``cuda.local.array`` with constant shapes, ``cuda.syncthreads``, ``cuda.atomic.add``;
on the host ``numba_dtype`` (a NumPy dtype as the compiler's scalar type) and ``stream_at`` (a CUDA stream made
by someone else, CuPy or torch, as the compiler's stream object). The compiler is numba-cuda (NVIDIA's CUDA
target for Numba), chosen for its simulator (``NUMBA_ENABLE_CUDASIM=1``), which is how CI runs every kernel
without a GPU; the README's "GPU compiler" section says why and what a move would change.

**numpy 2.5.** numba-cuda 0.30.4 (the newest release, in maintenance mode: NVIDIA/numba-cuda#902) registers an
overload for ``np.row_stack`` when its CUDA target loads (``numba/cuda/np/arrayobj.py``); numpy 2.5 removed
``row_stack``, so every kernel's first compile raised ``AttributeError`` there (numba-cuda#907, closed as
won't-fix). ``_load_cuda_target`` lends numpy a stand-in ``row_stack`` while that module is imported, then
takes it back: numba-cuda registers its overload for a function nobody calls, and your numpy is left as it was.
Remove it when numba-cuda is dropped or fixed upstream, or when ``numpy<2.5`` is the floor again.

**The simulator's shared arrays.** Under ``NUMBA_ENABLE_CUDASIM=1`` two threads of a block could get two
different ``cuda.shared.array`` arrays from one line (a wrong answer, issue 40): ``gpu_simulator.py`` makes them
one, once the target loads.

**Whether the target works here** (``target_problem``): the modules a first compile imports load, and with a
driver a one-line kernel compiles (numba-cuda without its NVVM, i.e. without the ``[cu12]``/``[cu13]`` extra,
fails there). ``convalgos.arrays.gpu_problem`` asks it once per process, so a broken compiler is one clear
error at first GPU use rather than one failure per algorithm.

**Launch sizes.** numba-cuda warns ``NumbaPerformanceWarning: Grid size N will likely result in GPU
under-utilization`` for every launch of fewer than 128 blocks. The library's small layers launch small grids
knowingly (a 1x1 layer of one image has little work), so ``configure`` switches that warning off
(``CUDA_LOW_OCCUPANCY_WARNINGS``) for the library's own launches only, while each is configured; your own
kernels still warn as numba-cuda decides.
"""
from __future__ import annotations

import functools
import importlib
import threading

import numba
import numpy as np

from .gpu_simulator import serialise_shared_arrays

#: the numba-cuda module that answers for an old numpy's function, imported at load (see the module docstring)
_NUMPY_25_MODULE = "numba.cuda.np.arrayobj"


def _row_stack_stand_in(tup):
    """numpy < 2.5's ``row_stack`` (``vstack``), lent to numba-cuda only while it registers its overloads."""
    return np.vstack(tup)


def _load_cuda_target():
    """``numba.cuda``, with numba-cuda's numpy-version-dependent modules imported under the numpy 2.5 shim."""
    from numba import cuda
    if hasattr(np, "row_stack"):
        return cuda
    np.row_stack = _row_stack_stand_in
    try:
        importlib.import_module(_NUMPY_25_MODULE)
    except ImportError:                  # numba's built-in CUDA target (no numba-cuda) has no such module
        pass
    finally:
        del np.row_stack
    return cuda


cuda = _load_cuda_target()


try:                                     # numba-cuda's settings; numba's built-in CUDA target reads numba's
    from numba.cuda.core import config as _config
except ImportError:                      # pragma: no cover - only without numba-cuda
    from numba.core import config as _config

if _config.ENABLE_CUDASIM:
    serialise_shared_arrays()

_configuring = threading.Lock()


def configure(kernel, blocks, threads, stream=0):
    """``kernel[blocks, threads, stream]`` (a launch configuration, ready to be called) without numba-cuda's
    low-occupancy warning: the library's own grids are small on small layers by choice (module docstring)."""
    with _configuring:
        before = _config.CUDA_LOW_OCCUPANCY_WARNINGS
        _config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
        try:
            return kernel[blocks, threads, stream]
        finally:
            _config.CUDA_LOW_OCCUPANCY_WARNINGS = before


def _load_target_modules() -> None:
    """Import what numba-cuda's first compile imports (already imported under the shim when numpy lacks it)."""
    try:
        importlib.import_module(_NUMPY_25_MODULE)
    except ModuleNotFoundError:          # numba's built-in CUDA target (no numba-cuda) has no such module
        pass


def _compile_one_kernel() -> None:
    """Compile (not launch) a one-line kernel: the target's compiler (NVVM) is there and works."""
    def probe(x):
        x[0] = 1.0
    cuda.jit("void(float32[:])")(probe)


@functools.lru_cache(maxsize=1)
def target_problem() -> str | None:
    """Why numba-cuda's CUDA target cannot compile kernels here, with the fix; None when it can. The compile
    is tried only where a driver is found (nothing compiles without one, and the simulator compiles nothing)."""
    step = "load"
    try:
        _load_target_modules()
        if driver_found():
            step = "compile a kernel"
            _compile_one_kernel()
    except Exception as e:  # noqa: BLE001 - whatever the target raises is the answer, reported with its type
        return (f"numba-cuda's CUDA target failed to {step} ({type(e).__name__}: {e}); install the GPU extra "
                f"matching your CUDA (pip install -e '.[gpu]' for CUDA 12, '.[gpu-cu13]' for CUDA 13: numba-cuda "
                f"with its compiler), with numpy < 2.6")
    return None


def numba_dtype(dtype):
    """The compiler's scalar type of NumPy ``dtype`` (a kernel's ``nb_dtype(0)`` is a zero of that type)."""
    return numba.from_dtype(np.dtype(dtype))


@functools.lru_cache(maxsize=16)
def stream_at(pointer: int):
    """The compiler's handle on the CUDA stream at ``pointer`` (made once per stream)."""
    return cuda.external_stream(pointer)


def driver_found() -> bool:
    """True when the compiler finds a CUDA driver and a device (False under the simulator)."""
    return bool(cuda.is_available())
