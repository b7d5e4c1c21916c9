"""Lane tiles: eight rows of broadcasts times one or two vectors of lanes, summed over taps in registers.

    st[s0 + p*V + v] = sum over taps q of xr[at + xoff[q] + p*sw] * wb[q*V + v]      p < 8, v < V (2L or L lanes)

An outer-product register tile: per tap, one or two vector loads of ``wb`` and eight scalar broadcasts of ``xr``
feed 8 or 16 multiply-adds, the accumulators never leaving the registers. ``direct_channels`` runs it with the
rows as 8 output pixels and the lanes as output channels (wb: the packed weight); the fused Winograd
backward-filter with the rows as 8 output channels k, the lanes as input channels c and the taps as tiles
(the sum over a block of tiles of dy's transform times x's).

The wide and narrow tiles are near-copies on purpose: Numba cannot write N accumulators once.
"""
from __future__ import annotations

from numba import njit

from .simd import REGISTER_BYTES, REGISTERS, fma, lanes, load, splat, store, zeros

#: rows of one tile.
ROWS = 8


def tile_lanes(channels: int, itemsize: int) -> tuple[bool, int]:
    """(wide, V): the tile for ``channels`` lanes' worth of channels: ``wide_tile`` (V = 2L, sixteen
    accumulators) where the CPU has 32 vector registers and the channels fill more than one vector, else
    ``narrow_tile`` (V = L)."""
    L = REGISTER_BYTES // itemsize
    wide = REGISTERS >= 32 and channels > L
    return wide, 2 * L if wide else L


@njit(cache=True, inline="always")
def wide_tile(xr, wb, xoff, at, sw, st, s0):
    """st[s0 + p*2L:][:2L] = sum over taps q of xr[at + xoff[q] + p*sw] * wb[q*2L:(q+1)*2L] for the 8 rows p:
    two vectors (2L lanes) x 8 rows, sixteen accumulators that stay in registers over every tap; per tap two
    vector loads of wb and eight broadcasts of xr feed sixteen multiply-adds."""
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
        store(st, s0 + p * V, lo)
        store(st, s0 + p * V + L, hi)


@njit(cache=True, inline="always")
def narrow_tile(xr, wb, xoff, at, sw, st, s0):
    """``wide_tile`` for one vector (L lanes): eight accumulators, for lanes that fill one vector only and for
    CPUs with 16 vector registers (sixteen accumulators would spill)."""
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
        store(st, s0 + p * L, a)
