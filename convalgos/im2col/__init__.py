"""``im2col``: the patch matrix of the input, then one BLAS GEMM per group (col2im scatters the data gradient).

- ``cpu.py``: the CPU algorithm (the maths, the row bands that bound its workspace, the zero-copy cases);
- ``kernels.py``: the Numba patch fill and col2im scatter;
- ``gpu.py``: the GPU twin (a Numba-CUDA patch fill, cuBLAS through CuPy);
- ``shared.py``: what both share (the tolerance).
"""
