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
- ``block_kernels.py``: the same transforms for a 6-column X on one block of arrays held in registers
  (winograd_4x4's input transforms, and the fused pass's).

The transform kernels split their items statically over the threads; each thread carves its D, T and Y out of
its own row of ``scratch`` (threads x elements, a buffer the algorithm keeps and counts in ``workspace_bytes``:
nothing is allocated inside a kernel, and repeated calls pay no page faults for fresh scratch).
``scratch_elements`` says how many elements a thread needs for a batch of ``batch`` arrays.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..kernels.loops import share, valid_range
from ..kernels.simd import REGISTER_BYTES


def block_tiles(dtype) -> int:
    """TB: the tiles ``block_transform`` (and the fused passes' blocks) take at a time, two vector registers' lanes."""
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
def carve(row, a, b, batch):
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
        D, T, Y = carve(scratch[thread], a, b, block)
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
        D, T, Y = carve(scratch[thread], a, b, rows_per_block * tiles_w)
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
        D, T, Y = carve(scratch[thread], alpha, m, rows_per_block * tiles_w)
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
