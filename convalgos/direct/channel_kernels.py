"""The Numba loop nests of ``direct_channels`` (see channels.py for the maths): a row of output pixels in
tiles of eight, each pixel's output channels in the vector lanes, summed over every tap in registers.

The wide and narrow tiles are near-copies on purpose: Numba cannot write N accumulators once.
"""
from __future__ import annotations

from numba import njit, prange

from ..kernels.loops import share
from ..kernels.simd import fma, lanes, load, splat, store, zeros

#: output pixels of one register tile (consecutive pixels of one output row).
PIXELS = 8


@njit(cache=True, inline="always")
def wide_tile(xr, wb, xoff, at, sw, st):
    """st[p*2L:(p+1)*2L] = sum over taps q of xr[at + xoff[q] + p*sw] * wb[q*2L:(q+1)*2L] for the 8 pixels p:
    two vectors of output channels (2L) x 8 pixels, sixteen accumulators that stay in registers over every
    tap; per tap two loads of w and eight broadcasts of x feed sixteen multiply-adds."""
    L = lanes(wb)
    V = 2 * L
    a00, a01, a10, a11 = zeros(wb), zeros(wb), zeros(wb), zeros(wb)
    a20, a21, a30, a31 = zeros(wb), zeros(wb), zeros(wb), zeros(wb)
    a40, a41, a50, a51 = zeros(wb), zeros(wb), zeros(wb), zeros(wb)
    a60, a61, a70, a71 = zeros(wb), zeros(wb), zeros(wb), zeros(wb)
    for q in range(xoff.size):
        i = at + xoff[q]
        w0, w1 = load(wb, q * V), load(wb, q * V + L)
        u = splat(xr, i)
        a00, a01 = fma(u, w0, a00), fma(u, w1, a01)
        u = splat(xr, i + sw)
        a10, a11 = fma(u, w0, a10), fma(u, w1, a11)
        u = splat(xr, i + 2 * sw)
        a20, a21 = fma(u, w0, a20), fma(u, w1, a21)
        u = splat(xr, i + 3 * sw)
        a30, a31 = fma(u, w0, a30), fma(u, w1, a31)
        u = splat(xr, i + 4 * sw)
        a40, a41 = fma(u, w0, a40), fma(u, w1, a41)
        u = splat(xr, i + 5 * sw)
        a50, a51 = fma(u, w0, a50), fma(u, w1, a51)
        u = splat(xr, i + 6 * sw)
        a60, a61 = fma(u, w0, a60), fma(u, w1, a61)
        u = splat(xr, i + 7 * sw)
        a70, a71 = fma(u, w0, a70), fma(u, w1, a71)
    for p, (lo, hi) in enumerate(((a00, a01), (a10, a11), (a20, a21), (a30, a31),
                                  (a40, a41), (a50, a51), (a60, a61), (a70, a71))):
        store(st, p * V, lo)
        store(st, p * V + L, hi)


@njit(cache=True, inline="always")
def narrow_tile(xr, wb, xoff, at, sw, st):
    """``wide_tile`` for one vector of output channels (L): eight accumulators, for layers of at most L
    channels and for CPUs with 16 vector registers (sixteen accumulators would spill)."""
    L = lanes(wb)
    a0, a1, a2, a3 = zeros(wb), zeros(wb), zeros(wb), zeros(wb)
    a4, a5, a6, a7 = zeros(wb), zeros(wb), zeros(wb), zeros(wb)
    for q in range(xoff.size):
        i = at + xoff[q]
        w0 = load(wb, q * L)
        a0, a1 = fma(splat(xr, i), w0, a0), fma(splat(xr, i + sw), w0, a1)
        a2, a3 = fma(splat(xr, i + 2 * sw), w0, a2), fma(splat(xr, i + 3 * sw), w0, a3)
        a4, a5 = fma(splat(xr, i + 4 * sw), w0, a4), fma(splat(xr, i + 5 * sw), w0, a5)
        a6, a7 = fma(splat(xr, i + 6 * sw), w0, a6), fma(splat(xr, i + 7 * sw), w0, a7)
    for p, a in enumerate((a0, a1, a2, a3, a4, a5, a6, a7)):
        store(st, p * L, a)


@njit(parallel=True, cache=True)
def channel_rows(xp, wp, xoff, groups, group_pitch, sh, sw, Wp, wide, stage, out):
    """out[n, g*Kg + k, i, j] = sum over taps q of wp[g*B + k // V, q*V + k % V] * xp[n, g*group_pitch + xoff[q]
    + i*sh*Wp + j*sw], for each of the ``groups`` groups g of Kg = K // groups output channels; V channels per
    block (2L when ``wide``, else L), B = wp.shape[0] // groups blocks per group (channels past Kg are zero).
    xp: (N, one image's padded planes, flat), read up to 8*sw elements past a row's end (junk pixels of a last
    tile; the caller leaves that much room after the last image). A work item is one output row of one channel
    block of one image; each thread owns stage[thread] (8 pixels x V channels), copied out channel by channel."""
    N, K, Ho, Wo = out.shape
    V = 2 * lanes(wp[0]) if wide else lanes(wp[0])
    blocks, Kg = wp.shape[0], K // groups
    per_group = blocks // groups
    tiles = (Wo + PIXELS - 1) // PIXELS
    n_items = N * blocks * Ho
    n_threads = stage.shape[0]
    for thread in prange(n_threads):
        start, stop = share(n_items, thread, n_threads)
        st = stage[thread]
        for item in range(start, stop):
            n, b, i = item // (blocks * Ho), (item // Ho) % blocks, item % Ho
            g, first = b // per_group, (b % per_group) * V
            xr, wb = xp[n], wp[b]
            for tile in range(tiles):
                j0 = tile * PIXELS
                at = g * group_pitch + i * sh * Wp + j0 * sw
                if wide:
                    wide_tile(xr, wb, xoff, at, sw, st)
                else:
                    narrow_tile(xr, wb, xoff, at, sw, st)
                for kk in range(min(V, Kg - first)):
                    orow = out[n, g * Kg + first + kk, i]
                    for p in range(min(PIXELS, Wo - j0)):
                        orow[j0 + p] = st[p * V + kk]


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
