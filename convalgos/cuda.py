"""The GPU registry: each family's GPU twin, listed explicitly, under the name of the CPU algorithm whose idea it
computes, in the CPU registry's order. They run on CuPy arrays with Numba-CUDA kernels (cuBLAS and cuFFT
through CuPy):

    >>> import cupy, convalgos
    >>> y = convalgos.conv2d(cupy.asarray(x), cupy.asarray(w), padding=1, algo="winograd_4x4")   # on the GPU

``convalgos.conv2d`` given CuPy arrays runs in this registry (``convalgos.backends``); ``backend="cuda"`` runs it
on NumPy arrays under the Numba CUDA simulator. Each twin shares its family's definitions (tolerances, the
idea's constraints: ``<family>/shared.py``) and answers ``supports``, ``workspace_bytes`` and ``flops`` for its
own kernels. ``implicit_gemm`` needs no workspace, so a zero workspace limit still leaves one algorithm. fp32 is
fp32: nothing here turns TF32 on (CuPy uses it only when the user sets ``CUPY_TF32``). fp16 is computed in fp32
and returned as fp16, as on the CPU. ``count_ops()`` counts the device operations the library issues
(``gpu_ops.py``). ``launch`` and ``launch_1d`` (``gpu_base.py``) are the
launch route and the 1-D launch sizes, and ``record`` the counter's entry for a library or array-module call:
public here for the GPU code outside convalgos (``autotune.nn``'s fused layers).

Importing this module needs neither CuPy nor a driver; running its algorithms needs CuPy and a CUDA driver, or
the simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba is first imported), where NumPy arrays stand in.
"""
from __future__ import annotations

from .direct.gpu import GPUDirect
from .fft.gpu import GPUFFT
from .fft.gpu_tiled import GPUFFTTiled
from .gpu_base import GPUAlgorithm, launch, launch_1d
from .gpu_ops import OpCounts, count_ops, record
from .im2col.gpu import GPUIm2col
from .implicit_gemm.gpu import GPUImplicitGemm
from .registry import Registry
from .winograd.gpu import GPUWinograd

#: name -> GPU algorithm, in the CPU registry's order.
ALGORITHMS = Registry("cuda", [
    GPUDirect(), GPUImplicitGemm(), GPUIm2col(), GPUFFT(), GPUFFTTiled(),
    GPUWinograd(2), GPUWinograd(4), GPUWinograd(6),
])


def release_workspaces() -> None:
    """Free every GPU algorithm's kept device buffers."""
    ALGORITHMS.release_workspaces()


__all__ = ["ALGORITHMS", "GPUAlgorithm", "OpCounts", "count_ops", "launch", "launch_1d", "record",
           "release_workspaces"]
