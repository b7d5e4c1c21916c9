"""The Numba loop nests of ``direct_channels`` (see channels.py for the maths): a row of output pixels in
tiles of eight, each pixel's output channels in the vector lanes, summed over every tap in registers (the
tiles: ``convalgos.kernels.lane_tiles``).
"""
from __future__ import annotations

from numba import njit, prange

from ..kernels.loops import share
from ..kernels.lane_tiles import ROWS, narrow_tile, wide_tile
from ..kernels.simd import lanes, load, store8, transpose8

#: output pixels of one register tile (consecutive pixels of one output row): the tile's rows.
PIXELS = ROWS


@njit(parallel=True, cache=True)
def channel_rows(xp, wp, xoff, groups, group_pitch, sh, sw, Wp, wide, chunk, turn, stage, out):
    """out[n, g*Kg + k, i, j] = sum over taps q of wp[g*B + k // V, q*V + k % V] * xp[n, g*group_pitch + xoff[q]
    + i*sh*Wp + j*sw], for each of the ``groups`` groups g of Kg = K // groups output channels; V channels per
    block (2L when ``wide``, else L), B = wp.shape[0] // groups blocks per group (channels past Kg are zero).
    xp: (N, one image's padded planes, flat). A row's last tile ends at its last pixel (recomputing a few of the
    tile before: the same sums, stored again) where the row has at least 8 pixels, so reads stay inside the
    row's inputs; a shorter row's tile reads up to 8*sw elements past them (junk pixels, never stored: the
    caller leaves that much room after the last image).

    Blocking: a work item is a run of tiles of one output row of one image and a chunk of ``chunk`` channel
    blocks of one group; for each tile, every block of the chunk in turn, so the tile's inputs are read from
    the cache once per block while the chunk's packed weights (``chunk`` x taps x V) stay in it. Rows are cut
    into runs of tiles only as far as the threads need items. Each thread owns stage[thread] (8 pixels x V
    channels): with ``turn`` (out's rows contiguous, L >= 8) a whole tile is turned in registers on its way
    out, else copied channel by channel."""
    N, K, Ho, Wo = out.shape
    V = 2 * lanes(wp[0]) if wide else lanes(wp[0])
    blocks, Kg = wp.shape[0], K // groups
    per_group = blocks // groups
    chunks = (per_group + chunk - 1) // chunk
    tiles = (Wo + PIXELS - 1) // PIXELS
    n_threads = stage.shape[0]
    rows = N * groups * chunks * Ho
    runs = min(tiles, max(1, (2 * n_threads + rows - 1) // rows))
    for thread in prange(n_threads):
        start, stop = share(rows * runs, thread, n_threads)
        st = stage[thread]
        for item in range(start, stop):
            row, run = item // runs, item % runs
            n, g, c, i = row // (groups * chunks * Ho), (row // (chunks * Ho)) % groups, (row // Ho) % chunks, row % Ho
            xr = xp[n]
            for tile in range(run * tiles // runs, (run + 1) * tiles // runs):
                j0 = min(tile * PIXELS, max(0, Wo - PIXELS))
                at = g * group_pitch + i * sh * Wp + j0 * sw
                for b in range(g * per_group + c * chunk, g * per_group + min(per_group, (c + 1) * chunk)):
                    first = (b % per_group) * V
                    if wide:
                        wide_tile(xr, wp[b], xoff, at, sw, st, 0)
                    else:
                        narrow_tile(xr, wp[b], xoff, at, sw, st, 0)
                    k0, count = g * Kg + first, min(V, Kg - first)
                    if j0 + PIXELS <= Wo and turn:      # a whole tile, turned in registers
                        _turned_store(st, V, count, out, n, k0, i, j0)
                    elif j0 + PIXELS <= Wo:             # eight stores a channel, unrolled (a loop to
                        # min(8, Wo - j0) made backward-data at stride 2 1.2-1.3x slower, measured)
                        for kk in range(count):
                            for p in range(PIXELS):
                                out[n, k0 + kk, i, j0 + p] = st[p * V + kk]
                    else:
                        for kk in range(count):
                            for p in range(Wo - j0):
                                out[n, k0 + kk, i, j0 + p] = st[p * V + kk]


@njit(cache=True, inline="always")
def _turned_store(st, V, count, out, n, k0, i, j0):
    """out[n, k0 + kk, i, j0:j0 + 8] = the tile's eight pixels of channel kk (kk < count), from the stage
    (pixel p's V channels at st[p*V:]): each vector of L channels read back for the 8 pixels, turned in
    registers (``simd.transpose8``: 24 shuffles) and stored 8 pixels a channel, where a channel by channel
    copy makes 8 scalar stores of each (out's rows contiguous; L >= 8)."""
    L = lanes(st)
    for v0 in range(0, V, L):
        u = transpose8(load(st, v0), load(st, V + v0), load(st, 2 * V + v0), load(st, 3 * V + v0),
                       load(st, 4 * V + v0), load(st, 5 * V + v0), load(st, 6 * V + v0), load(st, 7 * V + v0))
        for q in range(8):
            for h in range(L // 8):
                if v0 + 8 * h + q < count:
                    store8(out, (n, k0 + v0 + 8 * h + q, i, j0), u[q], h)


@njit(parallel=True, cache=True)
def pack_weight(w, swap, groups, rows, cols, out):
    """out[g*B + b, q*V + v] = the weight of output channel o = b*V + v of group g at tap q = (i, a, c) (zero
    for o past the group's last), B = out.shape[0] // groups, V = out.shape[1] // taps: w[g*Kg + o, i, rows[a],
    cols[c]], or with ``swap`` (backward-data: the layer's input channels are the outputs) w[g*Kg + i, o,
    rows[a], cols[c]]."""
    K, Cg = w.shape[0], w.shape[1]
    Kg = K // groups
    outputs, inputs = (Cg, Kg) if swap else (Kg, Cg)
    per_group = out.shape[0] // groups
    V = out.shape[1] // (inputs * rows.size * cols.size)
    for row in prange(out.shape[0]):
        g, first = row // per_group, (row % per_group) * V
        packed = out[row]
        packed[:] = 0.0
        for v in range(min(V, outputs - first)):    # w read along its rows, the form written with stride V
            q = v
            for i in range(inputs):
                for a in range(rows.size):
                    for c in range(cols.size):
                        if swap:
                            packed[q] = w[g * Kg + i, first + v, rows[a], cols[c]]
                        else:
                            packed[q] = w[g * Kg + first + v, i, rows[a], cols[c]]
                        q += V


@njit(cache=True)
def tap_offsets(row_offsets, col_offsets, plane, Wp, taps):
    """taps[q] = where tap q = (i, a, c) reads output pixel (0, 0): channel i's plane (``plane`` elements
    each), row row_offsets[a], column col_offsets[c] of its pitch-Wp rows."""
    nr, nc = row_offsets.size, col_offsets.size
    for q in range(taps.size):
        i, a, c = q // (nr * nc), (q // nc) % nr, q % nc
        taps[q] = i * plane + row_offsets[a] * Wp + col_offsets[c]
