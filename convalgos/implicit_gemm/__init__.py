"""``implicit_gemm``: the patch-matrix products of im2col with the patches read in place: zero workspace, so it
is the algorithm that always fits (``workspace_limit=0``).

- ``cpu.py``: the CPU algorithm (the maths, the per-tap valid ranges that replace the padding);
- ``kernels.py``: its Numba loop nests;
- ``gpu.py``: the GPU twin (tiled over output pixels and channels, shared memory only);
- ``shared.py``: what both share (the tolerance).
"""
