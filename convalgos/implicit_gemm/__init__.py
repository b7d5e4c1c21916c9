"""``implicit_gemm``: the patch-matrix products of im2col with the patches read in place: zero workspace, so it
is the algorithm that always fits (``workspace_limit=0``).

- ``cpu.py``: the CPU algorithm (the maths, the per-tap valid ranges that replace the padding);
- ``kernels.py``: its Numba loop nests;
- ``gpu.py``: the GPU twin, the textbook tiled product (one result per thread, shared memory only);
- ``tiled.py``: the GPU's CUTLASS-style kernels, one registry entry per tile shape (``implicit_gemm_128x64``,
  ``_64x64``, ``_32x32``); ``tiling.py`` the shapes as data, ``tiled_kernels.py`` their one kernel factory;
- ``shared.py``: what both share (the tolerance).
"""
