"""The Numba kernel of "winograd_fused_4x4" (``convalgos.winograd_fused``): one block of tiles at a time, its
input transform, its products (``convalgos.kernels.blocks``' register blocks) and its output transform in the thread's
own scratch. The transforms are ``kernels.sandwich_block``, shared with the non-fused passes."""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..kernels.blocks import BLOCK, channel_block, channel_blocks, register_block
from ..kernels.loops import share
from .block_kernels import sandwich_block


@njit(parallel=True, cache=True)
def fused_correlate(pad, U, BT, AT, m, tiles_h, tiles_w, taps, V, M, D, T, Y, out):
    """out = the 3x3 correlation (stride 1) of pad with the filters whose transforms are U, one block of TB
    tiles at a time, every step of a block in the thread's own scratch (``winograd_fused``):

        V[xi, c, t] = (B^T d[c, t] B)[xi]                  input transform of the block's tiles, every channel
        M[k, xi, t] = sum_c U[xi, g, k, c] V[xi, c, t]     alpha^2 products: direct's register blocks
        out tile t of channel k = A^T M[k, :, t] A          output transform, cropped to out

    pad: (N, Cin, Hpad, Wpad) contiguous; U: (alpha^2, groups, Kout_g, Cin_g); out: (N, Kout, Ho, Wo)
    contiguous. Tiles are numbered n-major over the tiles_h x tiles_w grid of each image; tile t of a block is
    lane t of every vector. taps: (2, Cin_g), taps[0] = 0..Cin_g-1 and taps[1] = 0, the products' tap table.
    Scratch per thread: V (alpha^2, Cin_g, TB), M (Kout_g, alpha^2, TB), D and T (alpha, alpha, TB), Y (m^2, 1, TB).
    One item is one group, one block of TB tiles and a part of the group's output channels: the whole group,
    unless there are fewer than two blocks per thread (a deep layer on a small image), when the channel blocks
    are split over parts (each part transforms the block's input again) so that every thread has work."""
    N, Cin, Hpad, Wpad = pad.shape
    a2, groups, Kg, Cg = U.shape
    a = AT.shape[1]
    Kout, Ho, Wo = out.shape[1], out.shape[2], out.shape[3]
    n_threads, TB = V.shape[0], V.shape[3]
    per_image = tiles_h * tiles_w
    P = N * per_image
    n_blocks = (P + TB - 1) // TB
    blocks = channel_blocks(Kg, BLOCK)
    n_parts = min(blocks, max(1, -(-2 * n_threads // (groups * n_blocks))))
    source, target = pad.reshape(-1), out.reshape(-1)
    for thread in prange(n_threads):
        d, tt, y = D[thread], T[thread], Y[thread]
        vq, mk = V[thread].reshape(1, a2 * Cg, TB), M[thread].reshape(Kg, a2 * TB)
        base, obase = np.zeros(TB, np.int64), np.zeros(TB, np.int64)
        rows, cols = np.zeros(TB, np.int64), np.zeros(TB, np.int64)
        start, stop = share(groups * n_blocks * n_parts, thread, n_threads)
        for item in range(start, stop):
            g, p0, part = item // (n_blocks * n_parts), (item // n_parts) % n_blocks * TB, item % n_parts
            b0, b1 = part * blocks // n_parts, (part + 1) * blocks // n_parts
            k0, last = channel_block(Kg, b0, BLOCK)[0], channel_block(Kg, b1 - 1, BLOCK)
            k1 = last[0] + last[1]
            count = min(TB, P - p0)
            for t in range(TB):                   # a block's missing tiles repeat its tiles: read, never written
                tile = p0 + t % count
                n, ty, tx = tile // per_image, (tile // tiles_w) % tiles_h, tile % tiles_w
                base[t] = ((n * Cin + g * Cg) * Hpad + ty * m) * Wpad + tx * m
                obase[t] = ((n * Kout + g * Kg) * Ho + ty * m) * Wo + tx * m
                rows[t], cols[t] = min(m, Ho - ty * m), min(m, Wo - tx * m)
            whole = rows.min() == m and cols.min() == m
            in_row = count == TB and base[TB - 1] - base[0] == 4 * (TB - 1)      # m = 4: F(4x4, 3x3)
            for c in range(Cg):                                   # input transform
                for k in range(a):
                    if in_row:                    # one tile row: six interleaved stride-4 runs, one loop
                        at = base[0] + c * Hpad * Wpad + k * Wpad
                        d0, d1, d2, d3, d4, d5 = d[k, 0], d[k, 1], d[k, 2], d[k, 3], d[k, 4], d[k, 5]
                        for t in range(TB):
                            q = at + 4 * t
                            d0[t], d1[t], d2[t] = source[q], source[q + 1], source[q + 2]
                            d3[t], d4[t], d5[t] = source[q + 3], source[q + 4], source[q + 5]
                    else:
                        for l in range(a):
                            into, at = d[k, l], c * Hpad * Wpad + k * Wpad + l
                            for t in range(TB):
                                into[t] = source[base[t] + at]
                sandwich_block(BT, d, tt, V[thread], c)
            for xi in range(a2):                                  # the products
                for b in range(b0, b1):
                    first, width = channel_block(Kg, b, BLOCK)
                    register_block(vq, U[xi, g], taps, 0, xi * Cg, first, width, 0, mk[first:], xi * TB)
            for k in range(k0, k1):                               # output transform
                sandwich_block(AT, M[thread, k].reshape(a, a, TB), tt, y, 0)
                for i in range(m):
                    for j in range(m):
                        value, at = y[i * m + j, 0], k * Ho * Wo + i * Wo + j
                        if whole:                         # every tile of the block inside the output
                            for t in range(count):
                                target[obase[t] + at] = value[t]
                        else:
                            for t in range(count):
                                if i < rows[t] and j < cols[t]:
                                    target[obase[t] + at] = value[t]
