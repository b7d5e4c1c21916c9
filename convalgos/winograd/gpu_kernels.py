"""The Numba-CUDA kernels of the GPU Winograd algorithms (the maths is in ``cpu.py``, the passes in ``gpu.py``):
one work item per tile and channel, its small matrix products in registers (local arrays).

- ``tile_transform_kernel``: V[a, b, c, tile] = (X d X^T)[a, b] for X (rows x cols) and d the cols x cols patch
  of src at (tile row * step - top, tile col * step - left), zero outside src: the input transform B^T d B
  (rows = cols = alpha) of every pass, and backward-filter's dy transform G' d G'^T (cols = m);
- ``output_transform_kernel``: the m x m pixels A^T M A of each tile and output channel that lie inside out.

Kernels are made once per dtype and shape of X; every sum and every zero is of the compute dtype (a load written
``x[...] if inside else 0`` would be typed float64 and round-trip float32 through it).
"""
from __future__ import annotations

import functools

import numpy as np

from ..gpu_compiler import cuda, numba_dtype


@functools.lru_cache(maxsize=None)
def tile_transform_kernel(dtype: str, rows: int, cols: int):
    """V[a, b, c, n * tiles + tile] = (X d X^T)[a, b], d = src[n, c] at (i*step - top, j*step - left), cols x cols."""
    nb_dtype = numba_dtype(dtype)
    zero = np.dtype(dtype).type(0)

    @cuda.jit
    def kernel(src, X, step, top, left, tiles_h, tiles_w, V):
        N, C, H, W = src.shape[0], src.shape[1], src.shape[2], src.shape[3]
        per_image = tiles_h * tiles_w
        d = cuda.local.array((cols, cols), nb_dtype)
        t = cuda.local.array((rows, cols), nb_dtype)
        for e in range(cuda.grid(1), N * C * per_image, cuda.gridsize(1)):
            tile, c, n = e % per_image, (e // per_image) % C, e // (per_image * C)
            y0, x0 = (tile // tiles_w) * step - top, (tile % tiles_w) * step - left
            for u in range(cols):
                for v in range(cols):
                    yy, xx = y0 + u, x0 + v
                    value = zero
                    if 0 <= yy < H and 0 <= xx < W:
                        value = src[n, c, yy, xx]
                    d[u, v] = value
            for a in range(rows):                       # t = X d
                for v in range(cols):
                    s = zero
                    for u in range(cols):
                        s += X[a, u] * d[u, v]
                    t[a, v] = s
            for a in range(rows):                       # V = t X^T
                for b in range(rows):
                    s = zero
                    for v in range(cols):
                        s += t[a, v] * X[b, v]
                    V[a, b, c, n * per_image + tile] = s

    return kernel


@functools.lru_cache(maxsize=None)
def output_transform_kernel(dtype: str, m: int):
    """out tile = A^T M[:, :, k, tile] A, pixels inside out only (tiles over out's H x W, m x m each)."""
    alpha, nb_dtype = m + 2, numba_dtype(dtype)
    zero = np.dtype(dtype).type(0)

    @cuda.jit
    def kernel(M, AT, out, tiles_h, tiles_w):
        N, K, Ho, Wo = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
        per_image = tiles_h * tiles_w
        t = cuda.local.array((m, alpha), nb_dtype)
        for e in range(cuda.grid(1), K * N * per_image, cuda.gridsize(1)):
            p, k = e % (N * per_image), e // (N * per_image)
            n, tile = p // per_image, p % per_image
            i0, j0 = (tile // tiles_w) * m, (tile % tiles_w) * m
            for u in range(m):                          # t = A^T M
                for b in range(alpha):
                    s = zero
                    for a in range(alpha):
                        s += AT[u, a] * M[a, b, k, p]
                    t[u, b] = s
            for u in range(m):                          # Y = t A
                for v in range(m):
                    if i0 + u < Ho and j0 + v < Wo:
                        s = zero
                        for b in range(alpha):
                            s += t[u, b] * AT[v, b]
                        out[n, k, i0 + u, j0 + v] = s

    return kernel
