"""The Numba-CUDA kernels of the tiled implicit GEMM (the maths: ``tiled.py``; the tile shapes: ``tiling.py``):
one factory, ``tiled_kernel(op, dtype, tiling)``, per pass, compute dtype and tile shape.

Every pass is a GEMM  result (M x N) = left (M x Q) @ right (Q x N)  per group whose operands are read in place:

    forward          M = Kg output channels, N = N*Ho*Wo output pixels, Q = Cg*R*S taps (c, r, s)
    backward_data    M = Cg input channels,  N = N*H*W input pixels,   Q = Kg*R*S taps (k, r, s)
    backward_filter  M = Kg output channels, N = Cg*R*S taps (c, r, s), Q = N*Ho*Wo output pixels (split in
                     ranges over the grid's z, each range's sums apart: ``sum_splits_kernel`` adds them in order)

A block of T = tiling.threads threads owns a BLOCK_M x BLOCK_N result tile; thread t owns the results at rows
t // (BLOCK_N/THREAD_N) + u*(BLOCK_M/THREAD_M) and columns t % (BLOCK_N/THREAD_N) + v*(BLOCK_N/THREAD_N) in
``acc`` (a THREAD_M x THREAD_N local array: registers), so neighbouring threads read neighbouring shared
elements and write neighbouring pixels. The reduction goes in chunks of K_CHUNK with two shared buffers: the
loop's step t loads chunk t from global memory into registers, multiplies chunk t - 1 out of one buffer, stores
chunk t into the other, then synchronises once (double buffering: the loads are in flight during the products).

The gathers' index arithmetic is out of the reduction loop. Each thread's loads keep one column of the tile
(its pixel, or its tap in backward_filter) for the whole loop, decomposed once; the reduction index of each load
is carried as its digits ((c, r, s), (k, r, s) or (n, i, j)) and advanced by K_CHUNK's own digits with one carry
per digit: no division or modulo inside the loop (backward_data's stride test divides, when the stride is not
1). Right-operand loads are coalesced along the pixels (forward, backward_data: consecutive threads take
consecutive pixels; backward_filter: consecutive reduction pixels).

The device functions are inlined into the kernels (``forceinline``: NVVM's alwaysinline), so that ``acc``
stays in registers rather than being passed by address to a called function (local memory).

Loads outside the image or the matrix read ``zero`` of the compute dtype (``a if inside else 0`` would be typed
float64). The shared tiles are padded by one column so that the stores of consecutive reduction indices fall
in different banks.
"""
from __future__ import annotations

import functools

from ..arrays import simulator_enabled
from ..gpu_compiler import cuda, numba_dtype
from .tiling import Tiling

OPS = ("forward", "backward_data", "backward_filter")
#: the device functions inlined by NVVM (the simulator's jit has no such option, nor registers)
INLINE = {} if simulator_enabled() else {"forceinline": True}


