"""The GPU registry: each family's GPU twin, listed explicitly, under the name of the CPU algorithm whose idea it
computes, in the CPU registry's order; beside ``implicit_gemm``, the tile shapes of its CUTLASS-style kernel
(``implicit_gemm_128x64``, ``_64x64``, ``_32x32``: GPU-only entries of that family, raced per layer and pass as
cuDNN's implicit-GEMM variants are) and, after ``winograd_fused_4x4``, ``winograd_fused_6x6``. They run on CuPy
arrays with Numba-CUDA kernels (cuBLAS and cuFFT through CuPy):

    >>> import cupy, convalgos
    >>> y = convalgos.conv2d(cupy.asarray(x), cupy.asarray(w), padding=1, algo="winograd_4x4")   # on the GPU

``convalgos.conv2d`` given CuPy arrays runs in this registry (``convalgos.backends``); ``backend="cuda"`` runs it
on NumPy arrays under the Numba CUDA simulator. Each twin shares its family's definitions (tolerances, the
idea's constraints: ``<family>/shared.py``) and answers ``supports``, ``workspace_bytes`` and ``flops`` for its
own kernels. ``implicit_gemm`` needs no workspace, so a zero workspace limit still leaves one algorithm. fp32 is
fp32: nothing here turns TF32 on (CuPy uses it only when the user sets ``CUPY_TF32``). fp16 is computed in fp32
and returned as fp16, as on the CPU. ``count_ops()`` counts the device operations the library issues
(``gpu_ops.py``; ``record`` counts one beside a library call). Public here for the GPU code outside convalgos:
``launch`` and ``launch_1d`` (``gpu_base.py``), the launch route and the 1-D launch sizes, for ``autotune.nn``'s
fused layers; for autotune's CUDA graphs and timing, ``holding()`` collects the kept buffers a block uses
(``memory.py``) and ``hold_stream(seconds)`` keeps the current stream busy while the host issues work.

Importing this module needs neither CuPy nor a driver; running its algorithms needs CuPy and a CUDA driver, or
the simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba is first imported), where NumPy arrays stand in.
"""
from __future__ import annotations

from .direct.gpu import GPUDirect
from .fft.gpu import GPUFFT
from .fft.gpu_tiled import GPUFFTTiled
from .gpu_base import GPUAlgorithm, hold_stream, launch, launch_1d
from .gpu_ops import OpCounts, count_ops, record
from .im2col.gpu import GPUIm2col
from .implicit_gemm.gpu import GPUImplicitGemm
from .implicit_gemm.tiled import GPUTiledImplicitGemm
from .implicit_gemm.tiled import gemm_shape as implicit_gemm_shape
from .memory import holding
from .registry import Registry
from .winograd.gpu import GPUWinograd
from .winograd.gpu_fused import GPUFusedWinograd

#: the tiled implicit GEMM's tile shapes, each its own entry (``implicit_gemm_<shape>``, GPU only).
IMPLICIT_GEMM_TILES = ("128x64", "64x64", "32x32")
#: name -> GPU algorithm, in the CPU registry's order (the tiled implicit GEMMs beside ``implicit_gemm``).
ALGORITHMS = Registry("cuda", [
    GPUDirect(), GPUImplicitGemm(), *(GPUTiledImplicitGemm(shape) for shape in IMPLICIT_GEMM_TILES),
    GPUIm2col(), GPUFFT(), GPUFFTTiled(),
    GPUWinograd(2), GPUWinograd(4), GPUWinograd(6), GPUFusedWinograd(4), GPUFusedWinograd(6),
])


def release_workspaces() -> None:
    """Free every GPU algorithm's kept device buffers."""
    ALGORITHMS.release_workspaces()


__all__ = ["ALGORITHMS", "GPUAlgorithm", "IMPLICIT_GEMM_TILES", "OpCounts", "count_ops", "hold_stream", "holding",
           "implicit_gemm_shape", "launch", "launch_1d", "record", "release_workspaces"]
