"""The Numba kernels of the Winograd passes (``convalgos.winograd``): every transform is one sandwich X D X^T.

A Winograd pass applies small matrices on both sides of many small 2-D arrays: G (or A^T) to every 3x3 filter,
B^T (or G) to every tile of an image, A^T to every transformed tile. All of these are ``_sandwich``, which
takes a batch of arrays laid along its LAST axis, so every inner loop is a contiguous pass over the batch that
the compiler vectorises; the kernels around it only gather the batch into that layout and scatter the result:

- ``filter_transform``: dst[f] = X src[f] X^T for every filter f (the 3x3 filter transform of the forward and
  backward-data passes, and the output transform of backward-filter, whose "filters" are the 3x3 dw).
- ``shift_into``: a plane placed at an offset inside zeros (padding), or cropped where the offset is negative.
- ``tile_transform``: X d X^T for every a x a tile d (stepping by m) of every channel.
- ``output_transform``: A^T M A for every tile of every output channel, scattered into the output image.
- ``outer_products``: the products of a depthwise layer (one input channel per group), where each GEMM is an
  outer product.
- ``sandwich_block``: X D X^T for a 6-column X (F(4, 3)'s B^T and A^T, F(3, 4)'s B'^T) on one block of two
  vector registers' worth of arrays, held in registers; ``block_transform`` is ``tile_transform`` built on it
  (winograd_4x4's input transforms), and the fused pass (``fused_kernels.py``) uses it on its blocks.

The transform kernels split their items statically over the threads; each thread carves its D, T and Y out of
its own row of ``scratch`` (threads x elements, a buffer the algorithm keeps and counts in ``workspace_bytes``:
nothing is allocated inside a kernel, and repeated calls pay no page faults for fresh scratch).
``scratch_elements`` says how many elements a thread needs for a batch of ``batch`` arrays.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..kernels.loops import share, valid_range
from ..kernels.simd import REGISTER_BYTES, fma, lanes, load, splat, store, zeros


def block_tiles(dtype) -> int:
    """TB: the tiles ``block_transform`` (and the fused pass) take at a time, two vector registers' lanes."""
    return 2 * REGISTER_BYTES // np.dtype(dtype).itemsize


