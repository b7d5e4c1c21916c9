"""Winograd transforms held in registers: X D X^T for a 6-column X (F(4, 3)'s B^T, F(3, 4)'s B'^T) on one block
of two vector registers' worth of arrays (``sandwich_block``), and ``block_transform``, the input transform of
``kernels.tile_transform`` built on it (winograd_4x4's input transforms). A small plane makes
``tile_transform``'s tiles_w-long loops short; a block of tiles across tile rows keeps every step two vectors
long. (The fused passes transform with the channels in the lanes instead: ``f43.py``.)
"""
from __future__ import annotations

from numba import njit, prange

from ..kernels.loops import share
from ..kernels.simd import fma, lanes, load, splat, store, zeros
from .kernels import carve


@njit(cache=True, inline="always")
def _mix6(w, v0, v1, v2, v3, v4, v5):
    """w[0] v0 + w[1] v1 + ... + w[5] v5: one row w of a six-column matrix applied to six vectors."""
    acc = fma(splat(w, 0), v0, zeros(w))
    acc = fma(splat(w, 1), v1, acc)
    acc = fma(splat(w, 2), v2, acc)
    acc = fma(splat(w, 3), v3, acc)
    acc = fma(splat(w, 4), v4, acc)
    return fma(splat(w, 5), v5, acc)


@njit(cache=True, inline="always")
def sandwich_block(X, D, T, out, row):
    """out[i*b + j, row, :2L] = (X D[:, :, t] X^T)[i, j] for the 2L arrays t of one block (L = lanes): the
    batch axis is two vector registers long, and each step applies a row of X to six vectors held in registers
    (``_mix6``), so the steps of different rows are independent and overlap in the CPU (X: (b, 6)).

    D, T: (6, 6, 2L) (T: scratch); out: (b*b, rows, 2L)."""
    b, L = X.shape[0], lanes(T[0, 0])
    for l in range(6):                                   # T = X D, column by column
        for h in range(0, 2 * L, L):
            v0, v1, v2 = load(D[0, l], h), load(D[1, l], h), load(D[2, l], h)
            v3, v4, v5 = load(D[3, l], h), load(D[4, l], h), load(D[5, l], h)
            for i in range(b):
                store(T[i, l], h, _mix6(X[i], v0, v1, v2, v3, v4, v5))
    for i in range(b):                                   # out = T X^T, row by row
        for h in range(0, 2 * L, L):
            v0, v1, v2 = load(T[i, 0], h), load(T[i, 1], h), load(T[i, 2], h)
            v3, v4, v5 = load(T[i, 3], h), load(T[i, 4], h), load(T[i, 5], h)
            for j in range(b):
                store(out[i * b + j, row], h, _mix6(X[j], v0, v1, v2, v3, v4, v5))


@njit(parallel=True, cache=True)
def block_transform(xpad, X, m, q0, tiles_w, scratch, V):
    """``tile_transform`` for a 6 x 6 X (F(4, 3)'s B^T and F(3, 4)'s): V[:, :, c, q*tiles_w + tx] = X d X^T for
    the 6 x 6 tile d at (ty*m, tx*m) of channel c, tile row q0 + q = n * tiles_h + ty. One item is one channel
    and a block of TB tiles (two vector registers' lanes, across tile rows), transformed in registers
    (``sandwich_block``), not in tiles_w-long loops that a small plane makes short; scratch: (threads,
    >= scratch_elements(6, 6, TB)), TB = ``block_tiles(dtype)``."""
    C, Hpad = xpad.shape[1], xpad.shape[2]
    tiles_h, P = (Hpad - 6) // m + 1, V.shape[3]
    TB = 2 * lanes(xpad[0, 0, 0])
    n_blocks = (P + TB - 1) // TB
    n_threads = scratch.shape[0]
    for thread in prange(n_threads):
        d, tt, y = carve(scratch[thread], 6, 6, TB)
        y = y.reshape((36, 1, TB))
        start, stop = share(C * n_blocks, thread, n_threads)
        for item in range(start, stop):
            c, p0 = item // n_blocks, (item % n_blocks) * TB
            count = min(TB, P - p0)
            for t in range(TB):                   # a block's missing tiles repeat its tiles: read, never written
                row, tx = q0 + (p0 + t % count) // tiles_w, (p0 + t % count) % tiles_w
                plane, top = xpad[row // tiles_h, c], (row % tiles_h) * m
                for k in range(6):
                    for l in range(6):
                        d[k, l, t] = plane[top + k, tx * m + l]
            sandwich_block(X, d, tt, y, 0)
            for xi in range(36):
                into, value = V[xi // 6, xi % 6, c, p0:p0 + count], y[xi, 0]
                for t in range(count):
                    into[t] = value[t]
