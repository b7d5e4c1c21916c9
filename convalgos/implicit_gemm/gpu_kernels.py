"""The Numba-CUDA kernels of the GPU implicit GEMM: three tiled GEMMs whose patch operand is gathered from the
activations tile by tile into shared memory (the maths: ``gpu.py``).

Each kernel is made once per (compute dtype, tile edge T) by its factory. A block of T x T threads (x the
column, y the row of the tile) computes a T x T tile of its GEMM's result; the reduction dimension is walked in
chunks of T, each chunk's two operand tiles loaded into shared memory (zero outside the image or the matrix),
then T multiply-adds per thread from shared memory. Loads that fall outside read ``zero``, a zero of the
compute dtype: ``a if inside else 0`` would be typed float64 by Numba, and a float32 kernel would round-trip
every load through float64.
"""
from __future__ import annotations

import functools

from ..gpu_compiler import cuda, numba_dtype


@functools.lru_cache(maxsize=None)
def implicit_gemm_kernel(dtype: str, T: int):
    """y tile (T output channels x T output pixels) = W[g] @ X_patch[g], reduction over (c, r, s)."""
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(x, w, out, top, left, sh, sw, dh, dw, groups, row_tiles):
        N, H, W = x.shape[0], x.shape[2], x.shape[3]
        K, Cg, R, S = w.shape[0], w.shape[1], w.shape[2], w.shape[3]
        Ho, Wo = out.shape[2], out.shape[3]
        Kg = K // groups
        zero = nb_dtype(0)
        g = cuda.blockIdx.y // row_tiles                 # the group, then the channel tile within it
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = (cuda.blockIdx.y % row_tiles) * T + ty     # output channel within the group
        col = cuda.blockIdx.x * T + tx                   # output pixel (n, i, j) flattened
        gn = col // (Ho * Wo)
        gi, gj = (col // Wo) % Ho, col % Wo
        w_tile = cuda.shared.array((T, T), nb_dtype)
        x_tile = cuda.shared.array((T, T), nb_dtype)
        reduction, RS = Cg * R * S, R * S
        acc = zero
        for q0 in range(0, reduction, T):
            q = q0 + tx                                  # weight tile: row = channel, column = q
            inside = row < Kg and q < reduction
            w_tile[ty, tx] = w[g * Kg + row, q // RS, (q // S) % R, q % S] if inside else zero
            q = q0 + ty                                  # patch tile: row = q, column = pixel
            c, r, s = q // RS, (q // S) % R, q % S
            yy, xx = gi * sh + r * dh - top, gj * sw + s * dw - left
            inside = q < reduction and gn < N and 0 <= yy < H and 0 <= xx < W
            x_tile[ty, tx] = x[gn, g * Cg + c, yy, xx] if inside else zero
            cuda.syncthreads()
            for e in range(T):
                acc += w_tile[ty, e] * x_tile[e, tx]
            cuda.syncthreads()
        if row < Kg and col < N * Ho * Wo:
            out[gn, g * Kg + row, gi, gj] = acc

    return kernel


# backward_data_kernel is a deliberate twin of the forward kernel above: the same T x T shared-memory tiled
# product, its patch tile gathered from dy (the phase test) instead of from x.
@functools.lru_cache(maxsize=None)
def backward_data_kernel(dtype: str, T: int):
    """dx tile (T input channels x T input pixels) = W[g]^T @ dY_patch[g], reduction over (k, r, s); the dy
    entry of (k, r, s) at dx pixel (h, v) is dy[k, i, j] where i*sh + r*dh - top = h and j*sw + s*dw - left = v,
    zero where no such output exists (a gather: each dx element is one thread's sum, no atomics)."""
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(dy, w, out, top, left, sh, sw, dh, dw, groups, row_tiles):
        N, H, W = out.shape[0], out.shape[2], out.shape[3]
        K, Cg, R, S = w.shape[0], w.shape[1], w.shape[2], w.shape[3]
        Ho, Wo = dy.shape[2], dy.shape[3]
        Kg = K // groups
        zero = nb_dtype(0)
        g = cuda.blockIdx.y // row_tiles
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = (cuda.blockIdx.y % row_tiles) * T + ty     # input channel within the group
        col = cuda.blockIdx.x * T + tx                   # input pixel (n, h, v) flattened
        gn = col // (H * W)
        gh, gv = (col // W) % H, col % W
        w_tile = cuda.shared.array((T, T), nb_dtype)
        dy_tile = cuda.shared.array((T, T), nb_dtype)
        reduction, RS = Kg * R * S, R * S
        acc = zero
        for q0 in range(0, reduction, T):
            q = q0 + tx                                  # W^T tile: row = input channel, column = (k, r, s)
            inside = row < Cg and q < reduction
            w_tile[ty, tx] = w[g * Kg + q // RS, row, (q // S) % R, q % S] if inside else zero
            q = q0 + ty                                  # dy patch tile: row = (k, r, s), column = dx pixel
            k, r, s = q // RS, (q // S) % R, q % S
            hp, vp = gh + top - r * dh, gv + left - s * dw
            i, j = hp // sh, vp // sw
            inside = (q < reduction and gn < N and hp >= 0 and vp >= 0 and hp - i * sh == 0
                      and vp - j * sw == 0 and i < Ho and j < Wo)
            dy_tile[ty, tx] = dy[gn, g * Kg + k, i, j] if inside else zero
            cuda.syncthreads()
            for e in range(T):
                acc += w_tile[ty, e] * dy_tile[e, tx]
            cuda.syncthreads()
        if row < Cg and col < N * H * W:
            out[gn, g * Cg + row, gh, gv] = acc

    return kernel


@functools.lru_cache(maxsize=None)
def backward_filter_kernel(dtype: str, T: int, Z: int):
    """dw tile (T output channels x T taps (c, r, s)) = dY[g] @ X_patch[g]^T, reduction over the N*Ho*Wo output
    pixels. The block is T x T x Z threads: slice z takes the pixel chunks z, z + Z, ... (the reduction is long
    and dw small, so more threads per tile keep more of the GPU busy); at the end slice 0 adds the Z partial
    sums in order, from shared memory. Each weight is one fixed-order sum: deterministic, no atomics."""
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(x, dy, out, top, left, sh, sw, dh, dw, groups, row_tiles):
        N, H, W = x.shape[0], x.shape[2], x.shape[3]
        Ho, Wo = dy.shape[2], dy.shape[3]
        K, Cg, R, S = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
        Kg = K // groups
        zero = nb_dtype(0)
        g = cuda.blockIdx.y // row_tiles
        tx, ty, tz = cuda.threadIdx.x, cuda.threadIdx.y, cuda.threadIdx.z
        row = (cuda.blockIdx.y % row_tiles) * T + ty     # output channel within the group
        col = cuda.blockIdx.x * T + tx                   # tap (c, r, s) flattened
        RS, taps, pixels, HoWo = R * S, Cg * R * S, N * Ho * Wo, Ho * Wo
        c, r, s = col // RS, (col // S) % R, col % S
        dy_tile = cuda.shared.array((Z, T, T), nb_dtype)
        x_tile = cuda.shared.array((Z, T, T), nb_dtype)
        acc = zero
        for m0 in range(0, pixels, Z * T):               # every slice walks the same trip count (syncthreads)
            m = m0 + tz * T + tx                         # dy tile: row = channel, column = pixel
            inside = row < Kg and m < pixels
            dy_tile[tz, ty, tx] = dy[m // HoWo, g * Kg + row, (m // Wo) % Ho, m % Wo] if inside else zero
            m = m0 + tz * T + ty                         # patch tile: row = pixel, column = tap
            n, i, j = m // HoWo, (m // Wo) % Ho, m % Wo
            yy, xx = i * sh + r * dh - top, j * sw + s * dw - left
            inside = m < pixels and col < taps and 0 <= yy < H and 0 <= xx < W
            x_tile[tz, ty, tx] = x[n, g * Cg + c, yy, xx] if inside else zero
            cuda.syncthreads()
            for e in range(T):
                acc += dy_tile[tz, ty, e] * x_tile[tz, e, tx]
            cuda.syncthreads()
        dy_tile[tz, ty, tx] = acc                        # the tiles are free: reuse one for the partial sums
        cuda.syncthreads()
        if tz == 0 and row < Kg and col < taps:
            total = dy_tile[0, ty, tx]
            for z in range(1, Z):
                total += dy_tile[z, ty, tx]
            out[g * Kg + row, c, r, s] = total

    return kernel