def filter_block_size(n_filters: int, most: int, n_threads: int) -> int:
    """Filters per item of ``filter_transform``: ``most``, or an equal share per thread when that is fewer (a
    small layer's filters are split over the threads, and its scratch sized by them, not by ``most``)."""
    return max(1, min(most, -(-n_filters // n_threads)))


#: elements between D, T and Y in a thread's scratch row, so that D[.., p], T[.., p] and Y[.., p] never lie a
#: multiple of 4 KiB apart: laid end to end they often did (D is 36 x 256 float32 = 9 x 4 KiB in F(4, 3)'s output
#: transform), and a store to T then stalled the next load of D that the CPU took for the same address (4K
#: aliasing: winograd_4x4 forward on N32 C16 32x32 ran 1.09x slower than with separately allocated arrays).
SKEW = 32


def scratch_elements(a: int, b: int, batch: int) -> int:
    """Scratch elements one thread needs to apply a (b x a) X to ``batch`` arrays at once: D (a, a), T (b, a)
    and Y (b, b), each ``batch`` long, SKEW apart."""
    return (a * a + b * a + b * b) * batch + 2 * SKEW


@njit(cache=True, inline="always")
def _carve(row, a, b, batch):
    """D (a, a, batch), T (b, a, batch), Y (b, b, batch): views of one thread's scratch row, SKEW apart."""
    t0 = a * a * batch + SKEW
    y0 = t0 + b * a * batch + SKEW
    return (row[:a * a * batch].reshape((a, a, batch)), row[t0:t0 + b * a * batch].reshape((b, a, batch)),
            row[y0:y0 + b * b * batch].reshape((b, b, batch)))


@njit(cache=True)
def _sandwich(X, D, T, out, P):
    """out[i, j, :P] = sum_{k, l} X[i, k] D[k, l, :P] X[j, l]: X D X^T for P arrays on the last axis.

    X: (b, a); D: (a, a, >= P) arrays; T: (b, a, >= P) scratch; out: (b, b, >= P), all C-contiguous. Zeros
    of X are skipped; every loop over the batch is a contiguous pass the compiler vectorises."""
    b, a = X.shape
    # the two halves are one loop on either side of D, kept apart (a deliberate twin) so that each inner loop
    # stays one contiguous pass over the batch
    for i in range(b):                                   # T = X D
        for l in range(a):
            first = True
            for k in range(a):
                v = X[i, k]
                if v != 0.0:
                    if first:
                        for p in range(P):
                            T[i, l, p] = v * D[k, l, p]
                        first = False
                    else:
                        for p in range(P):
                            T[i, l, p] += v * D[k, l, p]
    for i in range(b):                                   # out = T X^T
        for j in range(b):
            first = True
            for l in range(a):
                v = X[j, l]
                if v != 0.0:
                    if first:
                        for p in range(P):
                            out[i, j, p] = v * T[i, l, p]
                        first = False
                    else:
                        for p in range(P):
                            out[i, j, p] += v * T[i, l, p]


@njit(parallel=True, cache=True)
def filter_transform(src, X, block, scratch, dst):
    """dst[f] = X src[f] X^T for every f. src: (F, a, a); dst: (F, b, b) (either may be a strided view).

    One item is a block of ``block`` consecutive filters; scratch: (threads, >= scratch_elements(a, b, block))."""
    n_filters, a = src.shape[0], src.shape[1]
    b = X.shape[0]
    n_blocks = (n_filters + block - 1) // block
    n_threads = scratch.shape[0]
    for thread in prange(n_threads):
        D, T, Y = _carve(scratch[thread], a, b, block)
        start, stop = share(n_blocks, thread, n_threads)
        for item in range(start, stop):
            f0 = item * block
            nf = min(block, n_filters - f0)
            for i in range(a):
                for j in range(a):
                    into, tap = D[i, j], src[f0:f0 + nf, i, j]          # entry (i, j) of every filter
                    for f in range(nf):
                        into[f] = tap[f]
            _sandwich(X, D, T, Y, nf)
            for i in range(b):
                for j in range(b):
                    into, value = dst[f0:f0 + nf, i, j], Y[i, j]
                    for f in range(nf):
                        into[f] = value[f]


@njit(parallel=True, cache=True)
def shift_into(x, top, left, xpad):
    """xpad[n, c, i, j] = x[n, c, i - top, j - left] where that lies inside x, else 0.

    A positive offset pads x with zeros; a negative one crops it (rows or columns of x that fall outside xpad
    are dropped)."""
    N, C, H, W = x.shape
    Hpad, Wpad = xpad.shape[2], xpad.shape[3]
    i0, i1 = valid_range(-top, 1, H, Hpad)                 # rows of xpad that x covers
    j0, j1 = valid_range(-left, 1, W, Wpad)
    j0, j1 = min(j0, Wpad), min(j1, Wpad)                 # x wholly right of xpad: no column
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        for i in range(Hpad):
            row = xpad[n, c, i]
            if i0 <= i < i1:
                dst, src = row[j0:j1], x[n, c, i - top, j0 - left:j1 - left]
                for j in range(j0):
                    row[j] = 0.0
                for j in range(j1 - j0):
                    dst[j] = src[j]
                for j in range(j1, Wpad):
                    row[j] = 0.0
            else:
                for j in range(Wpad):
                    row[j] = 0.0


@njit(parallel=True, cache=True)
def tile_transform(xpad, X, m, q0, tiles_w, rows_per_block, scratch, V):
    """V[:, :, c, q*tiles_w + tx] = X d X^T for the a x a tile d (a = X's columns) at (ty*m, tx*m) of channel
    c, for the tile rows q0 + q (flattened over the batch: q0 + q = n * tiles_h + ty).

    xpad: (N, C, Hpad, Wpad) with tiles_h = (Hpad - a) // m + 1 rows of tiles; V: (b, b, C, P) with
    P = (tile rows in this chunk) * tiles_w. One item is one channel and a block of rows_per_block tile rows;
    scratch: (threads, >= scratch_elements(a, b, rows_per_block * tiles_w))."""
    C, Hpad = xpad.shape[1], xpad.shape[2]
    b, a = X.shape
    tiles_h = (Hpad - a) // m + 1
    n_rows = V.shape[3] // tiles_w
    n_blocks = (n_rows + rows_per_block - 1) // rows_per_block
    n_threads = scratch.shape[0]
    for thread in prange(n_threads):
        D, T, Y = _carve(scratch[thread], a, b, rows_per_block * tiles_w)
        start, stop = share(C * n_blocks, thread, n_threads)
        for item in range(start, stop):
            c, first_row = item // n_blocks, (item % n_blocks) * rows_per_block
            rows = min(rows_per_block, n_rows - first_row)
            P = rows * tiles_w
            for q in range(rows):
                n, ty = (q0 + first_row + q) // tiles_h, (q0 + first_row + q) % tiles_h
                for k in range(a):
                    for l in range(a):
                        src = xpad[n, c, ty * m + k, l::m]             # column l of every tile
                        dst = D[k, l, q * tiles_w:(q + 1) * tiles_w]
                        for tx in range(tiles_w):
                            dst[tx] = src[tx]
            _sandwich(X, D, T, Y, P)
            p0 = first_row * tiles_w
            for i in range(b):
                for j in range(b):
                    dst, src = V[i, j, c, p0:p0 + P], Y[i, j]
                    for p in range(P):
                        dst[p] = src[p]


@njit(parallel=True, cache=True)
def output_transform(M, AT, q0, tiles_w, rows_per_block, scratch, out):
    """out[n, k, ty*m + i, tx*m + j] = (A^T M[:, :, k, p] A)[i, j], cropped to out's Ho x Wo.

    M: (alpha, alpha, K, P) for the tile rows q0 .. q0 + P / tiles_w - 1; out: (N, K, Ho, Wo). One item is
    one output channel and a block of rows_per_block tile rows; scratch: (threads, >= scratch_elements(alpha, m,
    rows_per_block * tiles_w))."""
    K, Ho = out.shape[1], out.shape[2]
    m, alpha = AT.shape
    tiles_h = (Ho + m - 1) // m
    n_rows = M.shape[3] // tiles_w
    n_blocks = (n_rows + rows_per_block - 1) // rows_per_block
    n_threads = scratch.shape[0]
    for thread in prange(n_threads):
        D, T, Y = _carve(scratch[thread], alpha, m, rows_per_block * tiles_w)
        start, stop = share(K * n_blocks, thread, n_threads)
        for item in range(start, stop):
            k, first_row = item // n_blocks, (item % n_blocks) * rows_per_block
            rows = min(rows_per_block, n_rows - first_row)
            P, p0 = rows * tiles_w, first_row * tiles_w
            for i in range(alpha):
                for j in range(alpha):
                    dst, src = D[i, j], M[i, j, k, p0:p0 + P]
                    for p in range(P):
                        dst[p] = src[p]
            _sandwich(AT, D, T, Y, P)
            for q in range(rows):
                n, ty = (q0 + first_row + q) // tiles_h, (q0 + first_row + q) % tiles_h
                for i in range(min(m, Ho - ty * m)):
                    for j in range(m):
                        dst = out[n, k, ty * m + i, j::m]            # column j of every tile, cropped
                        src = Y[i, j, q * tiles_w:(q + 1) * tiles_w]
                        for tx in range(dst.shape[0]):
                            dst[tx] = src[tx]


@njit(parallel=True, cache=True)
def outer_products(U, V, M):
    """M[xi, g, k, p] = U[xi, g, k, 0] * V[xi, g, 0, p]: the products of a layer with one input channel per
    group, an outer product per (xi, g). U: (a2, G, Kg, 1) (may be a strided view); V: (a2, G, 1, P); M: (a2, G,
    Kg, P). NumPy's broadcasting multiply did the same, but buffered its stride-0 operands (up to 64 KiB)."""
    a2, groups, Kg = U.shape[0], U.shape[1], U.shape[2]
    P = V.shape[3]
    for item in prange(a2 * groups):
        xi, g = item // groups, item % groups
        src = V[xi, g, 0]
        for k in range(Kg):
            u, dst = U[xi, g, k, 0], M[xi, g, k]
            for p in range(P):
                dst[p] = u * src[p]


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
        d, tt, y = _carve(scratch[thread], 6, 6, TB)
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
