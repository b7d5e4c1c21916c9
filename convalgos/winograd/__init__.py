"""Winograd F(m x m, 3 x 3): tiles transformed by small exact matrices, so a tile's 9 m^2 multiplies per
(k, c) become (m + 2)^2; backward-filter as F(3 x 3, m x m).

- ``cooktoom.py``: the transform matrices of any F(m, r), from an exact-rational Cook-Toom generator;
- ``shared.py``: what every Winograd algorithm shares (constraints, tile grid, transform FLOPs, each pass's
  matrices, tolerances);
- ``cpu.py``: ``winograd_2x2/4x4/6x6``, transforms around batched GEMMs, all three passes (the maths);
- ``kernels.py``: their Numba transforms, ``block_kernels.py`` the ones held in registers, ``blocking.py`` how a
  pass cuts its work;
- ``fused.py`` and ``fused_kernels.py``: ``winograd_fused_4x4``, one block of 32 tiles at a time in cache, the
  channels in the lanes; ``f43.py``: F(4x4, 3x3)'s transforms written out and factored; ``fused_filter_kernels.py``:
  its backward-filter, F(3x3, 4x4) by blocks, per-thread sums;
- ``gpu.py``: the GPU twin of ``winograd_mxm``, all three passes (Numba-CUDA transforms around a cuBLAS batched
  GEMM); ``gpu_kernels.py``: its transform kernels;
- ``gpu_fused.py`` and ``gpu_fused_kernels.py``: the GPU twin of ``winograd_fused_4x4``, forward and
  backward-data in one kernel (V in shared memory, M in registers).
"""
