"""The Numba-CUDA kernel of the GPU's fused Winograd (the maths: ``gpu_fused.py``): one factory,
``fused_kernel(dtype, m, TILES, CHANNELS_OUT, CHANNELS_IN)``.

A block of TILES x CHANNELS_OUT threads owns TILES m x m output tiles (consecutive threads, consecutive tiles)
of CHANNELS_OUT output channels of one group; thread (k, t) keeps all alpha^2 products M[:, k, t] of its tile
and channel in registers (``acc``, a local array of constant size) for the whole reduction. The input channels
go in chunks of CHANNELS_IN: the block transforms the chunk's TILES x CHANNELS_IN input tiles (V = B^T d B,
each by one thread, d gathered from the image, zero outside) into shared memory beside the chunk's slice of U
(alpha^2 x CHANNELS_IN x CHANNELS_OUT), synchronises, and each thread adds its alpha^2 products per channel of
the chunk. At the end each thread applies A^T M A to its own accumulators and writes its m x m pixels that lie
inside the output: V and M never leave the multiprocessor.

A thread transforms its tile through its own place in V_s: B^T d a column of d at a time (alpha values read
from the image), then (B^T d) B in place a row at a time, so it holds alpha values of d beside its alpha^2
accumulators, not alpha^2: with the whole tile in registers float64 spilled (104-456 bytes per thread) and
float32 took 230-252 registers, against 164-168 now (``gpu_fused.py``).

Every zero and every sum is of the compute dtype (``x[...] if inside else 0`` would be typed float64).
"""
from __future__ import annotations

import functools

from ..gpu_compiler import cuda, numba_dtype


@functools.lru_cache(maxsize=None)
def fused_kernel(dtype: str, m: int, TILES: int, CHANNELS_OUT: int, CHANNELS_IN: int):
    """out[n, g*out_g + k] tiles = A^T (sum_c U[:, g, k, c] * (B^T d[n, g*in_g + c] B)) A, per tile and k."""
    alpha = m + 2
    A2, THREADS = alpha * alpha, TILES * CHANNELS_OUT
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(src, U, AT, BT, top, left, tiles_h, tiles_w, out, k_blocks):
        N, H, W = src.shape[0], src.shape[2], src.shape[3]
        out_g, in_g = U.shape[2], U.shape[3]
        Ho, Wo = out.shape[2], out.shape[3]
        per_image = tiles_h * tiles_w
        zero = nb_dtype(0)
        tid = cuda.threadIdx.x
        t, k = tid % TILES, tid // TILES
        g = cuda.blockIdx.y // k_blocks
        k0 = (cuda.blockIdx.y - g * k_blocks) * CHANNELS_OUT
        tile0 = cuda.blockIdx.x * TILES
        V_s = cuda.shared.array((A2, CHANNELS_IN, TILES), nb_dtype)
        U_s = cuda.shared.array((A2, CHANNELS_IN, CHANNELS_OUT), nb_dtype)
        acc = cuda.local.array(A2, nb_dtype)
        row = cuda.local.array(alpha, nb_dtype)
        for xi in range(A2):
            acc[xi] = zero
        for c0 in range(0, in_g, CHANNELS_IN):
            for e in range(tid, CHANNELS_IN * TILES, THREADS):      # the chunk's input transforms, one each
                tt, c = e % TILES, e // TILES
                tl = tile0 + tt
                n, tile = tl // per_image, tl % per_image
                y0, x0 = (tile // tiles_w) * m - top, (tile % tiles_w) * m - left
                real = n < N and c0 + c < in_g
                for v in range(alpha):                              # B^T d, a column of d at a time, into V_s
                    for u in range(alpha):
                        yy, xx = y0 + u, x0 + v
                        inside = real and 0 <= yy < H and 0 <= xx < W
                        row[u] = src[n, g * in_g + c0 + c, yy, xx] if inside else zero
                    for a in range(alpha):
                        s = zero
                        for u in range(alpha):
                            s += BT[a, u] * row[u]
                        V_s[a * alpha + v, c, tt] = s
                for a in range(alpha):                              # V = (B^T d) B in place, a row at a time
                    for v in range(alpha):
                        row[v] = V_s[a * alpha + v, c, tt]
                    for b in range(alpha):
                        s = zero
                        for v in range(alpha):
                            s += row[v] * BT[b, v]
                        V_s[a * alpha + b, c, tt] = s
            for e in range(tid, A2 * CHANNELS_IN * CHANNELS_OUT, THREADS):   # the chunk's slice of U
                c, kk, xi = e % CHANNELS_IN, (e // CHANNELS_IN) % CHANNELS_OUT, e // (CHANNELS_IN * CHANNELS_OUT)
                inside = k0 + kk < out_g and c0 + c < in_g
                U_s[xi, c, kk] = U[xi, g, k0 + kk, c0 + c] if inside else zero
            cuda.syncthreads()
            for c in range(CHANNELS_IN):                            # the products, alpha^2 per channel
                for xi in range(A2):
                    acc[xi] += U_s[xi, c, k] * V_s[xi, c, t]
            cuda.syncthreads()
        tl = tile0 + t
        n, tile = tl // per_image, tl % per_image
        i0, j0 = (tile // tiles_w) * m, (tile % tiles_w) * m
        if n < N and k0 + k < out_g:
            for u in range(m):                                      # y = A^T M A, a row at a time,
                for b in range(alpha):                              # inside the output only
                    s = zero
                    for a in range(alpha):
                        s += AT[u, a] * acc[a * alpha + b]
                    row[b] = s
                for v in range(m):
                    if i0 + u < Ho and j0 + v < Wo:
                        s = zero
                        for b in range(alpha):
                            s += row[b] * AT[v, b]
                        out[n, g * out_g + k0 + k, i0 + u, j0 + v] = s

    return kernel