@functools.lru_cache(maxsize=None)
def tiled_kernel(op: str, dtype: str, tiling: Tiling):
    """The kernel of pass ``op`` (arguments: ``tiled.py``'s launches) for one tile shape and compute dtype."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    BLOCK_M, BLOCK_N, K_CHUNK, THREAD_M, THREAD_N = tiling.check()
    THREADS = tiling.threads
    THREAD_COLS = BLOCK_N // THREAD_N                   # threads along a row of the result tile
    ROW_STEP, COL_STEP = BLOCK_M // THREAD_M, THREAD_COLS
    LOADS_LEFT, LOADS_RIGHT = BLOCK_M * K_CHUNK // THREADS, K_CHUNK * BLOCK_N // THREADS
    LEFT_STEP = THREADS // K_CHUNK                      # rows apart of a thread's left loads (and its columns in
    RIGHT_STEP = THREADS // BLOCK_N                     # backward_filter); reduction rows apart of its right loads
    LEFT_WIDTH, RIGHT_WIDTH = BLOCK_M + 1, BLOCK_N + 1  # the shared tiles' rows, padded (constants: shapes)
    nb_dtype, index = numba_dtype(dtype), numba_dtype("int64")

    @cuda.jit(device=True, **INLINE)
    def multiply_chunk(left, right, buf, row_group, col_group, acc):
        """acc += the chunk's left rows of this thread x its right columns (shared memory -> registers)."""
        a = cuda.local.array(THREAD_M, nb_dtype)
        b = cuda.local.array(THREAD_N, nb_dtype)
        for kk in range(K_CHUNK):
            for u in range(THREAD_M):
                a[u] = left[buf, kk, row_group + u * ROW_STEP]
            for v in range(THREAD_N):
                b[v] = right[buf, kk, col_group + v * COL_STEP]
            for u in range(THREAD_M):
                for v in range(THREAD_N):
                    acc[u, v] += a[u] * b[v]

    @cuda.jit(device=True, **INLINE)
    def clear(acc):
        for u in range(THREAD_M):
            for v in range(THREAD_N):
                acc[u, v] = nb_dtype(0)

    @cuda.jit
    def forward(x, w2, out, R, S, top, left_pad, sh, sw, dh, dw, groups, row_tiles):
        N, C, H, W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
        K, Q = w2.shape[0], w2.shape[1]
        Ho, Wo = out.shape[2], out.shape[3]
        Kg, Cg, RS, columns = K // groups, C // groups, R * S, N * Ho * Wo
        zero = nb_dtype(0)
        t = cuda.threadIdx.x
        g = cuda.blockIdx.y // row_tiles
        row0, col0 = (cuda.blockIdx.y - g * row_tiles) * BLOCK_M, cuda.blockIdx.x * BLOCK_N
        left_tile = cuda.shared.array((2, K_CHUNK, LEFT_WIDTH), nb_dtype)
        right_tile = cuda.shared.array((2, K_CHUNK, RIGHT_WIDTH), nb_dtype)
        left_next = cuda.local.array(LOADS_LEFT, nb_dtype)
        right_next = cuda.local.array(LOADS_RIGHT, nb_dtype)
        acc = cuda.local.array((THREAD_M, THREAD_N), nb_dtype)
        clear(acc)
        left_q, left_m0 = t % K_CHUNK, t // K_CHUNK     # left loads: one tap, rows left_m0 + i*LEFT_STEP
        right_n, right_q0 = t % BLOCK_N, t // BLOCK_N   # right loads: one pixel, taps right_q0 + i*RIGHT_STEP
        col = col0 + right_n
        img = col // (Ho * Wo)
        i = (col - img * Ho * Wo) // Wo
        y0, x0 = i * sh - top, (col - img * Ho * Wo - i * Wo) * sw - left_pad
        c_of = cuda.local.array(LOADS_RIGHT, index)
        r_of = cuda.local.array(LOADS_RIGHT, index)
        s_of = cuda.local.array(LOADS_RIGHT, index)
        for e in range(LOADS_RIGHT):
            q = right_q0 + e * RIGHT_STEP
            c_of[e], r_of[e], s_of[e] = q // RS, (q % RS) // S, q % S
        dc, dr, ds = K_CHUNK // RS, (K_CHUNK % RS) // S, K_CHUNK % S
        chunks = (Q + K_CHUNK - 1) // K_CHUNK
        for step in range(chunks + 1):
            if step < chunks:
                q0 = step * K_CHUNK
                for e in range(LOADS_LEFT):
                    row, q = row0 + left_m0 + e * LEFT_STEP, q0 + left_q
                    left_next[e] = w2[g * Kg + row, q] if row < Kg and q < Q else zero
                for e in range(LOADS_RIGHT):
                    q, c, r, s = q0 + right_q0 + e * RIGHT_STEP, c_of[e], r_of[e], s_of[e]
                    yy, xx = y0 + r * dh, x0 + s * dw
                    inside = q < Q and col < columns and 0 <= yy < H and 0 <= xx < W
                    right_next[e] = x[img, g * Cg + c, yy, xx] if inside else zero
                    s, r, c = s + ds, r + dr, c + dc        # the next chunk's tap: K_CHUNK's digits, carried
                    if s >= S:
                        s, r = s - S, r + 1
                    if r >= R:
                        r, c = r - R, c + 1
                    c_of[e], r_of[e], s_of[e] = c, r, s
            if step > 0:
                multiply_chunk(left_tile, right_tile, (step - 1) % 2, t // THREAD_COLS, t % THREAD_COLS, acc)
            if step < chunks:
                for e in range(LOADS_LEFT):
                    left_tile[step % 2, left_q, left_m0 + e * LEFT_STEP] = left_next[e]
                for e in range(LOADS_RIGHT):
                    right_tile[step % 2, right_q0 + e * RIGHT_STEP, right_n] = right_next[e]
            cuda.syncthreads()
        for v in range(THREAD_N):
            col = col0 + t % THREAD_COLS + v * COL_STEP
            if col < columns:
                img = col // (Ho * Wo)
                i = (col - img * Ho * Wo) // Wo
                j = col - img * Ho * Wo - i * Wo
                for u in range(THREAD_M):
                    row = row0 + t // THREAD_COLS + u * ROW_STEP
                    if row < Kg:
                        out[img, g * Kg + row, i, j] = acc[u, v]

    @cuda.jit
    def backward_data(dy, w3, out, R, S, top, left_pad, sh, sw, dh, dw, groups, row_tiles):
        N, C, H, W = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
        K, Cg, RS = w3.shape[0], w3.shape[1], w3.shape[2]
        Ho, Wo = dy.shape[2], dy.shape[3]
        Kg, Q, columns = K // groups, (K // groups) * RS, N * H * W
        unit_stride = sh == 1 and sw == 1
        zero = nb_dtype(0)
        t = cuda.threadIdx.x
        g = cuda.blockIdx.y // row_tiles
        row0, col0 = (cuda.blockIdx.y - g * row_tiles) * BLOCK_M, cuda.blockIdx.x * BLOCK_N
        left_tile = cuda.shared.array((2, K_CHUNK, LEFT_WIDTH), nb_dtype)
        right_tile = cuda.shared.array((2, K_CHUNK, RIGHT_WIDTH), nb_dtype)
        left_next = cuda.local.array(LOADS_LEFT, nb_dtype)
        right_next = cuda.local.array(LOADS_RIGHT, nb_dtype)
        acc = cuda.local.array((THREAD_M, THREAD_N), nb_dtype)
        clear(acc)
        left_q, left_m0 = t % K_CHUNK, t // K_CHUNK     # left loads: one (k, r, s), rows left_m0 + i*LEFT_STEP
        left_k, left_rs = left_q // RS, left_q % RS
        right_n, right_q0 = t % BLOCK_N, t // BLOCK_N   # right loads: one dx pixel, taps right_q0 + i*RIGHT_STEP
        col = col0 + right_n
        img = col // (H * W)
        h = (col - img * H * W) // W
        hp0, vp0 = h + top, col - img * H * W - h * W + left_pad
        k_of = cuda.local.array(LOADS_RIGHT, index)
        r_of = cuda.local.array(LOADS_RIGHT, index)
        s_of = cuda.local.array(LOADS_RIGHT, index)
        for e in range(LOADS_RIGHT):
            q = right_q0 + e * RIGHT_STEP
            k_of[e], r_of[e], s_of[e] = q // RS, (q % RS) // S, q % S
        dk, drs, dr, ds = K_CHUNK // RS, K_CHUNK % RS, (K_CHUNK % RS) // S, K_CHUNK % S
        chunks = (Q + K_CHUNK - 1) // K_CHUNK
        for step in range(chunks + 1):
            if step < chunks:
                q0 = step * K_CHUNK
                for e in range(LOADS_LEFT):
                    row = row0 + left_m0 + e * LEFT_STEP
                    inside = row < Cg and q0 + left_q < Q
                    left_next[e] = w3[g * Kg + left_k, row, left_rs] if inside else zero
                left_rs, left_k = left_rs + drs, left_k + dk
                if left_rs >= RS:
                    left_rs, left_k = left_rs - RS, left_k + 1
                for e in range(LOADS_RIGHT):
                    q, k, r, s = q0 + right_q0 + e * RIGHT_STEP, k_of[e], r_of[e], s_of[e]
                    hp, vp = hp0 - r * dh, vp0 - s * dw
                    if unit_stride:
                        i, j = hp, vp
                        inside = 0 <= i < Ho and 0 <= j < Wo
                    else:
                        i, j = hp // sh, vp // sw
                        inside = hp >= 0 and vp >= 0 and i * sh == hp and j * sw == vp and i < Ho and j < Wo
                    inside = inside and q < Q and col < columns
                    right_next[e] = dy[img, g * Kg + k, i, j] if inside else zero
                    s, r, k = s + ds, r + dr, k + dk
                    if s >= S:
                        s, r = s - S, r + 1
                    if r >= R:
                        r, k = r - R, k + 1
                    k_of[e], r_of[e], s_of[e] = k, r, s
            if step > 0:
                multiply_chunk(left_tile, right_tile, (step - 1) % 2, t // THREAD_COLS, t % THREAD_COLS, acc)
            if step < chunks:
                for e in range(LOADS_LEFT):
                    left_tile[step % 2, left_q, left_m0 + e * LEFT_STEP] = left_next[e]
                for e in range(LOADS_RIGHT):
                    right_tile[step % 2, right_q0 + e * RIGHT_STEP, right_n] = right_next[e]
            cuda.syncthreads()
        for v in range(THREAD_N):
            col = col0 + t % THREAD_COLS + v * COL_STEP
            if col < columns:
                img = col // (H * W)
                h = (col - img * H * W) // W
                vv = col - img * H * W - h * W
                for u in range(THREAD_M):
                    row = row0 + t // THREAD_COLS + u * ROW_STEP
                    if row < Cg:
                        out[img, g * Cg + row, h, vv] = acc[u, v]

    @cuda.jit
    def backward_filter(x, dy, dest, R, S, top, left_pad, sh, sw, dh, dw, groups, row_tiles, span):
        N, C, H, W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
        K, Ho, Wo = dy.shape[1], dy.shape[2], dy.shape[3]
        Kg, Cg, RS = K // groups, C // groups, R * S
        taps, HoWo = Cg * RS, Ho * Wo
        zero = nb_dtype(0)
        t = cuda.threadIdx.x
        g = cuda.blockIdx.y // row_tiles
        row0, col0 = (cuda.blockIdx.y - g * row_tiles) * BLOCK_M, cuda.blockIdx.x * BLOCK_N
        start = cuda.blockIdx.z * span                  # this block's range of the reduction (split-K)
        end = min(start + span, N * HoWo)
        left_tile = cuda.shared.array((2, K_CHUNK, LEFT_WIDTH), nb_dtype)
        right_tile = cuda.shared.array((2, K_CHUNK, RIGHT_WIDTH), nb_dtype)
        left_next = cuda.local.array(LOADS_LEFT, nb_dtype)
        right_next = cuda.local.array(LOADS_RIGHT, nb_dtype)
        acc = cuda.local.array((THREAD_M, THREAD_N), nb_dtype)
        clear(acc)
        q_off, m0 = t % K_CHUNK, t // K_CHUNK           # one reduction pixel; rows (and taps) m0 + i*LEFT_STEP
        c_of = cuda.local.array(LOADS_RIGHT, index)
        y_of = cuda.local.array(LOADS_RIGHT, index)
        x_of = cuda.local.array(LOADS_RIGHT, index)
        for e in range(LOADS_RIGHT):                    # each right load's tap (c, r, s), fixed for the loop
            tap = col0 + m0 + e * LEFT_STEP
            r = (tap % RS) // S
            c_of[e], y_of[e], x_of[e] = tap // RS, r * dh - top, (tap % S) * dw - left_pad
        q = start + q_off                               # the pixel (n, i, j) as digits, carried per chunk
        n, i, j = q // HoWo, (q % HoWo) // Wo, q % Wo
        dn, di, dj = K_CHUNK // HoWo, (K_CHUNK % HoWo) // Wo, K_CHUNK % Wo
        chunks = max(0, (end - start + K_CHUNK - 1) // K_CHUNK)
        for step in range(chunks + 1):
            if step < chunks:
                q = start + step * K_CHUNK + q_off
                for e in range(LOADS_LEFT):
                    row = row0 + m0 + e * LEFT_STEP
                    left_next[e] = dy[n, g * Kg + row, i, j] if row < Kg and q < end else zero
                for e in range(LOADS_RIGHT):
                    yy, xx = i * sh + y_of[e], j * sw + x_of[e]
                    inside = q < end and col0 + m0 + e * LEFT_STEP < taps and 0 <= yy < H and 0 <= xx < W
                    right_next[e] = x[n, g * Cg + c_of[e], yy, xx] if inside else zero
                j, i, n = j + dj, i + di, n + dn
                if j >= Wo:
                    j, i = j - Wo, i + 1
                if i >= Ho:
                    i, n = i - Ho, n + 1
            if step > 0:
                multiply_chunk(left_tile, right_tile, (step - 1) % 2, t // THREAD_COLS, t % THREAD_COLS, acc)
            if step < chunks:
                for e in range(LOADS_LEFT):
                    left_tile[step % 2, q_off, m0 + e * LEFT_STEP] = left_next[e]
                for e in range(LOADS_RIGHT):
                    right_tile[step % 2, q_off, m0 + e * LEFT_STEP] = right_next[e]
            cuda.syncthreads()
        for u in range(THREAD_M):
            row = row0 + t // THREAD_COLS + u * ROW_STEP
            for v in range(THREAD_N):
                tap = col0 + t % THREAD_COLS + v * COL_STEP
                if row < Kg and tap < taps:
                    dest[cuda.blockIdx.z, g * Kg + row, tap] = acc[u, v]

    return {"forward": forward, "backward_data": backward_data, "backward_filter": backward_filter}[op]


@functools.lru_cache(maxsize=None)
def sum_splits_kernel(dtype: str):
    """out[k, tap] = partial[0, k, tap] + partial[1, k, tap] + ... in order (backward_filter's split-K ranges;
    a grid-stride loop, one element per work item: deterministic, no atomics)."""
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(partial, out):
        splits, K, taps = partial.shape[0], partial.shape[1], partial.shape[2]
        for e in range(cuda.grid(1), K * taps, cuda.gridsize(1)):
            k = e // taps
            total = nb_dtype(0)
            for z in range(splits):
                total += partial[z, k, e - k * taps]
            out[k, e - k * taps] = total

    return kernel
