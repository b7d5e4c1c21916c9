"""The Numba-CUDA kernels of the GPU direct convolution (the maths and the passes built on them: ``gpu.py``).

Each is made once per compute dtype (and block shape) by its factory. A load outside the image reads
``zero``, a zero of the compute dtype: ``a if inside else 0`` would be typed float64 by Numba, and a float32
kernel would round-trip every load through float64.
"""
from __future__ import annotations

import functools

from ..gpu_compiler import cuda, numba_dtype

#: output channels per block (register accumulators per thread), in the forward and backward_filter kernels.
KB = 4
#: forward's output tile (rows, columns) per block, and its shared input row width in elements.
TH, TW = 8, 8
PATCH_W = 256


@functools.lru_cache(maxsize=None)
def direct_kernel(dtype: str):
    """y[n, k, i, j] = sum_{c, r, s} x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left] * w[k, c, r, s]: a
    block computes a th x tw tile of one image's output pixels for KB output channels of one group, each
    thread one pixel with KB accumulators. Per input channel, kernel row and chunk of s_chunk kernel columns,
    the block loads the input rows that tap row touches (zero outside the image) and the KB x s_chunk weights
    into shared memory, then each thread does s_chunk*KB multiply-adds from there. Grid x: (image, group,
    channel block) by column tile; y: row tiles. The result is Ho x Wo pixels, pixel (i, j) written at
    out[n, k, row0 + i*row_step, col0 + j*col_step] (backward_data's phases write every sh-th row and sw-th
    column of dx: a strided view would do, but the simulator takes only contiguous arrays); ``top`` and
    ``left`` may be negative (those phases start inside dy)."""
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(x, w, out, top, left, sh, sw, dh, dw, s_chunk, k_blocks, col_tiles, Ho, Wo, row0, row_step,
               col0, col_step):
        C_, H, W = x.shape[1], x.shape[2], x.shape[3]
        K, Cg, R, S = w.shape[0], w.shape[1], w.shape[2], w.shape[3]
        Kg = K // (C_ // Cg)
        zero = nb_dtype(0)
        tw, th = cuda.blockDim.x, cuda.blockDim.y
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        tid, nthreads = ty * tw + tx, tw * th
        z = cuda.blockIdx.x // col_tiles                 # (image, group, channel block)
        i0, j0 = cuda.blockIdx.y * th, (cuda.blockIdx.x % col_tiles) * tw
        i, j = i0 + ty, j0 + tx
        n = z // (k_blocks * (C_ // Cg))
        gk = z % (k_blocks * (C_ // Cg))
        g, kb = gk // k_blocks, gk % k_blocks
        k0 = g * Kg + kb * KB
        nk = min(KB, Kg - kb * KB)
        patch = cuda.shared.array((TH, PATCH_W), nb_dtype)
        wtile = cuda.shared.array((KB, PATCH_W), nb_dtype)
        acc = cuda.local.array(KB, nb_dtype)
        for q in range(KB):
            acc[q] = zero
        for c in range(Cg):
            cin = g * Cg + c
            for r in range(R):
                for s0 in range(0, S, s_chunk):
                    sc = min(s_chunk, S - s0)
                    width = (tw - 1) * sw + (sc - 1) * dw + 1
                    for e in range(tid, th * width, nthreads):
                        row, col = e // width, e % width
                        yy = (i0 + row) * sh + r * dh - top
                        xx = j0 * sw + s0 * dw + col - left
                        inside = 0 <= yy < H and 0 <= xx < W
                        patch[row, col] = x[n, cin, yy, xx] if inside else zero
                    for e in range(tid, KB * sc, nthreads):
                        kk, q = e // sc, e % sc
                        wtile[kk, q] = w[k0 + kk, c, r, s0 + q] if kk < nk else zero
                    cuda.syncthreads()
                    for q in range(sc):
                        v = patch[ty, tx * sw + q * dw]
                        for kk in range(KB):
                            acc[kk] += v * wtile[kk, q]
                    cuda.syncthreads()
        if i < Ho and j < Wo:
            for kk in range(nk):
                out[n, k0 + kk, row0 + i * row_step, col0 + j * col_step] = acc[kk]

    return kernel


@functools.lru_cache(maxsize=None)
def phase_weights_kernel():
    """One phase's weights for backward_data, flipped and with K and C swapped within each group:
    wq[g*Cg + c, k, a, b] = w[g*Kg + k, c, r0 + (mh-1-a)*r_step, s0 + (mw-1-b)*s_step] (a plain copy; Numba
    compiles one specialisation per dtype)."""

    @cuda.jit
    def kernel(w, wq, r0, r_step, s0, s_step):
        Cg = w.shape[1]
        Kg, mh, mw = wq.shape[1], wq.shape[2], wq.shape[3]
        for item in range(cuda.grid(1), wq.size, cuda.gridsize(1)):
            b, a = item % mw, (item // mw) % mh
            k, ci = (item // (mw * mh)) % Kg, item // (mw * mh * Kg)
            g, c = ci // Cg, ci % Cg
            wq[ci, k, a, b] = w[g * Kg + k, c, r0 + (mh - 1 - a) * r_step, s0 + (mw - 1 - b) * s_step]

    return kernel


@functools.lru_cache(maxsize=None)
def filter_kernel(dtype: str, lanes: int, max_taps: int):
    """dw[k, c, r, s] = sum_{n, i, j} dy[n, k, i, j] * x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left]: a
    block computes KB output channels k0.. of one group by one input channel c by a chunk of blockDim.y taps.
    Thread (lane, t) takes tap t of the chunk and the output pixels lane, lane + lanes, ...: per step of
    ``lanes`` pixels the block loads their dy values for the KB channels into shared memory, and each thread
    multiplies its pixel's x value at its tap (skipped when the tap reads padding) into KB accumulators. At the
    end the lanes' partial sums are added by a tree in shared memory (``lanes`` a power of two), the same pairs
    in the same order every run: deterministic, no atomics."""
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(x, dy, out, top, left, sh, sw, dh, dw, k_blocks, tap_chunks):
        N, C, H, W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
        Ho, Wo = dy.shape[2], dy.shape[3]
        K, Cg, R, S = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
        Kg = K // (C // Cg)
        zero = nb_dtype(0)
        lane, t, taps = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockDim.y
        tid, nthreads = t * lanes + lane, lanes * taps
        b = cuda.blockIdx.x                              # ((group, channel block), c, tap chunk)
        chunk, c, gk = b % tap_chunks, (b // tap_chunks) % Cg, b // (tap_chunks * Cg)
        g, kb = gk // k_blocks, gk % k_blocks
        k0, cin = g * Kg + kb * KB, g * Cg + c
        nk = min(KB, Kg - kb * KB)
        tap = chunk * taps + t
        r, s = tap // S, tap % S
        dy_tile = cuda.shared.array((KB, lanes), nb_dtype)
        partial = cuda.shared.array((max_taps, KB, lanes), nb_dtype)
        acc = cuda.local.array(KB, nb_dtype)
        for kk in range(KB):
            acc[kk] = zero
        HoWo = Ho * Wo
        pixels = N * HoWo
        for m0 in range(0, pixels, lanes):
            for e in range(tid, KB * lanes, nthreads):
                kk, m = e // lanes, m0 + e % lanes
                inside = kk < nk and m < pixels
                dy_tile[kk, e % lanes] = dy[m // HoWo, k0 + kk, (m // Wo) % Ho, m % Wo] if inside else zero
            cuda.syncthreads()
            m = m0 + lane
            yy = ((m // Wo) % Ho) * sh + r * dh - top
            xx = (m % Wo) * sw + s * dw - left
            if tap < R * S and m < pixels and 0 <= yy < H and 0 <= xx < W:
                v = x[m // HoWo, cin, yy, xx]
                for kk in range(KB):
                    acc[kk] += v * dy_tile[kk, lane]
            cuda.syncthreads()
        for kk in range(KB):
            partial[t, kk, lane] = acc[kk]
        cuda.syncthreads()
        half = lanes // 2
        while half > 0:
            if lane < half:
                for kk in range(KB):
                    partial[t, kk, lane] += partial[t, kk, lane + half]
            cuda.syncthreads()
            half //= 2
        if lane == 0 and tap < R * S:
            for kk in range(nk):
                out[k0 + kk, c, r, s] = partial[t, kk, 0]

    return kernel
